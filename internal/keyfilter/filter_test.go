package keyfilter_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/keyfilter"
)

var layouts = []keyfilter.Layout{keyfilter.LayoutBlocked, keyfilter.LayoutBloomV3}

// clock is an injected clock tests move by hand.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.set(t)
	return c
}

func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) set(t time.Time)         { c.ns.Store(t.UnixNano()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// start is an arbitrary instant that is not on a slice boundary.
var start = time.Date(2026, 3, 1, 5, 17, 23, 456, time.UTC)

type testBundle struct {
	filter *keyfilter.Filter
	clock  *clock
	reg    *prometheus.Registry
}

// setup returns a ready (rebuilt, empty) filter on an injected clock; cfg's
// zero fields take the defaults, but for a small ExpectedKeysPerSlice.
func setup(t *testing.T, cfg keyfilter.Config) *testBundle {
	t.Helper()
	b := &testBundle{clock: newClock(start), reg: prometheus.NewRegistry()}
	if cfg.ExpectedKeysPerSlice == 0 {
		cfg.ExpectedKeysPerSlice = 1000
	}
	cfg.Now, cfg.Registry = b.clock.Now, b.reg
	var err error
	b.filter, err = keyfilter.New(cfg)
	require.NoError(t, err)
	_, err = b.filter.Rebuild(context.Background(), rowsOf())
	require.NoError(t, err)
	return b
}

// userKey is a random (user, key) pair, as a client would send it.
type userKey struct {
	user int64
	key  string
}

func randomKeys(rng *rand.Rand, n int) []userKey {
	keys := make([]userKey, n)
	for i := range keys {
		keys[i] = userKey{rng.Int64N(1 << 20), fmt.Sprintf("%016x-%08x", rng.Uint64(), rng.Uint32())}
	}
	return keys
}

func rowsOf(rows ...keyfilter.Row) iter.Seq2[keyfilter.Row, error] {
	return func(yield func(keyfilter.Row, error) bool) {
		for _, r := range rows {
			if !yield(r, nil) {
				return
			}
		}
	}
}

func TestFilter_neverForgetsAKeyWithinTheTTLAcrossRotations(t *testing.T) {
	t.Parallel()
	for _, layout := range layouts {
		t.Run(layout.String(), func(t *testing.T) {
			t.Parallel()
			const ttl, keys = 24 * time.Hour, 100_000
			// 100k keys over three TTLs: nine 8-hour slices of about 11k keys.
			b := setup(t, keyfilter.Config{TTL: ttl, Slices: 4, ExpectedKeysPerSlice: 12_000, FalsePositiveRate: 0.01, Layout: layout})
			rng := rand.New(rand.NewPCG(1, uint64(layout)))
			added := randomKeys(rng, keys)
			at := make([]time.Time, keys)
			step := 3 * ttl / keys
			for i, k := range added {
				b.clock.advance(time.Duration(rng.Int64N(int64(2 * step)))) // uneven steps, 3 TTLs in all
				at[i] = b.clock.Now()
				b.filter.Add(k.user, k.key)
				if i%5000 != 4999 {
					continue
				}
				// Every key added within the TTL must still answer "maybe".
				now, checked, forgotten := b.clock.Now(), 0, 0
				for j := i; j >= 0 && now.Sub(at[j]) <= ttl; j-- {
					checked++
					if !b.filter.MaybeSeen(added[j].user, added[j].key) {
						forgotten++
					}
				}
				require.Zero(t, forgotten, "of %d keys added in the last TTL, at key %d", checked, i)
			}
			require.Greater(t, b.clock.Now().Sub(start), 2*ttl+ttl/2, "the clock ran across many rotations")
		})
	}
}

// The invariant, to the nanosecond: a key added at a is "maybe seen" at
// least until a+TTL; its slice is dropped at the first rotation at or after
// (floor(a/P)+Slices)*P, where P = ceil(TTL/(Slices-1)), which is no later
// than a+Slices*P.
func TestFilter_keepsAKeyForAtLeastTheTTLAndDropsItOneSliceLater(t *testing.T) {
	t.Parallel()
	for _, layout := range layouts {
		t.Run(layout.String(), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(2, uint64(layout)))
			for trial := range 300 {
				ttl := time.Hour + time.Duration(rng.Int64N(int64(47*time.Hour))) // not a round number
				slices := 2 + rng.IntN(4)
				b := setup(t, keyfilter.Config{TTL: ttl, Slices: slices, ExpectedKeysPerSlice: 16, Layout: layout})
				p := b.filter.Stats().SlicePeriod
				require.Equal(t, (ttl+time.Duration(slices-2))/time.Duration(slices-1), p)
				require.GreaterOrEqual(t, time.Duration(slices-1)*p, ttl)

				b.clock.advance(time.Duration(rng.Int64N(int64(3 * ttl)))) // the filter has lived a while
				a := b.clock.Now()
				b.filter.Add(42, "k")
				check := func(at time.Time, want bool, what string) {
					b.clock.set(at)
					b.filter.Rotate()
					require.Equal(t, want, b.filter.MaybeSeen(42, "k"), "trial %d (TTL %s, %d slices, P %s): %s", trial, ttl, slices, p, what)
				}
				check(a.Add(time.Duration(rng.Int64N(int64(ttl)))), true, "within the TTL")
				check(a.Add(ttl), true, "at exactly the TTL")
				drop := time.Unix(0, (a.UnixNano()/int64(p)+int64(slices))*int64(p))
				require.True(t, drop.After(a.Add(ttl)))
				require.False(t, drop.After(a.Add(time.Duration(slices)*p)))
				check(drop.Add(-1), true, "a nanosecond before its slice is dropped")
				check(drop, false, "once its slice is dropped")
			}
		})
	}
}

