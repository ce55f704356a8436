package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/example/payments/internal/db"
)

// RecoveryPoint names the last committed step of a request.
type RecoveryPoint string

// The first and last recovery points of every flow.
const (
	Started  RecoveryPoint = "started"
	Finished RecoveryPoint = "finished"
)

// Flow is a request's state machine, declared in one place and in order:
// its steps, each from one recovery point, with the phase that runs there
// and the recovery points that phase may move the key to. Every flow
// starts at Started and ends at Finished. Build it with NewFlow and From:
//
//	recovery.NewFlow("signup",
//		recovery.From(recovery.Started, recovery.LocalPhase(insertSignup), signupSaved),
//		recovery.From(signupSaved, recovery.ExternalPhase("welcome", send, record), recovery.Finished),
//	)
//
// The engine refuses, when it is built (New, Builder.Build), a flow whose step may move to a point no
// step starts from, or from which Finished cannot be reached; and, at run
// time, a phase that moves the key anywhere its step did not declare
// (ErrUndeclaredMove).
type Flow struct {
	// Name is stored with each key, so the completer can find the flow again.
	Name  string
	Steps []Step
	// ChildKeyPrefix begins the child key of every external call of the
	// flow (Key.ChildKey): the service's own name for its keys at the
	// remote side, "payments-" for the payment flows. It must never
	// change while a key of the flow may be unfinished.
	ChildKeyPrefix string
	// AfterCallFailpoint names the failpoint after each external call of
	// the flow, before its step's name: the service's own word for its
	// remote side ("after_stripe:" for the payment flows, as docs/API.md
	// section 6 names them). Empty is FailpointAfterCall.
	AfterCallFailpoint string
	// Remote names the remote side the flow's external calls go to, and
	// what a client is told while it cannot be reached (RemoteOf).
	Remote Remote
}

// Remote is the remote side of a flow's external calls (Stripe, a bank, a
// mailer), as its clients are told of it: Name for the logs, Unavailable
// the sentence that begins the answer to a request that found it
// unreachable, overloaded or failing (a transient failure of one of the
// flow's calls: 503, and a retry resumes), for example
//
//	recovery.Remote{Name: "bank", Unavailable: "The bank could not be reached."}
type Remote struct {
	Name        string
	Unavailable string
}

// RemoteOf is the remote side whose transient failure err is: the Remote
// of the flow whose external call (or its reconcile) failed with err, as
// the engine marks it, and false for any other error, or a flow that
// names no remote.
func RemoteOf(err error) (Remote, bool) {
	var r *remoteError
	if errors.As(err, &r) {
		return r.remote, true
	}
	return Remote{}, false
}

// remoteError is a transient failure of an external call of a flow that
// names its Remote (runPhase marks it).
type remoteError struct {
	remote Remote
	err    error
}

func (e *remoteError) Error() string { return e.err.Error() }
func (e *remoteError) Unwrap() error { return e.err }

// fromRemote marks err, the failure of one of f's external calls, as its
// remote side's, when it is transient and f names its remote.
func (f *Flow) fromRemote(err error) error {
	if err == nil || f.Remote == (Remote{}) || !IsTransient(err) {
		return err
	}
	return &remoteError{remote: f.Remote, err: err}
}

// afterCall is the failpoint fired after the external call of step.
func (f *Flow) afterCall(step string) string {
	if f.AfterCallFailpoint != "" {
		return f.AfterCallFailpoint + step
	}
	return FailpointAfterCall + step
}

// Step is one step of a flow: from recovery point At, Phase runs and
// moves the key to one of To (Finished for an answer).
type Step struct {
	At    RecoveryPoint
	Phase Phase
	To    []RecoveryPoint
}

// From declares a step: at recovery point at, phase runs, and moves the key
// to one of to.
func From(at RecoveryPoint, phase Phase, to ...RecoveryPoint) Step {
	return Step{At: at, Phase: phase, To: to}
}

// NewFlow declares a flow: its name and its steps, in order.
func NewFlow(name string, steps ...Step) *Flow {
	return &Flow{Name: name, Steps: steps}
}

// step is the flow's step at recovery point at. A flow has a handful of
// steps: a scan is as quick as a map.
func (f *Flow) step(at RecoveryPoint) (*Step, bool) {
	for i := range f.Steps {
		if f.Steps[i].At == at {
			return &f.Steps[i], true
		}
	}
	return nil, false
}

