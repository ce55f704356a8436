package recovery_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/keyfilter"
	"github.com/example/payments/internal/recovery"
)

// insertFinished writes a finished key created and finished ago, by the
// database's clock, as another instance would have.
const insertFinished = `
	INSERT INTO idempotency_keys (user_id, idempotency_key, flow, request_method, request_path, request_params,
		request_fingerprint, recovery_point, response_code, response_body, created_at, last_run_at, expires_at)
	VALUES (1, $1::text, 'thing', 'POST', '/v1/things', '{}', sha256(convert_to($1::text, 'UTF8')), 'finished', 201, '\x7b7d'::bytea,
		now() - $2::interval, now() - $2::interval, now() - $2::interval + interval '24 hours')`

// A new instance that loads a snapshot and reads the keys made since knows
// every live key: those in the snapshot (read by nobody since), those made
// after it, and one whose transaction had begun before the snapshot was
// taken and committed after (its expiry counts from its start): the margin
// reads it.
func TestKeyFilterSnapshot_noKeyMadeAfterTheSnapshotOrCommittingWhileItWasTakenIsMissed(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	ctx := context.Background()
	for i := range 50 { // finished an hour ago: outside the margin
		_, err := b.pool.Exec(ctx, insertFinished, fmt.Sprint("old-", i), "1 hour")
		require.NoError(t, err)
	}
	writer := newEngine(t, recovery.Config{Pool: b.pool, KeyFilter: readyFilter(t, nil)})
	st, err := writer.RebuildKeyFilter(ctx)
	require.NoError(t, err)
	require.Equal(t, 50, st.Added)

	// A key finishing in a transaction that began before the snapshot and
	// commits after it.
	inFlight, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer inFlight.Rollback(ctx) //nolint:errcheck // committed below
	_, err = inFlight.Exec(ctx, insertFinished, "in-flight", "0 seconds")
	require.NoError(t, err)

	_, err = b.pool.Exec(ctx, insertFinished, "before", "1 second")
	require.NoError(t, err)
	size, err := writer.SaveKeyFilterSnapshot(ctx)
	require.NoError(t, err)
	require.Positive(t, size)
	require.NoError(t, inFlight.Commit(ctx))
	_, err = b.execute(t, 1, "after", `{"name":"after"}`) // another instance's claim
	require.NoError(t, err)
	b.remote.fail.Store(1)
	_, err = b.execute(t, 1, "after-unfinished", `{"name":"b"}`)
	require.True(t, recovery.IsTransient(err))

	f := readyFilter(t, nil)
	reader := newEngine(t, recovery.Config{Pool: b.pool, KeyFilter: f})
	covers, err := reader.LoadKeyFilterSnapshot(ctx, time.Hour)
	require.NoError(t, err)
	st, err = reader.RebuildKeyFilterSince(ctx, covers)
	require.NoError(t, err)
	require.Equal(t, 4, st.Added, "only the keys within the margin of the snapshot's time are read")
	for i := range 50 {
		require.True(t, f.MaybeSeen(1, fmt.Sprint("old-", i)), "old-%d, from the snapshot", i)
	}
	for _, k := range []string{"before", "in-flight", "after", "after-unfinished"} {
		require.True(t, f.MaybeSeen(1, k), k)
	}
	require.False(t, f.MaybeSeen(1, "never"))
}

// A corrupted snapshot is refused, leaving the filter as it was, and the
// full rebuild (the fallback) knows every key.
func TestKeyFilterSnapshot_aCorruptedOneFallsBackToTheRebuild(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	ctx := context.Background()
	for i := range 20 {
		_, err := b.pool.Exec(ctx, insertFinished, fmt.Sprint("k-", i), "1 hour")
		require.NoError(t, err)
	}
	writer := newEngine(t, recovery.Config{Pool: b.pool, KeyFilter: readyFilter(t, nil)})
	_, err := writer.RebuildKeyFilter(ctx)
	require.NoError(t, err)
	_, err = writer.SaveKeyFilterSnapshot(ctx)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE keyfilter_snapshots SET bits = set_byte(bits, 1000, get_byte(bits, 1000) # 4)`)
	require.NoError(t, err)

	f := readyFilter(t, nil)
	reader := newEngine(t, recovery.Config{Pool: b.pool, KeyFilter: f})
	covers, err := reader.LoadKeyFilterSnapshot(ctx, time.Hour)
	require.ErrorIs(t, err, keyfilter.ErrSnapshotUnusable)
	require.ErrorContains(t, err, "checksum")
	require.True(t, covers.IsZero())
	st, err := reader.RebuildKeyFilterSince(ctx, covers)
	require.NoError(t, err)
	require.Equal(t, 20, st.Added, "the full rebuild")
	for i := range 20 {
		require.True(t, f.MaybeSeen(1, fmt.Sprint("k-", i)))
	}
}

// A missing snapshot, and one older than its limit by the reader's clock,
// are refused too.
func TestKeyFilterSnapshot_aMissingOrStaleOneIsNotUsed(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	ctx := context.Background()
	reader := newEngine(t, recovery.Config{Pool: b.pool, KeyFilter: readyFilter(t, nil)})
	_, err := reader.LoadKeyFilterSnapshot(ctx, time.Hour)
	require.ErrorIs(t, err, keyfilter.ErrSnapshotUnusable)
	require.ErrorContains(t, err, "no snapshot")

	writer := newEngine(t, recovery.Config{Pool: b.pool, KeyFilter: readyFilter(t, nil)})
	_, err = writer.RebuildKeyFilter(ctx)
	require.NoError(t, err)
	_, err = writer.SaveKeyFilterSnapshot(ctx)
	require.NoError(t, err)
	later := time.Now().Add(2 * time.Hour)
	f, err := keyfilter.New(keyfilter.Config{TTL: 24 * time.Hour, ExpectedKeysPerSlice: 10000, Now: func() time.Time { return later }})
	require.NoError(t, err)
	_, err = newEngine(t, recovery.Config{Pool: b.pool, KeyFilter: f}).LoadKeyFilterSnapshot(ctx, time.Hour)
	require.ErrorIs(t, err, keyfilter.ErrSnapshotUnusable)
	require.ErrorContains(t, err, "older than 1h0m0s")
}