func TestFilter_aClockThatGoesBackKeepsTheNewestSlice(t *testing.T) {
	t.Parallel()
	b := setup(t, keyfilter.Config{TTL: 24 * time.Hour, Slices: 3})
	b.clock.advance(36 * time.Hour)
	b.filter.Add(1, "ahead")
	b.clock.advance(-30 * time.Hour) // an NTP step back
	b.filter.Add(1, "behind")        // goes into the newest slice, not an older one
	b.clock.advance(30*time.Hour + 24*time.Hour)
	b.filter.Rotate()
	require.True(t, b.filter.MaybeSeen(1, "ahead"))
	require.True(t, b.filter.MaybeSeen(1, "behind"))
}

func TestFilter_falsePositiveRateIsTheConfiguredOneAtTheExpectedLoad(t *testing.T) {
	t.Parallel()
	for _, layout := range layouts {
		for _, rate := range []float64{0.01, 0.001} {
			t.Run(fmt.Sprintf("%s/%g", layout, rate), func(t *testing.T) {
				t.Parallel()
				const slices, perSlice = 4, 20_000
				b := setup(t, keyfilter.Config{Slices: slices, ExpectedKeysPerSlice: perSlice, FalsePositiveRate: rate, Layout: layout})
				rng := rand.New(rand.NewPCG(3, uint64(layout)))
				// The worst case: every live slice at its expected load,
				// just before the oldest one is dropped.
				for range slices {
					for _, k := range randomKeys(rng, perSlice) {
						b.filter.Add(k.user, k.key)
					}
					b.clock.advance(b.filter.Stats().SlicePeriod)
				}
				b.clock.advance(-b.filter.Stats().SlicePeriod)
				checks, maybe := int(300/rate), 0
				for _, k := range randomKeys(rng, checks) {
					if b.filter.MaybeSeen(k.user, k.key) {
						maybe++
					}
				}
				measured := float64(maybe) / float64(checks)
				estimated := b.filter.Stats().EstimatedFalsePositiveRate
				t.Logf("%s: configured %g, measured %.5f, estimated %.5f, %d bytes", layout, rate, measured, estimated, b.filter.Stats().Bytes)
				require.InDelta(t, rate, measured, rate/2, "measured within a factor of 2")
				require.InEpsilon(t, measured, estimated, 0.25, "the estimate is close to the measurement")
			})
		}
	}
}

func TestFilter_concurrentAddsChecksAndRotationsLoseNothing(t *testing.T) {
	t.Parallel()
	for _, layout := range layouts {
		t.Run(layout.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t, keyfilter.Config{TTL: 24 * time.Hour, Slices: 4, ExpectedKeysPerSlice: 20_000, Layout: layout})
			const workers, perWorker = 4, 3000
			var wg sync.WaitGroup
			var forgotten atomic.Int32
			keys := make([][]userKey, workers)
			for w := range workers {
				keys[w] = randomKeys(rand.New(rand.NewPCG(4, uint64(w))), perWorker)
				wg.Go(func() {
					for i, k := range keys[w] {
						if w == 0 && i%150 == 0 {
							// The clock moves 20 hours in 1-hour steps while keys
							// are added: rotations happen, yet every key stays
							// within the TTL.
							b.clock.advance(time.Hour)
							b.filter.Rotate()
						}
						if i%2 == 0 {
							b.filter.Add(k.user, k.key)
						} else {
							b.filter.CheckAndAdd(k.user, k.key)
						}
						if !b.filter.MaybeSeen(k.user, k.key) {
							forgotten.Add(1)
						}
						if i%500 == 0 {
							b.filter.ReportFalsePositive()
							_ = b.filter.Stats()
						}
					}
				})
			}
			var rebuildErr error
			wg.Go(func() { // a late rebuild, as after a reconnect, joins in
				row := keyfilter.Row{UserID: 7, Key: "rebuilt", LiveFrom: b.clock.Now()}
				_, rebuildErr = b.filter.Rebuild(context.Background(), rowsOf(row))
			})
			wg.Wait()
			require.NoError(t, rebuildErr)
			require.Zero(t, forgotten.Load())
			for w := range workers {
				for _, k := range keys[w] {
					require.True(t, b.filter.MaybeSeen(k.user, k.key))
				}
			}
			require.True(t, b.filter.MaybeSeen(7, "rebuilt"))
		})
	}
}

