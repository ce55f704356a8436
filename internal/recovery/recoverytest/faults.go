package recoverytest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/example/payments/internal/recovery"
)

// Fault is a failure of the remote side that an external call can meet: a
// name, and a way to arm it for the next call of one step and to disarm
// it. The package that stands in for the remote side provides its faults
// (the Stripe simulator's: stripesimtest.Faults); Prove meets each at each
// external step of the flow's declaration.
type Fault struct {
	// Name names the fault in the test's messages: "error_500".
	Name string
	// Holds tells that the fault fails nothing but holds the call for
	// hold (Arm), longer than the lock timeout of the engine making it:
	// the heartbeat must keep the key's lock meanwhile, so that a retry
	// coming during the call is turned away (recovery.ErrKeyInUse) and the
	// completer claims nothing.
	Holds bool
	// Lag is how long after the call the remote side may still do the
	// call's work (a late 500's request executing after its answer):
	// Prove counts the effects no sooner.
	Lag time.Duration
	// Arm makes the next call of the external step (recovery.Phase.Step)
	// meet the fault; one that Holds holds it for hold.
	Arm func(step string, hold time.Duration) error
	// Armed tells whether the fault armed last still waits for its call:
	// after an attempt, that the attempt never made it.
	Armed func() bool
	// Disarm disarms what is left of the fault armed last.
	Disarm func()
}

// The settings of a fault proof. They keep it short: Prove runs every
// fault at every external step, two ways.
const (
	// faultLockTimeout is the lock timeout of the engine whose call a
	// fault Holds: short, so that the hold can outlast it in a test.
	faultLockTimeout = time.Second
	// faultHold is how long a fault that Holds holds the call: well past
	// faultLockTimeout, and past faultContend with time to spare for the
	// contenders' answers.
	faultHold = 5 * faultLockTimeout / 2
	// faultContend is when a retry and the completer contend for the key
	// whose call is held: after its lock would have lapsed without the
	// heartbeat.
	faultContend = 3 * faultLockTimeout / 2
	// faultSpentKeyGrace is the engines' Config.SpentKeyGrace when the
	// Case sets none: a child key the remote side reports spent (its
	// stored 500) is renewed within the proof, not a minute later.
	faultSpentKeyGrace = 200 * time.Millisecond
	// faultCompleterGrace is the completer's Grace: it takes a key 10 ms
	// after its last attempt, 20 ms after its next, and so on.
	faultCompleterGrace = 10 * time.Millisecond
	// faultDeadline bounds the resuming of one faulted request.
	faultDeadline = 30 * time.Second
)

// proveFaults proves c's flow against every fault of c.Faults at every
// external step of its declaration, resumed by the client's retry and by
// the completer, asserting what Prove asserts after a kill: the answer
// the clean runs gave (its status, what both agree on, replayed byte for
// byte), its effects at the remote side and its audit trail. A transient fault's attempt must
// answer transient (503 with Retry-After), never fail otherwise (500). A
// fault that Holds is met once: its call, held past a short lock timeout,
// is contended by a retry and by the completer, and answers itself.
//
// It runs in the test's process, engines and all: a fault needs no kill.
// Prove calls it last, and never in the process it kills.
func proveFaults(t testing.TB, c Case, clean recovery.Response, same, sameState answerParts, effects int, trail []string) {
	t.Helper()
	if len(c.Faults) == 0 {
		return
	}
	cfg := c.Config
	if cfg.SpentKeyGrace == 0 {
		cfg.SpentKeyGrace = faultSpentKeyGrace
	}
	short := cfg
	short.LockTimeout = faultLockTimeout
	p := &faultProof{t: t, c: c, clean: clean, same: same, sameState: sameState, effects: effects, trail: trail,
		healthy: engine(t, c, cfg, nil), held: engine(t, c, short, nil), calls: remoteCallsOf(t.Name())}
	p.completer = recovery.NewCompleter(recovery.CompleterConfig{Engine: p.healthy, Grace: faultCompleterGrace})
	for _, step := range externalSteps(c.Flow) {
		for _, f := range c.Faults {
			if f.Holds { // one held call meets both contenders: the hold is the proof's longest wait
				p.prove(step, f, heldWay)
				continue
			}
			for _, way := range ways {
				p.prove(step, f, way)
			}
		}
	}
}

// heldWay is the way a held call is met: while it is held, a retry and
// the completer contend for its key, and it answers itself.
const heldWay = "held"

