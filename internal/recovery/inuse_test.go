package recovery_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/recovery"
)

// The 409 of a key in use says when to come back. While the holder renews
// its lock (a heartbeat every third of the lifetime), soon: it may finish
// any moment. Once its renewal is overdue (the holder likely died: the
// README's crash walkthrough), when the lock lapses, which a retry used to
// be told was in 1 s for the whole 90 s. The clock is the engine's
// injected one, down in SQL: the holder's heartbeat, on the real clock's
// ticker, renews nothing the test's clock sees, as a dead holder would.
func TestExecute_keyInUseSaysWhenTheLockLapsesOnceItsHolderIsOverdue(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	b := setup(t, recovery.Config{LockTimeout: 90 * time.Second, Now: clock})
	b.remote.block, b.remote.inCall = make(chan struct{}), make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() { _, err := b.execute(t, 1, "k1", `{"name":"lamp"}`); done <- err }()
	<-b.remote.inCall
	locked := clock()

	inUse := func() *recovery.KeyInUseError {
		t.Helper()
		_, err := b.execute(t, 1, "k1", `{"name":"lamp"}`)
		require.ErrorIs(t, err, recovery.ErrKeyInUse, "still the sentinel callers test for")
		var e *recovery.KeyInUseError
		require.True(t, errors.As(err, &e), "%v", err)
		return e
	}

	advance(10 * time.Second) // renewed 10 s ago: on time
	e := inUse()
	require.False(t, e.HolderOverdue)
	require.Equal(t, time.Second, e.RetryAfter())
	require.True(t, e.Until.Equal(locked.Add(90*time.Second)), "%v", e.Until)

	advance(50 * time.Second) // 60 s without a renewal, of 90: overdue
	e = inUse()
	require.True(t, e.HolderOverdue)
	require.Equal(t, 30*time.Second, e.RetryAfter(), "until the lock lapses")
	require.True(t, e.Until.Equal(locked.Add(90*time.Second)))
	require.Contains(t, e.Error(), "may have died")

	advance(29*time.Second + 500*time.Millisecond)
	require.Equal(t, 500*time.Millisecond, inUse().RetryAfter())

	close(b.remote.block)
	<-done
}