// allows tells whether out is a move the step declared.
func (s *Step) allows(out Outcome) bool {
	to := out.next
	if out.response != nil {
		to = Finished
	}
	for _, p := range s.To {
		if p == to {
			return true
		}
	}
	return false
}

// Validate checks the declaration: a name; a first step at Started; one
// step per recovery point, none at Finished; every phase built (LocalPhase,
// ExternalPhase); every move to Finished or to a point a step starts from,
// never back to Started; every step reachable from Started; and Finished
// reachable from every step. The error wraps ErrBadFlow.
func (f *Flow) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: flow %q: %s", ErrBadFlow, f.Name, fmt.Sprintf(format, args...))
	}
	switch {
	case f.Name == "":
		return fmt.Errorf("%w: a flow without a name", ErrBadFlow)
	case len(f.Steps) == 0 || f.Steps[0].At != Started:
		return bad("its first step must start at %s", Started)
	}
	for i, s := range f.Steps {
		switch {
		case s.At == Finished:
			return bad("a step at %s", Finished)
		case s.Phase.work == nil:
			return bad("the step at %s has no phase (LocalPhase, ExternalPhase)", s.At)
		case len(s.To) == 0:
			return bad("the step at %s declares no move", s.At)
		}
		for _, earlier := range f.Steps[:i] {
			if earlier.At == s.At {
				return bad("two steps at %s", s.At)
			}
		}
		for _, to := range s.To {
			if _, ok := f.step(to); to == Started || (!ok && to != Finished) {
				return bad("the step at %s may move to %q, which no step starts from", s.At, to)
			}
		}
	}
	for _, s := range f.Steps {
		if !f.reaches(Started, s.At) {
			return bad("no move reaches the step at %s", s.At)
		}
		if !f.reaches(s.At, Finished) {
			return bad("%s cannot be reached from %s", Finished, s.At)
		}
	}
	return nil
}

// reaches tells whether the flow's declared moves lead from one point to another.
func (f *Flow) reaches(from, to RecoveryPoint) bool {
	seen := map[RecoveryPoint]bool{from: true}
	for todo := []RecoveryPoint{from}; len(todo) > 0; {
		at := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if at == to {
			return true
		}
		if s, ok := f.step(at); ok {
			for _, next := range s.To {
				if !seen[next] {
					seen[next] = true
					todo = append(todo, next)
				}
			}
		}
	}
	return false
}

