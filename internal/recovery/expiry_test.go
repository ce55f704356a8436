package recovery_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/recovery"
)

// API.md rule 8: a key expires a TTL after its final answer was stored. A
// request that finishes late, resumed long after it began, is replayed for
// a whole TTL after it finished; and until it finishes, it never expires.
func TestExecute_aKeyThatFinishesAfterItsTTLIsReplayedForAWholeTTL(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	b := setup(t, recovery.Config{KeyTTL: time.Hour, Now: func() time.Time { return now }})
	ctx := context.Background()

	b.remote.fail.Store(1)
	_, err := b.execute(t, 1, "late", `{"name":"lamp"}`)
	require.True(t, recovery.IsTransient(err), "the remote side is down: %v", err)
	k, err := b.engine.Lookup(ctx, 1, "late")
	require.NoError(t, err)
	require.True(t, k.Expires.IsZero(), "an unfinished key has no expiry: %v", k.Expires)

	now = now.Add(2 * time.Hour) // an outage longer than the TTL
	_, err = recovery.NewReaper(b.engine, 10, nil).RunOnce(ctx)
	require.NoError(t, err)
	first, err := b.execute(t, 1, "late", `{"name":"lamp"}`)
	require.NoError(t, err)
	require.False(t, first.Replayed, "the retry resumed and finished the request")
	finishedAt := now
	k, err = b.engine.Lookup(ctx, 1, "late")
	require.NoError(t, err)
	require.Equal(t, finishedAt.Add(time.Hour).Unix(), k.Expires.Unix(), "a TTL after the answer was stored")

	now = now.Add(59 * time.Minute)
	_, err = recovery.NewReaper(b.engine, 10, nil).RunOnce(ctx)
	require.NoError(t, err)
	again, err := b.execute(t, 1, "late", `{"name":"lamp"}`)
	require.NoError(t, err)
	require.True(t, again.Replayed, "inside a TTL of its finish, the key is replayed, never run again")
	require.Equal(t, first.Body, again.Body)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM things"))
	require.EqualValues(t, 1, b.remote.executed.Load())

	now = now.Add(2 * time.Minute)
	resp, err := b.execute(t, 1, "late", `{"name":"desk"}`)
	require.NoError(t, err, "a TTL after its finish, the key is new again")
	require.False(t, resp.Replayed)
}

// The reaper and the key's state agree with the claim: a key finished late
// is neither reaped nor hidden before a TTL after its finish.
func TestReaper_keepsAKeyFinishedLateForAWholeTTL(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	b := setup(t, recovery.Config{KeyTTL: time.Hour, Now: func() time.Time { return now }})
	ctx := context.Background()

	b.remote.fail.Store(1)
	_, err := b.execute(t, 1, "late", `{"name":"lamp"}`)
	require.True(t, recovery.IsTransient(err))
	now = now.Add(3 * time.Hour)
	_, err = b.execute(t, 1, "late", `{"name":"lamp"}`)
	require.NoError(t, err)

	now = now.Add(30 * time.Minute)
	n, err := recovery.NewReaper(b.engine, 10, nil).RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "finished half a TTL ago")
	_, err = b.engine.Lookup(ctx, 1, "late")
	require.NoError(t, err, "still visible to its owner")

	now = now.Add(31 * time.Minute)
	n, err = recovery.NewReaper(b.engine, 10, nil).RunOnce(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}