func TestRebuild_placesKeysByCreatedTimeAndSkipsExpiredOnes(t *testing.T) {
	t.Parallel()
	for _, layout := range layouts {
		t.Run(layout.String(), func(t *testing.T) {
			t.Parallel()
			const ttl, slices = 24 * time.Hour, 4
			c := newClock(start)
			// Sized well above the 2000 keys, so no dropped key is a false positive.
			f, err := keyfilter.New(keyfilter.Config{TTL: ttl, Slices: slices, ExpectedKeysPerSlice: 10_000, Now: c.Now, Layout: layout})
			require.NoError(t, err)
			require.True(t, f.MaybeSeen(1, "anything"), "cold until rebuilt")
			p := f.Stats().SlicePeriod
			newest := f.Stats().Newest
			require.False(t, newest.After(start))

			rng := rand.New(rand.NewPCG(5, uint64(layout)))
			var rows []keyfilter.Row
			for _, k := range randomKeys(rng, 2000) {
				age := time.Duration(rng.Int64N(int64(ttl))) // alive: created within the last TTL
				rows = append(rows, keyfilter.Row{UserID: k.user, Key: k.key, LiveFrom: start.Add(-age)})
			}
			rows = append(rows,
				keyfilter.Row{UserID: 1, Key: "expired", LiveFrom: start.Add(-ttl - time.Second)},
				keyfilter.Row{UserID: 1, Key: "just expired", LiveFrom: start.Add(-ttl)},
				keyfilter.Row{UserID: 1, Key: "from the future", LiveFrom: start.Add(time.Hour)},
			)
			st, err := f.Rebuild(context.Background(), rowsOf(rows...))
			require.NoError(t, err)
			require.Equal(t, keyfilter.RebuildStats{Added: 2001, Expired: 2}, st)
			require.True(t, f.Stats().Ready)
			require.False(t, f.MaybeSeen(1, "expired"))
			require.False(t, f.MaybeSeen(1, "just expired"))
			require.True(t, f.MaybeSeen(1, "from the future"))

			// Each rotation drops the oldest slice: exactly the keys created
			// in its time become new, the others stay.
			for i := range slices {
				c.set(newest.Add(time.Duration(i+1) * p))
				f.Rotate()
				dropBefore := newest.Add(time.Duration(i+2-slices) * p)
				for _, r := range rows[:2000] {
					if r.LiveFrom.Before(dropBefore) {
						require.False(t, f.MaybeSeen(r.UserID, r.Key), "rotation %d: created %s, before %s", i, r.LiveFrom, dropBefore)
					} else {
						require.True(t, f.MaybeSeen(r.UserID, r.Key), "rotation %d: created %s", i, r.LiveFrom)
					}
				}
				require.Equal(t, i < slices-1, f.MaybeSeen(1, "from the future"), "counted as created now, in the newest slice")
			}
		})
	}
}

func TestRebuild_anErrorOrCancellationLeavesTheFilterCold(t *testing.T) {
	t.Parallel()
	f, err := keyfilter.New(keyfilter.Config{ExpectedKeysPerSlice: 100})
	require.NoError(t, err)
	broken := func(yield func(keyfilter.Row, error) bool) {
		if yield(keyfilter.Row{UserID: 1, Key: "a", LiveFrom: time.Now()}, nil) {
			yield(keyfilter.Row{}, errors.New("connection reset"))
		}
	}
	_, err = f.Rebuild(context.Background(), broken)
	require.ErrorContains(t, err, "connection reset")
	require.True(t, f.MaybeSeen(2, "b"), "still cold")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = f.Rebuild(ctx, rowsOf(keyfilter.Row{UserID: 1, Key: "a", LiveFrom: time.Now()}))
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, f.MaybeSeen(2, "b"), "still cold")
	require.False(t, f.Stats().Ready)

	_, err = f.Rebuild(context.Background(), rowsOf())
	require.NoError(t, err)
	require.False(t, f.MaybeSeen(2, "b"), "warm")
	require.True(t, f.MaybeSeen(1, "a"), "kept from the failed rebuild")
}

