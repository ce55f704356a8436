package recovery_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/failpoint"
	"github.com/example/payments/internal/recovery"
)

// next is a local phase that moves the key to p.
func next(p recovery.RecoveryPoint) recovery.Phase {
	return recovery.LocalPhase(func(context.Context, *db.Tx, *recovery.Key) (recovery.Outcome, error) {
		return recovery.Next(p), nil
	})
}

// answer is a local phase that finishes the key with 200.
var answer = recovery.LocalPhase(func(context.Context, *db.Tx, *recovery.Key) (recovery.Outcome, error) {
	return recovery.Respond(200, []byte(`{}`)), nil
})

// The engine's construction refuses, before any request runs, a flow whose
// declared moves are not a way from started to finished, and a second flow
// of one name.
func TestNew_refusesAFlowThatCannotBeFollowed(t *testing.T) {
	t.Parallel()
	const a, b recovery.RecoveryPoint = "a", "b"
	for name, f := range map[string]*recovery.Flow{
		"no name":            recovery.NewFlow("", recovery.From(recovery.Started, answer, recovery.Finished)),
		"no steps":           recovery.NewFlow("x"),
		"not from started":   recovery.NewFlow("x", recovery.From(a, answer, recovery.Finished)),
		"undeclared point":   recovery.NewFlow("x", recovery.From(recovery.Started, next(a), a)),
		"back to started":    recovery.NewFlow("x", recovery.From(recovery.Started, next(recovery.Started), recovery.Started, recovery.Finished)),
		"no move":            recovery.NewFlow("x", recovery.From(recovery.Started, answer)),
		"no phase":           recovery.NewFlow("x", recovery.From(recovery.Started, recovery.Phase{}, recovery.Finished)),
		"two steps at a":     recovery.NewFlow("x", recovery.From(recovery.Started, next(a), a), recovery.From(a, answer, recovery.Finished), recovery.From(a, answer, recovery.Finished)),
		"a step at finished": recovery.NewFlow("x", recovery.From(recovery.Started, answer, recovery.Finished), recovery.From(recovery.Finished, answer, recovery.Finished)),
		"unreachable step":   recovery.NewFlow("x", recovery.From(recovery.Started, answer, recovery.Finished), recovery.From(a, answer, recovery.Finished)),
		"never finishes": recovery.NewFlow("x", recovery.From(recovery.Started, next(a), a),
			recovery.From(a, next(b), b), recovery.From(b, next(a), a)),
		"a trap": recovery.NewFlow("x", recovery.From(recovery.Started, next(a), a, recovery.Finished),
			recovery.From(a, next(a), a)),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := recovery.New(recovery.Config{}, f)
			require.ErrorIs(t, err, recovery.ErrBadFlow)
		})
	}
	ok := recovery.NewFlow("x", recovery.From(recovery.Started, next(a), a, recovery.Finished), recovery.From(a, answer, recovery.Finished))
	_, err := recovery.New(recovery.Config{}, ok)
	require.NoError(t, err)
	_, err = recovery.New(recovery.Config{}, ok, recovery.NewFlow("x", recovery.From(recovery.Started, answer, recovery.Finished)))
	require.ErrorIs(t, err, recovery.ErrBadFlow, "a second flow of the same name")
	require.ErrorContains(t, err, `flow "x" is registered twice`)

	// A builder refuses the same, at Build, whichever package registered
	// the flows: nothing runs on an engine that was not built.
	flows := recovery.NewBuilder(recovery.Config{})
	first := flows.Register(ok)
	flows.Register(recovery.NewFlow("x", recovery.From(recovery.Started, answer, recovery.Finished)))
	_, err = flows.Build()
	require.ErrorIs(t, err, recovery.ErrBadFlow)
	_, err = first.Execute(context.Background(), recovery.Request{UserID: 1, Key: "k", Method: "POST", Path: "/v1/x"})
	require.ErrorIs(t, err, recovery.ErrUnregisteredFlow, "its engine was never built")

	// A flow registered after Build is not the engine's: its handle refuses to run it.
	built := recovery.NewBuilder(recovery.Config{})
	built.Register(ok)
	_, err = built.Build()
	require.NoError(t, err)
	late := built.Register(recovery.NewFlow("late", recovery.From(recovery.Started, answer, recovery.Finished)))
	_, err = late.Execute(context.Background(), recovery.Request{UserID: 1, Key: "k", Method: "POST", Path: "/v1/x"})
	require.ErrorIs(t, err, recovery.ErrUnregisteredFlow)
	_, err = built.Build()
	require.Error(t, err, "an engine is built once")
}

