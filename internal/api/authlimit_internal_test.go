package api

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// A hostile client sending from ever new addresses must not grow the
// limiter's memory without bound.
func TestAddrLimiter_memoryIsBounded(t *testing.T) {
	t.Parallel()
	l := newAddrLimiter(DefaultFailedAuthLimit, prometheus.NewRegistry())
	l.maxBuckets = 1000
	base := netip.MustParseAddr("2001:db8::").As16()
	for i := range 100_000 {
		a := base
		a[4], a[5], a[6], a[7] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
		client, err := netip.AddrFrom16(a).Prefix(64)
		require.NoError(t, err)
		settle, _ := l.take(context.Background(), client)
		require.NotNil(t, settle, "a new address has its burst")
		settle(true)
		require.LessOrEqual(t, len(l.buckets), l.maxBuckets)
	}

	// An address past its allowance stays limited while the others come
	// and go, as long as it is not swept: its bucket is not full.
	limited := netip.MustParsePrefix("198.51.100.1/32")
	for range DefaultFailedAuthLimit.Burst {
		settle, _ := l.take(context.Background(), limited)
		require.NotNil(t, settle)
		settle(true)
	}
	settle, wait := l.take(context.Background(), limited)
	require.Nil(t, settle)
	require.Positive(t, wait)
}

// Lookups in flight hold their tokens: however many guesses arrive at
// once, no more are looked up than the address has tokens. A lookup past
// them waits for one in flight to settle: admitted when it was a valid key
// (its token given back), refused when it was a failure (its token spent).
func TestAddrLimiter_lookupsInFlightHoldTheirTokens(t *testing.T) {
	t.Parallel()
	l := newAddrLimiter(RateLimit{Rate: 0.001, Burst: 3}, prometheus.NewRegistry())
	client := netip.MustParsePrefix("203.0.113.7/32")
	var admitted []func(bool)
	for range 3 {
		settle, _ := l.take(context.Background(), client)
		require.NotNil(t, settle)
		admitted = append(admitted, settle)
	}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	settle, _ := l.take(short, client)
	require.Nil(t, settle, "three lookups are running and none settled: no fourth")

	fourth := make(chan func(bool), 1)
	go func() { settle, _ := l.take(context.Background(), client); fourth <- settle }()
	select {
	case <-fourth:
		t.Fatal("admitted while three lookups hold the three tokens")
	case <-time.After(50 * time.Millisecond):
	}
	admitted[0](false) // a valid key: its token is given back, to the fourth
	admitted[0] = <-fourth
	require.NotNil(t, admitted[0])

	fifth := make(chan func(bool), 1)
	go func() { settle, _ := l.take(context.Background(), client); fifth <- settle }()
	for _, settle := range admitted {
		settle(true)
	}
	require.Nil(t, <-fifth, "three failures took the three tokens: the waiting lookup is refused")
	settle, wait := l.take(context.Background(), client)
	require.Nil(t, settle)
	require.Greater(t, wait.Seconds(), 900.0)
}
