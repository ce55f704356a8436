// Package recoverytest proves a flow exactly-once in one call: Prove runs
// the flow's request once cleanly, then once for every failpoint its
// declaration names (before and after each commit, after each external
// call) and every way to resume (the client's retry, the completer), and
// asserts, for each, what the clean run did: as many effects at the remote
// side, the same status, the same answer but for what differs between two
// clean runs (ids, times), an answer every later retry gets byte for byte,
// the key's audit trail in the same order, and, given Case.State, the
// local state the answer speaks of, read anew, as the clean runs left it
// (but for ids and times). Then, given the remote
// side's faults (Case.Faults: a failure before the work, an answer lost
// after it, a call held past the lock timeout), it meets each at each
// external call, in the test's own process, resumed the same two ways and
// held to the same answer, effects and audit trail (faults.go). Every run
// is also held to Case.Want, what the request should be answered, and to
// the child keys its remote side saw (a Server notes them): each call
// carries one, and a killed attempt and its resume send no more than a
// clean run does.
//
// The attempt that crashes runs in a process of its own, killed at the
// failpoint: the test binary runs again, told to run only the test that
// called Prove and, in it, only that attempt, with the failpoint's action
// "crash" (SIGKILL). Nothing after the failpoint runs, no deferred function,
// no rollback but the database's own; the key is left where the last commit
// left it, locked by a process that is gone. The test resumes it, after the
// lock lapses, by a retry or by the completer, as a restarted service would.
//
// The killed process must work on the test's own database and call the
// test's own remote side, so that what it did is counted. Everything the
// test function does before Prove runs again in that process, from the top,
// so what it makes there (a database, a server) it makes through Shared,
// Database or Server: in the test's process they make it and remember its
// address; in the killed process they return that address and make nothing.
// One Prove per test or subtest: the killed process runs the first it meets.
//
//	func TestProve_customers(t *testing.T) {
//		pool := recoverytest.Database(t, createTables)        // the test's database
//		url := recoverytest.Server(t, "remote", remoteHandler) // the remote side, over HTTP
//		recoverytest.Prove(t, recoverytest.Case{Pool: pool, Flow: flow(url), ...})
//	}
package recoverytest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/failpoint"
	"github.com/example/payments/internal/recovery"
)

// Case is a flow to prove and a request to run it with.
type Case struct {
	Pool *pgxpool.Pool
	Flow *recovery.Flow
	// Request makes the request, once per run (the clean one, then one per
	// crash and way to resume), each with a key of its own (its Key is
	// replaced) and Flow as its flow. It may prepare what the request acts
	// on (a payment to capture, say): what it does is not counted. It runs
	// in the test's process only; the killed one gets the request made
	// there, its Params as JSON (a flow reads them with Key.DecodeParams).
	Request func() recovery.Request
	// Effects counts what the remote side did (objects made, emails sent):
	// every run must add as many as the clean run. It runs in the test's
	// process only.
	Effects func() int
	// Config configures the engines (Pool and Failpoints are Prove's; the
	// killed attempt's LockTimeout is CrashLockTimeout).
	Config recovery.Config
	// State reads anew, after a run, the local state its answer speaks of
	// (the payment as a client would GET it, say), as JSON; nil leaves it
	// unchecked. Every resumed run must leave what two clean runs agree on
	// (all but ids and times), as its answer must: a flow can answer right
	// and still leave its record wrong. It runs in the test's process only.
	State func(recovery.Response) []byte
	// Faults are the remote side's faults, each met at each external call
	// of the flow (faults.go), in the test's process: no kill is needed
	// to meet them, and the killed process meets none.
	Faults []Fault
	// Want is what the request should be answered: required. Every run,
	// the clean ones first, is held to it, so that runs which agree with
	// each other on a wrong answer (a call refused in every run, say, and
	// stored as a decline) fail the proof instead of passing it.
	Want Want
}

// Want is the answer a Case's request should get.
type Want struct {
	// Status is the answer's HTTP status: 201, 402, ... Required.
	Status int
	// JSON, when set, is a JSON object the answer's body must contain:
	// every field it names, with that value (objects compared the same
	// way, field by field; other values, arrays included, as they are).
	// `{"status": "succeeded"}` holds a payment's answer to its status
	// and leaves its ids and times free.
	JSON string
}

