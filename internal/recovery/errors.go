package recovery

import (
	"errors"
	"fmt"
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
	// ErrUnknownRecoveryPoint: the key is at a point its flow has no phase for (a bug).
	ErrUnknownRecoveryPoint = errors.New("no phase for the key's recovery point")
)

// TransientError is a failure that a later attempt may not have: the remote
// side was unreachable, overloaded or busy. The key stays resumable.
type TransientError struct{ Err error }

func (e *TransientError) Error() string { return "transient: " + e.Err.Error() }
func (e *TransientError) Unwrap() error { return e.Err }

// Transient marks err as transient.
func Transient(err error) error { return &TransientError{Err: err} }

// IsTransient tells whether err was marked transient.
func IsTransient(err error) bool {
	var t *TransientError
	return errors.As(err, &t)
}

func bug(format string, args ...any) error { return fmt.Errorf("recovery: "+format, args...) }
