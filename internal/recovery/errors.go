package recovery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/failpoint"
)

var (
	// ErrKeyReused: the key was first used for a different request (method,
	// path or canonical body).
	ErrKeyReused = errors.New("idempotency key reused with a different request")
	// ErrKeyInUse: another attempt holds the key's lock right now.
	ErrKeyInUse = errors.New("idempotency key in use by a request in progress")
	// ErrLockLost: this attempt's lock was taken over by another; it wrote nothing.
	ErrLockLost = errors.New("idempotency key lock lost to another attempt")
	// ErrNeedsAttention: the key's next step calls out, the key is older than
	// the remote side's idempotency window, and reconciling found no trace
	// of the call. Re-sending could act twice, so the key waits for a person.
	ErrNeedsAttention = errors.New("idempotency key needs attention: past the external idempotency window with nothing to reconcile")
	// ErrFailed: a phase of the key's request failed with an error that no
	// retry can cure (see retryable): a constraint the flow's own write
	// violates, a bug's error. The key is marked as needing attention with
	// the error, once: the completer leaves it, and every retry with the
	// key gets ErrFailed again, without running the phase, until an
	// operator re-drives it (Completer.RetryNow, payments keys retry).
	ErrFailed = errors.New("idempotency key's request failed with an error no retry can cure; it waits for an operator")
	// ErrUnknownRecoveryPoint: the key is at a point its flow has no phase for (a bug).
	ErrUnknownRecoveryPoint = errors.New("no phase for the key's recovery point")
	// ErrBadFlow: a flow's declaration is refused (Flow.Validate), or two
	// flows of an engine share a name (New, Builder.Build).
	ErrBadFlow = errors.New("flow declaration refused")
	// ErrUnregisteredFlow: Engine.Execute was given a flow the engine was
	// not built with, which the completer could not resume, or a
	// Registered handle ran before its builder built the engine (a bug in
	// how the program is put together).
	ErrUnregisteredFlow = errors.New("flow not registered with the engine")
	// ErrUndeclaredMove: a phase moved the key to a recovery point its step
	// did not declare (a bug in the flow): nothing it did is committed.
	ErrUndeclaredMove = errors.New("phase moved to a recovery point its step did not declare")
)

// ErrChildKeySpent: the remote side answers every call with the step's
// child key with the same stored failure (Stripe replays a 5xx it stored
// under the key). Retrying the key cannot help; see ChildKeySpent.
var ErrChildKeySpent = errors.New("child key spent: the remote side replays a stored failure for it")

// ChildKeySpent marks err, the failure of an external call, as the remote
// side's stored answer for the call's child key. It is transient to the
// client (503, resumable); the engine reconciles, and moves the step on to
// a new generation of its child key once the spent one provably did nothing.
func ChildKeySpent(err error) error {
	return &TransientError{Err: fmt.Errorf("%w: %w", ErrChildKeySpent, err)}
}

// TransientError is a failure that a later attempt may not have: the remote
// side was unreachable, overloaded or busy. The key stays resumable.
type TransientError struct {
	Err error
	// RetryAfter, when set, is how long a retry would surely find the key
	// in the same state: the client is told to wait that long.
	RetryAfter time.Duration
}

func (e *TransientError) Error() string { return "transient: " + e.Err.Error() }
func (e *TransientError) Unwrap() error { return e.Err }

// Transient marks err as transient.
func Transient(err error) error { return &TransientError{Err: err} }

// RetryAfterOf is how long err, a transient failure, says a retry should
// wait; 0 when it does not say.
func RetryAfterOf(err error) time.Duration {
	var t *TransientError
	if errors.As(err, &t) {
		return t.RetryAfter
	}
	return 0
}

// transientIfUnavailable marks a failure to reach the database, or to
// commit on it (db.IsUnavailable: a failover, a lost synchronous standby, a
// transaction past its deadline), as transient: nothing final was stored
// because of it, the key stays at its last committed recovery point, and a
// retry (the client's, the completer's) resumes from there. A commit whose
// answer was lost may have landed or not; the retry reads which.
func transientIfUnavailable(err error) error {
	if err == nil || !db.IsUnavailable(err) || IsTransient(err) {
		return err
	}
	return &TransientError{Err: err}
}

// failsTheKey tells whether err, a phase's failure, is one that no retry
// can cure, so that the key must wait for a person (ErrFailed): a
// constraint the flow's own write violates (a unique violation that is not
// a lost fence: explainCommitError), a bug's error.
//
// Only these may well not happen again, and leave the key resumable: a
// conflict with concurrent requests that outlasted its retries
// (db.ErrSerialization: serialization failures and deadlocks), the
// database out of reach (db.IsUnavailable, or a connection that broke),
// a limit the server set on the statement or a resource it ran short of
// (db.IsTemporary: a statement_timeout, a lock_timeout, a full disk), the
// attempt's context ending (the client went away, the process is
// stopping), and what the flow marked Transient (a remote side
// unreachable, overloaded, or answering 5xx or 429). A failpoint's
// injected error stands for a crash, which a retry resumes from. The
// engine's own answers (the lock lost, the key in use, needing attention
// or failed already) are not the key's failure.
func failsTheKey(ctx context.Context, err error) bool {
	switch {
	case IsTransient(err), db.IsUnavailable(err), db.ConnectionLost(err), errors.Is(err, db.ErrSerialization), db.IsTemporary(err),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), ctx.Err() != nil,
		errors.Is(err, failpoint.ErrInjected),
		errors.Is(err, ErrLockLost), errors.Is(err, db.ErrLockNotHeld), errors.Is(err, ErrKeyInUse),
		errors.Is(err, ErrNeedsAttention), errors.Is(err, ErrFailed):
		return false
	}
	return true
}

// IsTransient tells whether err was marked transient.
func IsTransient(err error) bool {
	var t *TransientError
	return errors.As(err, &t)
}

func bug(format string, args ...any) error { return fmt.Errorf("recovery: "+format, args...) }