// check says how resp differs from w, "" when it does not.
func (w Want) check(resp recovery.Response) string {
	if resp.Status != w.Status {
		return fmt.Sprintf("answered %d %s, the case wants %d", resp.Status, resp.Body, w.Status)
	}
	if w.JSON == "" {
		return ""
	}
	var want, got any
	if err := json.Unmarshal([]byte(w.JSON), &want); err != nil {
		return fmt.Sprintf("Case.Want.JSON is not JSON: %v", err)
	}
	if err := json.Unmarshal(resp.Body, &got); err != nil {
		return fmt.Sprintf("answered %d %s, not JSON; the case wants %s", resp.Status, resp.Body, w.JSON)
	}
	if d := contains("$", want, got); d != "" {
		return fmt.Sprintf("answered %s, where the case wants %s", resp.Body, d)
	}
	return ""
}

// contains says where got lacks what want holds, "" when it holds it all.
func contains(path string, want, got any) string {
	wm, ok := want.(map[string]any)
	if !ok {
		w, _ := json.Marshal(want)
		g, _ := json.Marshal(got)
		if string(w) != string(g) {
			return fmt.Sprintf("%s: %s, here %s", path, w, g)
		}
		return ""
	}
	gm, ok := got.(map[string]any)
	if !ok {
		return fmt.Sprintf("%s: an object", path)
	}
	for _, k := range slices.Sorted(maps.Keys(wm)) {
		g, ok := gm[k]
		if !ok {
			w, _ := json.Marshal(wm[k])
			return fmt.Sprintf("%s.%s: %s, here absent", path, k, w)
		}
		if d := contains(path+"."+k, wm[k], g); d != "" {
			return d
		}
	}
	return ""
}

// CrashLockTimeout is the lifetime the killed attempt gives the locks it
// takes: its key stays locked that long after the kill (a retry meanwhile
// is answered "in use"), then the resume takes it over. Short, so that the
// proof waits little. Should the attempt's lock lapse while it runs (a
// loaded machine), nothing changes: the lock is fenced by its token, which
// only a takeover moves, and nobody else tries the key meanwhile.
const CrashLockTimeout = 300 * time.Millisecond

// resumeWithin is how long a resume may take, the lapse of the dead
// attempt's lock included.
const resumeWithin = 30 * time.Second

// ways are how a crashed request is resumed.
var ways = []string{"retry", "completer"}