// faultProof is what proveFaults proves each fault with.
type faultProof struct {
	t             testing.TB
	c             Case
	clean         recovery.Response
	same          answerParts // what the clean runs' answers agree on
	sameState     answerParts // and the states they left (Case.State)
	effects       int
	trail         []string
	healthy, held *recovery.Engine
	completer     *recovery.Completer
	calls         remoteCalls // what the test's Servers saw
}

// externalSteps names the external calls of the flow's declaration, in order.
func externalSteps(f *recovery.Flow) []string {
	var steps []string
	for _, s := range f.Steps {
		if name := s.Phase.Step(); name != "" && !slices.Contains(steps, name) {
			steps = append(steps, name)
		}
	}
	return steps
}

// prove runs a request whose call of step meets f, resumes it the way
// way, and checks what it did against the clean run.
func (p *faultProof) prove(step string, f Fault, way string) {
	t, ctx := p.t, context.Background()
	t.Helper()
	where := fmt.Sprintf("%s at %s, resumed by the %s", f.Name, step, way)
	if way == heldWay {
		where = fmt.Sprintf("%s at %s, contended by a retry and the completer", f.Name, step)
	}
	start := time.Now()
	v := &verdict{t: t, where: where}
	req := p.c.Request()
	req.Key, req.Flow = "recoverytest-"+f.Name+"-"+step+"-"+way, p.c.Flow
	before, mark := p.c.Effects(), p.calls.mark()
	if err := f.Arm(step, faultHold); err != nil {
		t.Fatalf("recoverytest: %s: arming: %v", where, err)
	}
	var first recovery.Response
	var err error
	settled := time.Now().Add(f.Lag) // when the call's work has surely landed
	if f.Holds {
		first, err = p.contend(req, f, v)
	} else {
		first, err = p.healthy.Execute(ctx, req)
	}
	armed := f.Armed()
	f.Disarm()
	if armed {
		t.Logf("recoverytest: %s: not reached by this request (%s)", where, answer(first, err))
		return
	}
	t.Logf("recoverytest: %s: the attempt that met it answered %s", where, answer(first, err))
	switch {
	case err == nil && f.Holds:
	case err == nil:
		t.Logf("recoverytest: %s: the attempt got past the fault (the call's own client retried it, say)", where)
	case !recovery.IsTransient(err): // a finding; the key is still resumable, and is resumed
		v.Errorf("the attempt answered %s (%v), not 503: a fault of the remote side leaves the request to resume", answer(first, err), err)
	}

	got, err := first, err
	switch {
	case err != nil && way == "retry":
		got, err = p.retry(req)
	case err != nil:
		got, err = p.complete(req, where)
	case way == heldWay: // answered: the completer must find nothing to do
		if run, rerr := p.completer.RunOnce(ctx); rerr != nil || run.Claimed != 0 {
			v.Errorf("a completer run after the answer: %+v, %v; want nothing claimed", run, rerr)
		}
	}
	if err != nil { // the key is left unfinished, for every later completer run to meet: stop
		t.Fatalf("recoverytest: %s: %v", where, err)
	}
	again, err := p.healthy.Execute(ctx, req)
	switch {
	case err != nil:
		v.Errorf("the retry after it: %v", err)
	case got.Status != p.clean.Status:
		v.Errorf("answered %d %s, the clean run %d", got.Status, got.Body, p.clean.Status)
	case !again.Replayed || again.Status != got.Status || string(again.Body) != string(got.Body):
		v.Errorf("a retry got %d %s, not the answer %d %s", again.Status, again.Body, got.Status, got.Body)
	}
	if d := p.c.Want.check(got); d != "" {
		v.Errorf("%s", d)
	}
	if d := p.same.differs(got.Body); d != "" {
		v.Errorf("answered %s, where the clean runs agree on %s", got.Body, d)
	}
	if p.c.State != nil {
		if st := p.c.State(got); p.sameState.differs(st) != "" {
			v.Errorf("left the state %s, where the clean runs agree on %s", st, p.sameState.differs(st))
		}
	}
	time.Sleep(time.Until(settled))
	if n := p.c.Effects() - before; n != p.effects {
		v.Errorf("%d effects at the remote side, the clean run %d", n, p.effects)
	}
	// The keys are not counted: a fault may spend a child key (a 500
	// stored under it), and the flow rightly goes on under a new one.
	if _, missing := p.calls.since(mark); missing > 0 {
		v.Errorf("the remote side saw %d call(s) with no Idempotency-Key", missing)
	}
	if got := auditTrail(t, p.c, req); fmt.Sprint(got) != fmt.Sprint(p.trail) {
		v.Errorf("audit trail %v, the clean run's %v", got, p.trail)
	}
	v.end(start)
}