// Failpoints names the failpoints the flow's attempts fire, in the order
// of its steps: before_commit:P and after_commit:P around the commit that
// moves a key to each recovery point P (Started's is the claim's, for a new
// key), and after_call:S (or the flow's AfterCallFailpoint) after each
// external call S answered, before anything is recorded (see package
// failpoint).
func (f *Flow) Failpoints() []string {
	names := []string{FailpointBeforeCommit + string(Started), FailpointAfterCommit + string(Started)}
	add := func(name string) {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	for _, s := range f.Steps {
		if s.Phase.step != "" {
			add(f.afterCall(s.Phase.step))
		}
		for _, to := range s.To {
			add(FailpointBeforeCommit + string(to))
			add(FailpointAfterCommit + string(to))
		}
	}
	return names
}

// The failpoints' names: a prefix, then a recovery point or an external step.
const (
	FailpointBeforeCommit = "before_commit:"
	FailpointAfterCommit  = "after_commit:"
	FailpointAfterCall    = "after_call:"
)

// Step names the external call of the phase, "" for a local phase: its
// child key and its after_call failpoint carry it.
func (p Phase) Step() string { return p.step }

// Phase moves a key from one recovery point to the next. It is built with
// LocalPhase or ExternalPhase.
type Phase struct {
	// step names the external call, for its child key and failpoint; "" for a local phase.
	step string
	call func(ctx context.Context, k *Key) (any, error)
	// work is what the phase does in its transaction: a local phase's
	// work, or an external phase's record of what its call answered
	// (called; nil for a local phase). It returns where the key goes next.
	work func(ctx context.Context, tx *db.Tx, k *Key, called any) (Outcome, error)
	// reconcile finds the result of an earlier call without calling again,
	// for keys older than the remote side's idempotency window, and for a
	// child key the remote side reports spent.
	reconcile func(ctx context.Context, k *Key) (any, bool, error)
}

// LocalPhase is a phase that only commits local work: commit runs in one
// SERIALIZABLE transaction and returns where the key goes next.
func LocalPhase(commit func(ctx context.Context, tx *db.Tx, k *Key) (Outcome, error)) Phase {
	return Phase{work: func(ctx context.Context, tx *db.Tx, k *Key, _ any) (Outcome, error) {
		return commit(ctx, tx, k)
	}}
}

// ExternalPhase is a phase that calls out first: call runs outside any
// transaction while the lock is kept alive, and its result is recorded by
// record in one SERIALIZABLE transaction. If call fails, nothing is recorded
// and the next attempt calls again, with the same child key for step.
func ExternalPhase[T any](step string, call func(ctx context.Context, k *Key) (T, error),
	record func(ctx context.Context, tx *db.Tx, k *Key, result T) (Outcome, error)) Phase {
	return Phase{
		step: step,
		call: func(ctx context.Context, k *Key) (any, error) { return call(ctx, k) },
		work: func(ctx context.Context, tx *db.Tx, k *Key, called any) (Outcome, error) {
			return record(ctx, tx, k, called.(T))
		},
	}
}

// WithReconcile gives an external phase a way to find its call's result
// without making the call: reconcile returns the result and true if the
// remote side has a trace of the call (an object carrying the key's id in
// its metadata, say), false if it has none. The engine uses it instead of
// the call once a key is older than Config.ExternalWindow, when the remote
// side may have forgotten the child key and a second call could act twice,
// and when the phase's child key is found spent (see childkeys.go). It must
// read what the remote side holds now (an object by id, a list), never an
// index that lags behind the remote side's writes (Stripe's search): the
// engine trusts "nothing found" from it once SpentKeyGrace has passed.
// It need look no further than the key's call windows (Key.CallWindows,
// callwindows.go): the spans of time in which the remote side may have
// executed a call of the phase's attempts.
// A phase without it, or a reconcile that finds nothing, leaves the key
// marked as needing attention.
func WithReconcile[T any](p Phase, reconcile func(ctx context.Context, k *Key) (T, bool, error)) Phase {
	p.reconcile = func(ctx context.Context, k *Key) (any, bool, error) { return reconcile(ctx, k) }
	return p
}

// Outcome is where a phase leaves the key: at a next recovery point, or
// finished with a response.
type Outcome struct {
	next     RecoveryPoint
	response *Response
}

// Next moves the key to recovery point p.
func Next(p RecoveryPoint) Outcome { return Outcome{next: p} }

// Respond finishes the key with a final response, stored and replayed to
// every retry. Failures that are the request's final answer (a declined
// card) are responses too.
func Respond(status int, body []byte) Outcome {
	return Outcome{next: Finished, response: &Response{Status: status, Body: body}}
}

// RespondJSON finishes the key with v, rendered as JSON, as its final
// answer (Respond). If v cannot be rendered, the phase fails and nothing
// is stored.
func RespondJSON(status int, v any) (Outcome, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return Outcome{}, fmt.Errorf("rendering the answer (%T): %w", v, err)
	}
	return Respond(status, body), nil
}

// Response is a request's final answer.
type Response struct {
	Status int
	Body   []byte
	// Replayed is true when the response was stored by an earlier attempt.
	Replayed bool
}

// Key is the state of one idempotency key, as a flow sees it.
type Key struct {
	ID            uuid.UUID
	UserID        int64
	Key           string
	Flow          string
	Method, Path  string
	Params        json.RawMessage // what the flow needs to resume without the client
	RecoveryPoint RecoveryPoint
	Locked        bool
	ResponseCode  int // 0 until finished
	Created       time.Time
	// Expires is when a finished key is forgotten: a TTL after its final
	// answer was stored. Zero while the key is unfinished (it never expires).
	Expires time.Time

	lockToken int64
	// lockedAt is when this attempt's claim of an existing key took its
	// lock, as the row says (the claim's transaction's now()): with the
	// token, it tells that claim's lock from the next claim's
	// (UnlockClaimedIdempotencyKey).
	lockedAt     pgtype.Timestamptz
	responseBody []byte
	// insertedByThisClaim tells that this attempt's claim inserted the
	// key's row: it has no history (no child key generations to read), and
	// its commit creates it (at the point its first transaction reaches).
	insertedByThisClaim bool
	// unsent is the insert of the key's row while it waits, unsent, in the
	// claim's transaction (insertKey); nil once sent, and for a key this
	// claim did not insert.
	unsent *unsentInsert
	// handoffs are the values phases of this attempt handed on (Handoff),
	// as committed; pending are those given in the transaction running now.
	handoffs, pending map[any]any
	// pastExternalWindow tells that the key was older than
	// Config.ExternalWindow when this attempt claimed it, as the database
	// judged it: its external calls are reconciled, never repeated. A key
	// this attempt made is not.
	pastExternalWindow bool

	// generations holds the generation of each step's child key that is
	// past 0 (see ChildKey), read from child_key_generations before the
	// first external call of an attempt (loadChildKeyGenerations).
	generations       map[string]int32
	generationsLoaded bool

	// childKeyPrefix is the flow's ChildKeyPrefix, set with the attempt.
	childKeyPrefix string

	// traceParent is the W3C traceparent of the request that made the key,
	// "" when it was not traced: a resumed attempt links its trace to it.
	traceParent string

	// callWindows are the key's call windows, while a reconcile runs
	// (CallWindows, callwindows.go).
	callWindows []CallWindow
}