// Prove proves c's flow exactly-once; see the package's comment. It
// reports each failpoint the request does not reach (another path of the
// flow reaches it) in the test's log. In the process it runs to be killed,
// Prove never returns.
func Prove(t testing.TB, c Case) {
	t.Helper()
	if o := order(); o != nil {
		crashHere(t, c, o)
		return // never reached (crashHere exits): the killed process runs nothing more, no fault above all
	}
	if c.Want.Status == 0 {
		t.Fatalf("recoverytest: Case.Want.Status is required: what the request should be answered (a proof that only compares runs with each other passes a flow that is wrong in every run)")
	}
	ctx := context.Background()
	healthy := engine(t, c, c.Config, nil)
	calls := remoteCallsOf(t.Name()) // what the test's Servers saw, for the child keys
	external := len(externalSteps(c.Flow)) > 0
	requests := map[string]recovery.Request{}
	request := func(key string) recovery.Request { // the same request for every attempt with key
		req, ok := requests[key]
		if !ok {
			req = c.Request()
			req.Key, req.Flow = key, c.Flow
			requests[key] = req
		}
		return req
	}
	run := func(e *recovery.Engine, key string) (recovery.Response, error) {
		return e.Execute(ctx, request(key))
	}

	cleanRun := func(key string) (resp recovery.Response, effects int, trail []string, childKeys []string) {
		request(key)
		before, mark := c.Effects(), calls.mark()
		resp, err := run(healthy, key)
		if err != nil {
			t.Fatalf("recoverytest: the clean run %s failed: %v", key, err)
		}
		if d := c.Want.check(resp); d != "" {
			t.Fatalf("recoverytest: the clean run %s %s", key, d)
		}
		childKeys, missing := calls.since(mark)
		if missing > 0 {
			t.Fatalf("recoverytest: the clean run %s: the remote side saw %d call(s) with no Idempotency-Key: each external call must send its child key (Key.ChildKey)", key, missing)
		}
		return resp, c.Effects() - before, auditTrail(t, c, request(key)), childKeys
	}
	state := func(resp recovery.Response) []byte {
		if c.State == nil {
			return nil
		}
		return c.State(resp)
	}
	clean, effects, trail, cleanKeys := cleanRun("recoverytest-clean")
	switch {
	case external && calls.servers == 0:
		t.Logf("recoverytest: the flow calls a remote side, but no recoverytest.Server serves this test: its child keys are unchecked")
	case external:
		t.Logf("recoverytest: the clean run: %d effect(s) at the remote side, %d child key(s) sent", effects, len(cleanKeys))
	}
	cleanState := state(clean)
	cleanDone := time.Now()
	var answers, states []answered // checked against both clean runs, at the end

	for _, name := range c.Flow.Failpoints() {
		for _, way := range ways {
			key := "recoverytest-" + way + "-" + name
			req := request(key)
			before, mark, start := c.Effects(), calls.mark(), time.Now()
			pid, killed := killAt(t, name, req)
			if !killed {
				break // nor by the next way: the same request goes the same path
			}
			where := fmt.Sprintf("killed at %s, resumed by the %s", name, way)
			t.Logf("recoverytest: %s: process %d ran the request and was killed (SIGKILL) at %s", where, pid, name)
			v := &verdict{t: t, where: where}
			var (
				got recovery.Response
				err error
			)
			switch way {
			case "retry":
				got, err = retry(func() (recovery.Response, error) { return run(healthy, key) })
			case "completer":
				if err = complete(ctx, c, healthy, req); err == nil {
					got, err = run(healthy, key) // the stored answer (or, when the kill left no key, the request anew)
				}
			}
			if err != nil {
				t.Fatalf("recoverytest: %s: %v", where, err)
			}
			again, err := run(healthy, key)
			switch {
			case err != nil:
				t.Fatalf("recoverytest: %s: the retry after it: %v", where, err)
			case got.Status != clean.Status:
				v.Errorf("answered %d, the clean run %d", got.Status, clean.Status)
			case !again.Replayed || again.Status != got.Status || string(again.Body) != string(got.Body):
				v.Errorf("a retry got %d %s, not the answer %d %s", again.Status, again.Body, got.Status, got.Body)
			}
			if d := c.Want.check(got); d != "" {
				v.Errorf("%s", d)
			}
			answers = append(answers, answered{where, got.Body})
			states = append(states, answered{where, state(got)})
			if n := c.Effects() - before; n != effects {
				v.Errorf("%d effects at the remote side, the clean run %d", n, effects)
			}
			keys, missing := calls.since(mark)
			switch {
			case missing > 0:
				v.Errorf("the remote side saw %d call(s) with no Idempotency-Key", missing)
			case len(keys) != len(cleanKeys):
				v.Errorf("the remote side saw %d child key(s) %v for the killed attempt and its resume, the clean run %d: a resumed call must send the key the first attempt sent", len(keys), keys, len(cleanKeys))
			}
			if got := auditTrail(t, c, req); fmt.Sprint(got) != fmt.Sprint(trail) {
				v.Errorf("audit trail %v, the clean run's %v", got, trail)
			}
			v.end(start)
		}
	}

	// A second clean run, in a later second than the first (times in
	// answers are in seconds): what the two answers agree on (all but ids
	// and times) is what every resumed run must have answered.
	for time.Now().Unix() <= cleanDone.Unix() {
		time.Sleep(10 * time.Millisecond)
	}
	clean2, effects2, trail2, _ := cleanRun("recoverytest-clean-2")
	switch {
	case clean2.Status != clean.Status:
		t.Fatalf("recoverytest: two clean runs answered %d and %d", clean.Status, clean2.Status)
	case effects2 != effects:
		t.Fatalf("recoverytest: two clean runs made %d and %d effects at the remote side", effects, effects2)
	case fmt.Sprint(trail2) != fmt.Sprint(trail):
		t.Fatalf("recoverytest: two clean runs left audit trails %v and %v", trail, trail2)
	}
	same := sameParts(clean.Body, clean2.Body)
	for _, a := range answers {
		if d := same.differs(a.body); d != "" {
			t.Errorf("recoverytest: %s: answered %s, where the clean runs agree on %s", a.where, a.body, d)
		}
	}
	var sameState answerParts
	if c.State != nil {
		sameState = sameParts(cleanState, state(clean2))
		for _, a := range states {
			if d := sameState.differs(a.body); d != "" {
				t.Errorf("recoverytest: %s: left the state %s, where the clean runs agree on %s", a.where, a.body, d)
			}
		}
	}
	proveFaults(t, c, clean, same, sameState, effects, trail)
}