func TestFilter_nilAndDisabledFiltersAlwaysSayMaybe(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	disabled, err := keyfilter.New(keyfilter.Config{Disabled: true, Registry: reg})
	require.NoError(t, err)
	for name, f := range map[string]*keyfilter.Filter{"nil": nil, "disabled": disabled} {
		f.Add(1, "k")
		f.Rotate()
		f.ReportFalsePositive()
		st, err := f.Rebuild(context.Background(), func(func(keyfilter.Row, error) bool) { panic("read") })
		require.NoError(t, err, name)
		require.Zero(t, st, name)
		require.True(t, f.MaybeSeen(1, "k"), name)
		require.True(t, f.MaybeSeen(2, "never added"), name)
		require.True(t, f.CheckAndAdd(3, "k"), name)
		require.Equal(t, keyfilter.Stats{}, f.Stats(), name)
	}
	require.Zero(t, gather(t, reg, "payments_keyfilter_checks_total"))
	require.Zero(t, gather(t, reg, "payments_keyfilter_false_positives_total"))
	require.Zero(t, gather(t, reg, "payments_keyfilter_fill_ratio"))
}

func TestFilter_metrics(t *testing.T) {
	t.Parallel()
	b := setup(t, keyfilter.Config{ExpectedKeysPerSlice: 100})
	keys := randomKeys(rand.New(rand.NewPCG(6, 0)), 300)
	for _, k := range keys[:100] {
		b.filter.Add(k.user, k.key)
	}
	news := 0
	for _, k := range keys { // 100 added, 200 not
		if !b.filter.MaybeSeen(k.user, k.key) {
			news++
		}
	}
	require.False(t, b.filter.CheckAndAdd(9, "new"))
	require.True(t, b.filter.CheckAndAdd(9, "new"))
	b.filter.ReportFalsePositive()
	b.filter.ReportFalsePositive()

	require.GreaterOrEqual(t, news, 190, "a few false positives at most")
	require.Equal(t, 302.0, gather(t, b.reg, "payments_keyfilter_checks_total"))
	require.Equal(t, float64(news+1), gather(t, b.reg, "payments_keyfilter_definitely_new_total"))
	require.Equal(t, 2.0, gather(t, b.reg, "payments_keyfilter_false_positives_total"))
	st := b.filter.Stats()
	fill := gather(t, b.reg, "payments_keyfilter_fill_ratio")
	require.Equal(t, st.FillRatios[0], fill)
	require.Greater(t, fill, 0.1)
	require.Less(t, fill, 0.6)
	require.Equal(t, []float64{0, 0, 0}, st.FillRatios[1:], "older slices are empty")
	fp := gather(t, b.reg, "payments_keyfilter_estimated_false_positive_rate")
	require.Equal(t, st.EstimatedFalsePositiveRate, fp)
	require.Greater(t, fp, 0.0)
	require.Less(t, fp, 0.005, "one slice of four at its load: a quarter of the default rate")
}

func TestNew_rejectsABadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []keyfilter.Config{
		{TTL: -time.Hour},
		{Slices: 1},
		{Slices: 65},
		{FalsePositiveRate: 1},
		{FalsePositiveRate: -0.1},
		{FalsePositiveRate: 1e-12},
		{Layout: 7},
	} {
		_, err := keyfilter.New(cfg)
		require.Error(t, err, "%+v", cfg)
	}
	reg := prometheus.NewRegistry()
	_, err := keyfilter.New(keyfilter.Config{ExpectedKeysPerSlice: 10, Registry: reg})
	require.NoError(t, err)
	_, err = keyfilter.New(keyfilter.Config{ExpectedKeysPerSlice: 10, Registry: reg})
	require.ErrorContains(t, err, "registering metrics", "a second filter on one registry")
}

func TestElement_isUnambiguous(t *testing.T) {
	t.Parallel()
	require.Equal(t, []byte{0, 0, 0, 0, 0, 0, 1, 2, 'k', '1'}, keyfilter.Element(258, "k1"))
	require.NotEqual(t, keyfilter.Element(1, "\x00k"), keyfilter.Element(256, "k"))
	require.Equal(t, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, keyfilter.Element(-1, ""))
}

// gather reads one unlabelled metric's value from reg.
func gather(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		m := f.GetMetric()[0]
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestFilter_checksAndAddsAllocateNothing(t *testing.T) {
	// Not parallel: testing.AllocsPerRun counts the whole process's allocations.
	b := setup(t, keyfilter.Config{})
	key := "3f2c1a9e-5b7d-4c2e-9a1f-0123456789ab"
	allocs := testing.AllocsPerRun(1000, func() {
		b.filter.Add(1, key)
		b.filter.MaybeSeen(2, key)
		b.filter.CheckAndAdd(3, key)
	})
	require.Zero(t, allocs)
}
