package recovery_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/clocktest"
	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/recovery"
)

// windowedFlow is a flow of two external calls, each with a reconcile that
// notes the call windows the engine gave it:
//
//	started ──> ready ──(first)──> between ──(second)──> finished
//
// Each call does what the test scripted for it next: it moves the clock
// (the time the call took), then answers.
type windowedFlow struct {
	flow          *recovery.Flow
	clock         *clocktest.Clock
	first, second []scriptedCall
	// seen are the windows each reconcile was given, by step, in order.
	seen map[string][][]recovery.CallWindow
}

type scriptedCall struct {
	takes time.Duration
	err   error // nil: the call answers "done"
}

const (
	windowedReady   recovery.RecoveryPoint = "ready"
	windowedBetween recovery.RecoveryPoint = "between"
)

func newWindowedFlow(clock *clocktest.Clock) *windowedFlow {
	w := &windowedFlow{clock: clock, seen: map[string][][]recovery.CallWindow{}}
	call := func(script *[]scriptedCall) func(context.Context, *recovery.Key) (string, error) {
		return func(context.Context, *recovery.Key) (string, error) {
			next := (*script)[0]
			*script = (*script)[1:]
			w.clock.Advance(next.takes)
			return "done", next.err
		}
	}
	reconcile := func(step string) func(context.Context, *recovery.Key) (string, bool, error) {
		return func(_ context.Context, k *recovery.Key) (string, bool, error) {
			var windows []recovery.CallWindow
			for _, cw := range k.CallWindows() {
				windows = append(windows, recovery.CallWindow{From: cw.From.UTC(), To: cw.To.UTC()})
			}
			w.seen[step] = append(w.seen[step], windows)
			return "found", true, nil
		}
	}
	w.flow = recovery.NewFlow("windowed",
		recovery.From(recovery.Started, recovery.LocalPhase(func(context.Context, *db.Tx, *recovery.Key) (recovery.Outcome, error) {
			return recovery.Next(windowedReady), nil
		}), windowedReady),
		recovery.From(windowedReady, recovery.WithReconcile(recovery.ExternalPhase("first", call(&w.first),
			func(context.Context, *db.Tx, *recovery.Key, string) (recovery.Outcome, error) {
				return recovery.Next(windowedBetween), nil
			}), reconcile("first")), windowedBetween),
		recovery.From(windowedBetween, recovery.WithReconcile(recovery.ExternalPhase("second", call(&w.second),
			func(context.Context, *db.Tx, *recovery.Key, string) (recovery.Outcome, error) {
				return recovery.Respond(201, []byte(`{}`)), nil
			}), reconcile("second")), recovery.Finished),
	)
	return w
}

// run sends the flow's one request, with the Idempotency-Key "windows".
func (w *windowedFlow) run(engine *recovery.Engine) error {
	_, err := engine.Execute(context.Background(), recovery.Request{
		UserID: 1, Key: "windows", Method: "POST", Path: "/v1/windows", Body: []byte(`{}`), Flow: w.flow,
	})
	return err
}

func windowsEngine(t *testing.T, b *testBundle, cfg recovery.Config, w *windowedFlow) *recovery.Engine {
	t.Helper()
	cfg.Pool = b.pool
	e, err := recovery.New(cfg, w.flow)
	require.NoError(t, err)
	return e
}

var errRemote = errors.New("remote unavailable")