// contend runs req on the engine with the short lock timeout, whose call
// the fault holds, and meanwhile, once the lock would have lapsed without
// the heartbeat, has a retry and then the completer contend for the key:
// the retry must be turned away (409), the completer claim nothing. It
// returns the attempt's answer (at once if the attempt never met f).
func (p *faultProof) contend(req recovery.Request, f Fault, v *verdict) (recovery.Response, error) {
	t, ctx := p.t, context.Background()
	t.Helper()
	type answered struct {
		resp recovery.Response
		err  error
	}
	done := make(chan answered, 1)
	go func() {
		resp, err := p.held.Execute(ctx, req)
		done <- answered{resp, err}
	}()
	contend := time.NewTimer(faultContend)
	defer contend.Stop()
	select {
	case a := <-done:
		if !f.Armed() { // else the request does not reach the step: Prove says so
			v.Errorf("the held attempt answered before the lock timeout had passed: the hold proves nothing")
		}
		return a.resp, a.err
	case <-contend.C:
	}
	if resp, err := p.healthy.Execute(ctx, req); !errors.Is(err, recovery.ErrKeyInUse) {
		v.Errorf("a retry during the held call got %s (%v), not 409: the heartbeat must keep the lock", answer(resp, err), err)
	}
	if run, err := p.completer.RunOnce(ctx); err != nil || run.Claimed != 0 {
		v.Errorf("a completer run during the held call: %+v, %v; want nothing claimed: the heartbeat must keep the lock", run, err)
	}
	select {
	case a := <-done:
		v.Errorf("the held call ended before its contenders were answered: the hold proves nothing")
		return a.resp, a.err
	default:
	}
	a := <-done
	return a.resp, a.err
}

// retry resumes req as its client does: again, after each transient
// answer's Retry-After, until the answer is final.
func (p *faultProof) retry(req recovery.Request) (recovery.Response, error) {
	deadline := time.Now().Add(faultDeadline)
	for {
		resp, err := p.healthy.Execute(context.Background(), req)
		switch {
		case err == nil:
			return resp, nil
		case !recovery.IsTransient(err):
			return resp, fmt.Errorf("a retry answered %s: %w", answer(resp, err), err)
		case time.Now().After(deadline):
			return resp, fmt.Errorf("no final answer after retrying for %v: %w", faultDeadline, err)
		}
		time.Sleep(min(max(recovery.RetryAfterOf(err), 10*time.Millisecond), time.Second))
	}
}

// complete resumes req by the completer alone, run after run until it
// finished the key, and returns the answer it stored.
func (p *faultProof) complete(req recovery.Request, where string) (recovery.Response, error) {
	ctx := context.Background()
	deadline := time.Now().Add(faultDeadline)
	for !p.finished(req) {
		run, err := p.completer.RunOnce(ctx)
		switch {
		case err != nil:
			return recovery.Response{}, fmt.Errorf("completer: %w", err)
		case run.NeedsAttention > 0:
			return recovery.Response{}, fmt.Errorf("the completer left the key to a person: %+v", run)
		case time.Now().After(deadline):
			return recovery.Response{}, fmt.Errorf("the completer had not finished the key after %v", faultDeadline)
		case run.Claimed == 0:
			time.Sleep(10 * time.Millisecond) // the key's backoff, or the spent key's grace
		}
	}
	p.t.Logf("recoverytest: %s: the completer finished the key", where)
	return p.healthy.Execute(ctx, req) // the stored answer
}

// finished tells whether req's key holds its final answer.
func (p *faultProof) finished(req recovery.Request) bool {
	var point string
	if err := p.c.Pool.QueryRow(context.Background(),
		"SELECT recovery_point FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2", req.UserID, req.Key).Scan(&point); err != nil {
		p.t.Fatalf("recoverytest: key %s: %v", req.Key, err)
	}
	return point == string(recovery.Finished)
}

// answer is what the HTTP layer answers for Execute's resp and err
// (docs/API.md section 2): the status, or 503 with its Retry-After for a
// transient failure, 409 for a key in use, and 500 for any other error.
func answer(resp recovery.Response, err error) string {
	switch {
	case err == nil:
		return fmt.Sprint(resp.Status)
	case recovery.IsTransient(err):
		if d := recovery.RetryAfterOf(err); d > 0 {
			return fmt.Sprintf("503 (transient, retry after %v)", d)
		}
		return "503 (transient)"
	case errors.Is(err, recovery.ErrKeyInUse), errors.Is(err, recovery.ErrLockLost):
		return "409"
	default:
		return "500"
	}
}