// answered is the answer a resumed run got.
type answered struct {
	where string
	body  []byte
}

// answerParts are the parts of an answer two clean runs agree on, by
// path ($.amount, $.data[0].status); the others (ids, times) are left out.
type answerParts struct {
	same   map[string]string // path to value, as JSON
	differ map[string]bool
}

// sameParts compares two clean runs' answers.
func sameParts(a, b []byte) answerParts {
	pa, pb := parts(a), parts(b)
	p := answerParts{same: map[string]string{}, differ: map[string]bool{}}
	for path, v := range pa {
		if w, ok := pb[path]; ok && v == w {
			p.same[path] = v
		} else {
			p.differ[path] = true
		}
	}
	for path := range pb {
		if _, ok := p.same[path]; !ok {
			p.differ[path] = true
		}
	}
	return p
}

// differs names the first part of body, in path order, that is not as
// both clean runs had it (absent where they had it, or present where
// neither did); "" when none.
func (p answerParts) differs(body []byte) string {
	got := parts(body)
	paths := slices.Collect(maps.Keys(p.same))
	for path := range got {
		if !p.differ[path] {
			paths = append(paths, path)
		}
	}
	slices.Sort(paths)
	for _, path := range paths {
		want, in := p.same[path]
		have, ok := got[path]
		switch {
		case !in:
			return fmt.Sprintf("%s: absent, here %s", path, have)
		case !ok:
			return fmt.Sprintf("%s: %s, here absent", path, want)
		case have != want:
			return fmt.Sprintf("%s: %s, here %s", path, want, have)
		}
	}
	return ""
}

// parts is a body's values by path, when it is JSON; otherwise the body
// itself, at path "$".
func parts(body []byte) map[string]string {
	out := map[string]string{}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		out["$"] = string(body)
		return out
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			out[path] = "{}" // that it is an object
			for k, x := range v {
				walk(path+"."+k, x)
			}
		case []any:
			out[path] = fmt.Sprintf("[%d]", len(v)) // its length
			for i, x := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), x)
			}
		default:
			b, _ := json.Marshal(v)
			out[path] = string(b)
		}
	}
	walk("$", v)
	return out
}

// engine is an engine of cfg on c's pool, with c's flow and failpoints fp.
func engine(t testing.TB, c Case, cfg recovery.Config, fp *failpoint.Set) *recovery.Engine {
	t.Helper()
	cfg.Pool, cfg.Failpoints = c.Pool, fp
	e, err := recovery.New(cfg, c.Flow)
	if err != nil {
		t.Fatalf("recoverytest: %v", err)
	}
	return e
}

