package recovery

import (
	"fmt"
	"time"

	"github.com/example/payments/internal/db/dbsqlc"
)

// KeyInUseError is ErrKeyInUse with what is known of the lock: when it
// lapses, and whether its holder is overdue with renewing it. It wraps
// ErrKeyInUse, which callers test for with errors.Is.
//
// A live holder renews its lock every third of its lifetime (a commit, or
// the heartbeat during an external call), so it may finish any moment: a
// retry is worth making soon. A holder that has not renewed it for half
// the lifetime has likely died (a crash, a SIGKILL); nothing can take the
// key over before the lock lapses, at Until, so that is when to retry.
type KeyInUseError struct {
	// Until is when the lock lapses unless its holder renews it.
	Until time.Time
	// HolderOverdue: the holder has not renewed the lock for more than half
	// its lifetime.
	HolderOverdue bool
	// remaining is Until less the claim's now, on the database's clock.
	remaining time.Duration
}

// soonRetry is when to retry a key whose holder renews its lock.
const soonRetry = time.Second

func newKeyInUseError(row dbsqlc.ClaimLookupRow) *KeyInUseError {
	return &KeyInUseError{
		Until: row.IdempotencyKey.LockExpiresAt.Time, HolderOverdue: row.LockOverdue,
		remaining: time.Duration(row.LockRemainingSeconds * float64(time.Second)),
	}
}

// RetryAfter is how long a client should wait before retrying: until the
// lock lapses when its holder is overdue, else a second (or less, when the
// lock lapses sooner).
func (e *KeyInUseError) RetryAfter() time.Duration {
	if e.HolderOverdue {
		return max(e.remaining, 0)
	}
	return min(soonRetry, max(e.remaining, 0))
}

func (e *KeyInUseError) Error() string {
	if e.HolderOverdue {
		return fmt.Sprintf("%v: its lock lapses at %s (its holder has not renewed it for over half its lifetime and may have died)",
			ErrKeyInUse, e.Until.UTC().Format(time.RFC3339))
	}
	return ErrKeyInUse.Error()
}

func (e *KeyInUseError) Unwrap() error { return ErrKeyInUse }