// ChildKey is the idempotency key for the external call step of this
// request: unique across users (the row id is random), and the same on every
// attempt and in every process. A child key the remote side reports spent
// (ChildKeySpent) is replaced by its next generation, recorded in the
// database so that every process derives the same key: generation 0 is
// "<prefix><key id>-<step>", generation n "<prefix><key id>-<step>-g<n>",
// the prefix being the flow's ChildKeyPrefix. The engine loads the
// generations before it makes an external call; only the call may derive
// the key.
func (k *Key) ChildKey(step string) string {
	key := k.childKeyPrefix + k.ID.String() + "-" + step
	if g := k.generations[step]; g > 0 {
		key += "-g" + strconv.Itoa(int(g))
	}
	return key
}

// ChildKeyGeneration is the generation of step's child key (ChildKey): 0
// until the remote side reported one spent. Past 0, earlier attempts of
// the step went out under other child keys, and the remote side may have
// acted on one of them late (a 500 it executed after answering it): a flow
// whose call is refused because of what such an attempt did asks the
// remote side for it (the refund flow's createStripeRefund).
func (k *Key) ChildKeyGeneration(step string) int { return int(k.generations[step]) }

// DecodeParams decodes the stored request parameters into v.
func (k *Key) DecodeParams(v any) error { return json.Unmarshal(k.Params, v) }

// Handoff is a value that a phase hands to the phases after it in the same
// attempt, to spare them a read: the create flow hands the payment it
// inserted to the Stripe call (its id) and to the record of Stripe's
// answer. Declare one per value, typed (NewHandoff[Payment]). Its lifetime
// is the engine's, and a phase never depends on it: Get reports false
// whenever the value is not there to be trusted, and the phase then reads
// what it needs, as it must anyway. Precisely:
//
//   - a value given in a transaction is kept only if that transaction
//     commits;
//   - a transaction that runs again (after a serialization failure: maybe
//     a concurrent change of what the value describes) starts without any
//     hand-off, given before it or not;
//   - a resumed attempt (a retry, the completer) starts without any.
type Handoff[T any] struct{ name string }

// NewHandoff declares a hand-off; name is for people reading a dump.
func NewHandoff[T any](name string) *Handoff[T] { return &Handoff[T]{name: name} }

// Give hands v on to the phases after this one, if the transaction of the
// phase that gives it commits. Only a phase's transaction gives.
func (h *Handoff[T]) Give(k *Key, v T) {
	if k.pending == nil {
		k.pending = map[any]any{}
	}
	k.pending[h] = v
}

// Get is the value an earlier phase of this attempt gave, if it is there.
func (h *Handoff[T]) Get(k *Key) (T, bool) {
	v, ok := k.pending[h]
	if !ok {
		v, ok = k.handoffs[h]
	}
	t, _ := v.(T)
	return t, ok
}

// startTx is what the engine does to k's hand-offs when a transaction
// starts: its first try keeps the committed ones, a try after a
// serialization failure drops them all.
func (k *Key) startTx(try int) {
	k.pending = nil
	if try > 1 {
		k.handoffs = nil
	}
}

// commitHandoffs keeps what the committed transaction gave.
func (k *Key) commitHandoffs() {
	for h, v := range k.pending {
		if k.handoffs == nil {
			k.handoffs = map[any]any{}
		}
		k.handoffs[h] = v
	}
	k.pending = nil
}
