package keyfilter

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/stretchr/testify/require"
)

// The bloomv3 layout sets exactly the bits bloom/v3's own Add would: its
// Test agrees with the filter on members and non-members alike.
func TestBloomV3Layout_isBloomV3BitForBit(t *testing.T) {
	t.Parallel()
	f, err := New(Config{Layout: LayoutBloomV3, ExpectedKeysPerSlice: 2000, FalsePositiveRate: 0.05})
	require.NoError(t, err)
	_, err = f.Rebuild(context.Background(), func(func(Row, error) bool) {})
	require.NoError(t, err)
	layout := f.slots.(*bloomV3)
	own := layout.filters[f.slot(f.gen.Load())]
	twin := bloom.NewWithEstimates(2000, 0.05/4) // what bloom/v3 alone makes of the same keys
	require.Equal(t, twin.Cap(), own.Cap())
	require.Equal(t, twin.K(), own.K())

	rng := rand.New(rand.NewPCG(7, 0))
	for i := range 2000 {
		user, key := rng.Int64(), fmt.Sprint(rng.Uint64())
		f.Add(user, key)
		twin.Add(Element(user, key))
		require.True(t, own.Test(Element(user, key)), "key %d", i)
	}
	require.True(t, own.Equal(twin))
	for range 20_000 {
		user, key := rng.Int64(), fmt.Sprint(rng.Uint64())
		require.Equal(t, own.Test(Element(user, key)), f.MaybeSeen(user, key))
	}
}

func TestBlockedSize_isTheFewestBlocksThatMeetTheRate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		keys      uint
		p         float64
		blockBits int
		overhead  float64 // most memory, relative to bloom/v3's
	}{
		{1000, 0.01, 512, 1.1},
		{3_333_334, 0.001 / 4, 512, 1.15},
		{3_333_334, 0.001 / 4, 128, 1.5},
		{5_000_000, 0.001 / 2, 256, 1.25},
		{100_000, 0.001 / 8, 64, 2.4},
		{1, 0.001, 128, 0},
	} {
		groups, k := blockedSize(c.keys, c.p, c.blockBits)
		model := newFPModel(k, c.blockBits)
		require.LessOrEqual(t, model.rate(float64(c.keys)/float64(groups)), c.p, "%+v", c)
		if groups > 1 {
			require.Greater(t, model.rate(float64(c.keys)/float64(groups-1)), c.p, "%+v: one block fewer", c)
		}
		m, _ := bloom.EstimateParameters(c.keys, c.p)
		bitsPerKey, classic := float64(groups)*float64(c.blockBits)/float64(c.keys), float64(m)/float64(c.keys)
		t.Logf("%d keys at %.2g in %d-bit blocks: %d blocks, k=%d, %.2f bits per key (bloom/v3: %.2f)", c.keys, c.p, c.blockBits, groups, k, bitsPerKey, classic)
		if c.overhead > 0 {
			require.Less(t, bitsPerKey, c.overhead*classic)
		}
	}
}

func TestBlocked_eachBlockIsOneCacheLine(t *testing.T) {
	t.Parallel()
	for n := range 40 {
		w := alignedWords(n*blockWords + blockWords)
		require.Zero(t, uintptr(unsafe.Pointer(&w[0]))%blockBytes)
		require.Len(t, w, n*blockWords+blockWords)
	}
}