// A phase that moves the key where its step did not declare fails, and
// commits none of its work: it is a bug in the flow, which no retry can
// cure, so the key waits for an operator (recovery.ErrFailed) where it was;
// the same holds for a local phase that runs in the claim's transaction
// (the shared commit), whose key is made at started only to say so.
func TestExecute_refusesAMoveItsStepDidNotDeclare(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	// The first step may only go to thing_created, but its phase skips to remote_called.
	claimSkips := recovery.NewFlow("claim_skips",
		recovery.From(recovery.Started, next(remoteCalled), thingCreated),
		recovery.From(thingCreated, next(remoteCalled), remoteCalled),
		recovery.From(remoteCalled, answer, recovery.Finished))
	// The external step may only go to remote_called, but its record answers.
	recordAnswers := recovery.NewFlow("record_answers",
		recovery.From(recovery.Started, next(thingCreated), thingCreated),
		recovery.From(thingCreated, recovery.ExternalPhase("remote", b.remote.call,
			func(context.Context, *db.Tx, *recovery.Key, string) (recovery.Outcome, error) {
				return recovery.Respond(200, []byte(`{}`)), nil
			}), remoteCalled),
		recovery.From(remoteCalled, answer, recovery.Finished))
	b.engine = b.newEngine(t, recovery.Config{}, claimSkips, recordAnswers)

	req := b.request(1, "claim-skips", `{"name":"lamp"}`)
	req.Flow = claimSkips
	_, err := b.engine.Execute(context.Background(), req)
	require.ErrorIs(t, err, recovery.ErrUndeclaredMove)
	require.ErrorIs(t, err, recovery.ErrFailed)
	require.Equal(t, string(recovery.Started), b.recoveryPoint(t, "claim-skips"), "the claim's transaction rolled back")
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM idempotency_keys WHERE idempotency_key = 'claim-skips' AND needs_attention_at IS NOT NULL"))

	req = b.request(1, "record-answers", `{"name":"lamp"}`)
	req.Flow = recordAnswers
	_, err = b.engine.Execute(context.Background(), req)
	require.ErrorIs(t, err, recovery.ErrUndeclaredMove)
	require.ErrorIs(t, err, recovery.ErrFailed)
	require.Equal(t, string(thingCreated), b.recoveryPoint(t, "record-answers"), "the record did not commit")
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM idempotency_keys WHERE idempotency_key = 'record-answers' AND needs_attention_at IS NOT NULL"))
}

// A flow names its failpoints from its declaration, in the order of its steps.
func TestFlow_failpointsAreDerivedFromTheDeclaration(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	require.Equal(t, []string{
		"before_commit:started", "after_commit:started",
		"before_commit:thing_created", "after_commit:thing_created",
		"after_call:remote", "before_commit:remote_called", "after_commit:remote_called",
		"before_commit:finished", "after_commit:finished",
	}, b.flow.Failpoints())
}

// An engine runs only the flows it was built with, so the completer can
// resume every key it made. (A Registered handle cannot meet this: it runs
// on the engine its builder built, with its flow.)
func TestExecute_refusesAFlowNotRegistered(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	req := b.request(1, "k", `{"name":"lamp"}`)
	req.Flow = recovery.NewFlow("stray", recovery.From(recovery.Started, answer, recovery.Finished))
	_, err := b.engine.Execute(context.Background(), req)
	require.ErrorIs(t, err, recovery.ErrUnregisteredFlow)
	require.Equal(t, 0, b.count(t, "SELECT count(*) FROM idempotency_keys"))
}

// The engine's construction refuses a failpoint that none of its flows
// fires, naming it and the name it was likely meant to be: a misspelt name
// would never fire, and a crash test armed with it would prove nothing.
func TestNew_refusesAFailpointNoFlowFires(t *testing.T) {
	t.Parallel()
	flow := setup(t, recovery.Config{}).flow
	for spec, want := range map[string]string{
		"after_call:remote=crash,before_commit:remote_called=error": "",
		"after_stripe:remote=crash":                                 "after_stripe:remote",
		"after_call:remot=crash":                                    "after_call:remot (did you mean after_call:remote?)",
		"after_commit:thing_createde=sleep:5":                       "after_commit:thing_createde (did you mean after_commit:thing_created?)",
	} {
		set, err := failpoint.Parse(spec)
		require.NoError(t, err)
		_, err = recovery.New(recovery.Config{Failpoints: set}, flow)
		if want == "" {
			require.NoError(t, err, spec)
			continue
		}
		require.ErrorIs(t, err, failpoint.ErrUnknown, spec)
		require.ErrorContains(t, err, want, spec)
	}
}

// RespondJSON renders the answer, or fails the phase when it cannot.
func TestRespondJSON(t *testing.T) {
	t.Parallel()
	_, err := recovery.RespondJSON(201, map[string]string{"id": "x"})
	require.NoError(t, err)
	_, err = recovery.RespondJSON(201, make(chan int))
	require.Error(t, err)
}
