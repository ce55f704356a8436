package keyfilter

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// snapshotPair is a filter that took keys, and the bytes of its snapshot.
func snapshotPair(t *testing.T, now *time.Time, keys int) (*Filter, []byte) {
	t.Helper()
	cfg := Config{TTL: 3 * time.Hour, ExpectedKeysPerSlice: 2000, Now: func() time.Time { return *now }}
	f, err := New(cfg)
	require.NoError(t, err)
	_, err = f.Rebuild(context.Background(), func(func(Row, error) bool) {})
	require.NoError(t, err)
	for i := range keys {
		f.Add(int64(i), fmt.Sprint("key-", i))
		if i%(keys/4) == 0 {
			*now = now.Add(40 * time.Minute) // spread over the slices
		}
	}
	return f, f.Snapshot(*now)
}

func TestSnapshot_aLoadedFilterKnowsEveryKeyOfTheOneThatWroteIt(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	f, snap := snapshotPair(t, &now, 1000)
	covers := now
	now = now.Add(10 * time.Minute)

	g, err := New(Config{TTL: 3 * time.Hour, ExpectedKeysPerSlice: 2000, Now: func() time.Time { return now }})
	require.NoError(t, err)
	got, err := g.LoadSnapshot(snap, time.Hour)
	require.NoError(t, err)
	require.True(t, got.Equal(covers), "covers %s, want %s", got, covers)
	require.False(t, g.Stats().Ready, "a loaded snapshot waits for the keys made since")
	_, err = g.Rebuild(context.Background(), func(func(Row, error) bool) {})
	require.NoError(t, err)
	for i := range 1000 {
		require.True(t, g.MaybeSeen(int64(i), fmt.Sprint("key-", i)), "key %d", i)
	}
	for i := range 1000 { // the same answers for keys never added
		require.Equal(t, f.MaybeSeen(int64(i), fmt.Sprint("other-", i)), g.MaybeSeen(int64(i), fmt.Sprint("other-", i)))
	}
}

func TestSnapshot_aCorruptedOneIsRefused(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	_, snap := snapshotPair(t, &now, 1000)
	for _, at := range []int{0, 5, len(snap) / 2, len(snap) - 1} {
		bad := append([]byte(nil), snap...)
		bad[at] ^= 0x10
		g, err := New(Config{TTL: 3 * time.Hour, ExpectedKeysPerSlice: 2000, Now: func() time.Time { return now }})
		require.NoError(t, err)
		_, err = g.LoadSnapshot(bad, time.Hour)
		require.ErrorIs(t, err, ErrSnapshotUnusable, "byte %d flipped", at)
		require.Zero(t, g.Stats().FillRatios[0], "a refused snapshot leaves no bits")
	}
	g, err := New(Config{TTL: 3 * time.Hour, ExpectedKeysPerSlice: 2000, Now: func() time.Time { return now }})
	require.NoError(t, err)
	_, err = g.LoadSnapshot(snap[:len(snap)-9], time.Hour)
	require.ErrorIs(t, err, ErrSnapshotUnusable, "truncated")
	_, err = g.LoadSnapshot(nil, time.Hour)
	require.ErrorIs(t, err, ErrSnapshotUnusable, "empty")
}

func TestSnapshot_aStaleOneIsRefused(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	_, snap := snapshotPair(t, &now, 1000)
	for _, c := range []struct {
		age, maxAge time.Duration
		ok          bool
	}{
		{59 * time.Minute, time.Hour, true},
		{61 * time.Minute, time.Hour, false},               // older than its own limit
		{3*time.Hour + time.Second, 24 * time.Hour, false}, // older than the TTL
		{-2 * time.Minute, time.Hour, false},               // from the future: a clock is wrong
	} {
		at := now.Add(c.age)
		g, err := New(Config{TTL: 3 * time.Hour, ExpectedKeysPerSlice: 2000, Now: func() time.Time { return at }})
		require.NoError(t, err)
		_, err = g.LoadSnapshot(snap, c.maxAge)
		if c.ok {
			require.NoError(t, err, "%+v", c)
		} else {
			require.ErrorIs(t, err, ErrSnapshotUnusable, "%+v", c)
		}
	}
}

func TestSnapshot_anotherSizeOrAWarmFilterIsRefused(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	_, snap := snapshotPair(t, &now, 1000)
	clock := func() time.Time { return now }
	for _, cfg := range []Config{
		{TTL: 3 * time.Hour, ExpectedKeysPerSlice: 4000, Now: clock},
		{TTL: 4 * time.Hour, ExpectedKeysPerSlice: 2000, Now: clock},
		{TTL: 3 * time.Hour, ExpectedKeysPerSlice: 2000, FalsePositiveRate: 0.001, Now: clock},
		{TTL: 3 * time.Hour, ExpectedKeysPerSlice: 2000, Slices: 3, Now: clock},
	} {
		g, err := New(cfg)
		require.NoError(t, err)
		_, err = g.LoadSnapshot(snap, time.Hour)
		require.ErrorIs(t, err, ErrSnapshotUnusable, "%+v", cfg)
	}
	// A filter that took a key already hashed it with its own seed.
	g, err := New(Config{TTL: 3 * time.Hour, ExpectedKeysPerSlice: 2000, Now: clock})
	require.NoError(t, err)
	g.CheckAndAdd(1, "claimed before the load")
	_, err = g.LoadSnapshot(snap, time.Hour)
	require.True(t, errors.Is(err, ErrSnapshotUnusable))
	var nilFilter *Filter
	require.Nil(t, nilFilter.Snapshot(now))
}