// Issue 38, item 5: a reconcile that had to find a call's result read the
// remote side's objects from the key's creation on. The engine now gives
// it the windows of the key's own attempts at the call's recovery point:
// one that failed (from its claim to its unlock), one whose holder died
// (to the end of the lock it last wrote: it stays locked, as after a
// crash), and the one reconciling (to now); the next step's reconcile only
// the time since the key moved on.
func TestCallWindows_eachAttemptFromItsStartToItsRecordedEnd(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := clocktest.New(t0)
	w := newWindowedFlow(clock)
	engine := windowsEngine(t, b, recovery.Config{Now: clock.Now, LockTimeout: time.Minute, SpentKeyGrace: -1}, w)

	w.first = []scriptedCall{{takes: 5 * time.Second, err: recovery.Transient(errRemote)}}
	require.True(t, recovery.IsTransient(w.run(engine)), "fails: unlocked at t0+5s")

	clock.Advance(10 * time.Minute)
	t1 := clock.Now()
	w.first = []scriptedCall{{takes: 3 * time.Second, err: recovery.ErrLockLost}}
	require.ErrorIs(t, w.run(engine), recovery.ErrLockLost, "dies holding the key: nothing more is written")

	clock.Advance(10 * time.Minute)
	t2 := clock.Now()
	w.first = []scriptedCall{{takes: 2 * time.Second, err: recovery.ChildKeySpent(errRemote)}}
	w.second = []scriptedCall{{takes: time.Second, err: recovery.ChildKeySpent(errRemote)}}
	require.NoError(t, w.run(engine), "both calls' keys found spent, both results found by their reconciles")

	require.Equal(t, [][]recovery.CallWindow{{
		{From: t0, To: t0.Add(5 * time.Second)}, // failed: its unlock
		{From: t1, To: t1.Add(time.Minute)},     // died: its lock's end (its claim plus a minute)
		{From: t2, To: t2.Add(2 * time.Second)}, // reconciling: now
	}}, w.seen["first"])
	moved := t2.Add(2 * time.Second)
	require.Equal(t, [][]recovery.CallWindow{{{From: moved, To: moved.Add(time.Second)}}}, w.seen["second"],
		"from the move to its recovery point: the first call's attempts are not the second's")

	var kept int
	require.NoError(t, b.pool.QueryRow(context.Background(), `
		SELECT count(*) FROM idempotency_keys WHERE idempotency_key = 'windows'
		AND (point_reached_at IS NOT NULL OR unlocked_at IS NOT NULL OR earlier_attempts IS NOT NULL)`).Scan(&kept))
	require.Zero(t, kept, "a finished key keeps none of it")
}

// A window stays open SpentKeyGrace after its attempt ended (the remote
// side may still execute what it answered), windows that then overlap are
// one, and a key past the remote side's window, reconciled without a call,
// gets them too.
func TestCallWindows_openForTheGraceAfterAndMergedPastTheExternalWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := clocktest.New(t0)
	w := newWindowedFlow(clock)
	engine := windowsEngine(t, b, recovery.Config{
		Now: clock.Now, LockTimeout: time.Minute, SpentKeyGrace: time.Minute, ExternalWindow: time.Hour,
	}, w)

	w.first = []scriptedCall{{takes: 5 * time.Second, err: recovery.Transient(errRemote)}}
	require.True(t, recovery.IsTransient(w.run(engine)))
	for range 2 {
		clock.Advance(30 * time.Second)
		w.first = []scriptedCall{{takes: time.Second, err: recovery.Transient(errRemote)}}
		require.True(t, recovery.IsTransient(w.run(engine)))
	}
	var ranges int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT count(*) FROM idempotency_keys, unnest(earlier_attempts) WHERE idempotency_key = 'windows'").Scan(&ranges))
	require.Equal(t, 1, ranges, "the first two attempts, each open a minute on, are one window in the row")

	clock.Advance(2 * time.Hour)
	t3 := clock.Now()
	require.NoError(t, w.run(engine), "past the external window: both steps reconciled, neither called")
	require.Equal(t, [][]recovery.CallWindow{{
		{From: t0, To: t0.Add(67*time.Second + time.Minute)}, // the three failures, each a minute on, are one
		{From: t3, To: t3.Add(time.Minute)},
	}}, w.seen["first"])
	require.Equal(t, [][]recovery.CallWindow{{{From: t3, To: t3.Add(time.Minute)}}}, w.seen["second"])
}