// retry retries like a good client: while the key is in use (the killed
// attempt's lock has not lapsed), again, until resumeWithin.
func retry(attempt func() (recovery.Response, error)) (recovery.Response, error) {
	deadline := time.Now().Add(resumeWithin)
	for {
		resp, err := attempt()
		if !errors.Is(err, recovery.ErrKeyInUse) || time.Now().After(deadline) {
			return resp, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// complete runs the completer until it has finished req's key, or
// resumeWithin passes.
func complete(ctx context.Context, c Case, e *recovery.Engine, req recovery.Request) error {
	completer := recovery.NewCompleter(recovery.CompleterConfig{Engine: e, Grace: time.Nanosecond})
	deadline := time.Now().Add(resumeWithin)
	for {
		if _, err := completer.RunOnce(ctx); err != nil {
			return err
		}
		var point string
		err := c.Pool.QueryRow(ctx, "SELECT recovery_point FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2",
			req.UserID, req.Key).Scan(&point)
		switch {
		case errors.Is(err, pgx.ErrNoRows): // killed before the key's first commit: nothing to complete, the retry runs it
			return nil
		case err != nil:
			return err
		case point == string(recovery.Finished):
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the completer left the key at %s for %v", point, resumeWithin)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The killed process's exit codes when the failpoint did not kill it.
const (
	exitNotReached = 3 // the attempt finished without passing the failpoint
	exitFailed     = 4 // the attempt failed
)

// crashEnv names the environment variable that makes a run of the test
// binary a process to be killed: it holds the crashOrder. (internal/dbtest
// reads it too, to refuse making a database there.)
const crashEnv = "RECOVERYTEST_CRASH"

// crashOrder tells the process to be killed what to run.
type crashOrder struct {
	Test      string            // the test whose Prove runs the attempt
	Failpoint string            // the failpoint that kills it
	Request   crashRequest      // the attempt's request
	Shared    map[string]string // Shared's values in the test's process
}

// crashRequest is a recovery.Request as JSON.
type crashRequest struct {
	UserID            int64
	Key, Method, Path string
	Body              []byte
	Params            json.RawMessage
}

// order is this process's crashOrder, nil in a test's own process.
var order = sync.OnceValue(func() *crashOrder {
	v := os.Getenv(crashEnv)
	if v == "" {
		return nil
	}
	var o crashOrder
	if err := json.Unmarshal([]byte(v), &o); err != nil {
		panic(fmt.Sprintf("recoverytest: %s: %v", crashEnv, err))
	}
	return &o
})

// killAt runs req in a process of its own, the test binary running the
// test t only, killed at failpoint name. It returns the process's id and
// whether the failpoint killed it; false when the attempt finished without
// passing it (logged).
func killAt(t testing.TB, name string, req recovery.Request) (pid int, killed bool) {
	t.Helper()
	params, err := json.Marshal(req.Params)
	if err != nil {
		t.Fatalf("recoverytest: the request's params: %v", err)
	}
	o, err := json.Marshal(crashOrder{Test: t.Name(), Failpoint: name, Shared: sharedOf(t.Name()),
		Request: crashRequest{UserID: req.UserID, Key: req.Key, Method: req.Method, Path: req.Path, Body: req.Body, Params: params}})
	if err != nil {
		t.Fatalf("recoverytest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+runPattern(t.Name()), "-test.count=1", "-test.timeout=1m")
	cmd.Env = append(os.Environ(), crashEnv+"="+string(o))
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil {
		t.Fatalf("recoverytest: starting the process to be killed at %s: %v", name, err)
	}
	status, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ctx.Err() != nil:
		t.Fatalf("recoverytest: the process to be killed at %s ran past %v:\n%s", name, time.Minute, out)
	case status.Signaled() && status.Signal() == syscall.SIGKILL:
		return cmd.ProcessState.Pid(), true
	case status.Exited() && status.ExitStatus() == exitNotReached:
		t.Logf("recoverytest: %s: not reached by this request", name)
		return cmd.ProcessState.Pid(), false
	}
	t.Fatalf("recoverytest: the process to be killed at %s ended otherwise (%v):\n%s", name, cmd.ProcessState, out)
	return 0, false
}

// runPattern is the -test.run pattern that runs only the test named name.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// crashHere runs the attempt o orders, in the process to be killed, and
// exits: by the failpoint's kill, or with exitNotReached or exitFailed.
func crashHere(t testing.TB, c Case, o *crashOrder) {
	if t.Name() != o.Test {
		t.Fatalf("recoverytest: the process to be killed in %s met Prove in %s", o.Test, t.Name())
	}
	fp, err := failpoint.Parse(o.Failpoint + "=crash")
	if err != nil {
		t.Fatalf("recoverytest: %v", err)
	}
	cfg := c.Config
	cfg.LockTimeout = CrashLockTimeout
	r := o.Request
	_, err = engine(t, c, cfg, fp).Execute(context.Background(), recovery.Request{
		UserID: r.UserID, Key: r.Key, Method: r.Method, Path: r.Path, Body: r.Body, Params: r.Params, Flow: c.Flow,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "recoverytest: the attempt failed before %s: %v\n", o.Failpoint, err)
		os.Exit(exitFailed)
	}
	fmt.Fprintf(os.Stderr, "recoverytest: the attempt finished without passing %s\n", o.Failpoint)
	os.Exit(exitNotReached)
}

// shared holds Shared's values by test name, then by name.
var shared = struct {
	sync.Mutex
	values map[string]map[string]string
}{values: map[string]map[string]string{}}

// Shared returns what f returns, in the test's own process; in the process
// Prove runs to be killed, it returns the value f returned in the test's
// process (f does not run). Anything the test makes before Prove and the
// killed process must share (a database, a server standing in for the
// remote side) is made in f, which returns its address. name is unique
// within a test; a subtest sees its parents' values.
func Shared(t testing.TB, name string, f func() string) string {
	t.Helper()
	if o := order(); o != nil {
		v, ok := o.Shared[name]
		if !ok {
			t.Fatalf("recoverytest: Shared %q: not shared by %s", name, o.Test)
		}
		return v
	}
	v := f()
	shared.Lock()
	defer shared.Unlock()
	test := shared.values[t.Name()]
	if test == nil {
		test = map[string]string{}
		shared.values[t.Name()] = test
		t.Cleanup(func() { shared.Lock(); defer shared.Unlock(); delete(shared.values, t.Name()) })
	}
	if _, dup := test[name]; dup {
		t.Fatalf("recoverytest: Shared %q twice in %s", name, t.Name())
	}
	test[name] = v
	return v
}

// sharedOf is the values Shared gave the test name and its parents.
func sharedOf(name string) map[string]string {
	shared.Lock()
	defer shared.Unlock()
	out := map[string]string{}
	for test, values := range shared.values {
		if test == name || strings.HasPrefix(name, test+"/") {
			for k, v := range values {
				out[k] = v
			}
		}
	}
	return out
}

// Database returns a pool on the test's own database: in the test's
// process, a fresh migrated one (dbtest.NewURL) that setup, when not nil,
// prepares; in the process to be killed, the same database, as it is.
func Database(t testing.TB, setup func(*pgxpool.Pool) error) *pgxpool.Pool {
	t.Helper()
	var pool *pgxpool.Pool
	url := Shared(t, "database", func() string {
		url := dbtest.NewURL(t)
		pool = open(t, url)
		if setup != nil {
			if err := setup(pool); err != nil {
				t.Fatalf("recoverytest: setting the database up: %v", err)
			}
		}
		return url
	})
	if pool == nil {
		pool = open(t, url)
	}
	return pool
}

func open(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := db.Open(context.Background(), url, db.PoolConfig{MaxConns: 8})
	if err != nil {
		t.Fatalf("recoverytest: %v", err)
	}
	t.Cleanup(pool.Close) // before dbtest drops the database
	return pool
}

// Server serves the handler handler makes over HTTP, in the test's process,
// for the test, and returns its URL, also in the process to be killed,
// which calls the same server: the remote side remembers what both did.
//
// It notes the Idempotency-Key of every call that changes something (any
// method but GET and HEAD), for Prove: every such call must carry one, and
// a request killed and resumed must send the remote side no more keys than
// a clean run does.
func Server(t testing.TB, name string, handler func() http.Handler) string {
	t.Helper()
	return Shared(t, name, func() string {
		log := &callLog{}
		h := handler()
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				log.note(r.Header.Get("Idempotency-Key"))
			}
			h.ServeHTTP(w, r)
		}))
		t.Cleanup(s.Close)
		remotes.add(t, log)
		return s.URL
	})
}

// auditTrail is the actions of the audit records of req, in order.
func auditTrail(t testing.TB, c Case, req recovery.Request) []string {
	t.Helper()
	var id uuid.UUID
	if err := c.Pool.QueryRow(context.Background(),
		"SELECT id FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2", req.UserID, req.Key).Scan(&id); err != nil {
		t.Fatalf("recoverytest: key %s: %v", req.Key, err)
	}
	rows, err := c.Pool.Query(context.Background(), "SELECT action FROM audit_records WHERE idempotency_key_id = $1 ORDER BY id", id)
	if err != nil {
		t.Fatalf("recoverytest: %v", err)
	}
	defer rows.Close()
	var actions []string
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			t.Fatalf("recoverytest: %v", err)
		}
		actions = append(actions, a)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("recoverytest: %v", err)
	}
	return actions
}
