package main

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// The metrics listener's defaults are loopback (issue 42: /metrics was
// open on the API's port), and serve's differs from the worker's, so that
// both run on one machine with their defaults.
func TestMetrics_defaultsAreLoopbackAndApart(t *testing.T) {
	t.Parallel()
	serve, worker := netip.MustParseAddrPort(defaultMetricsAddr), netip.MustParseAddrPort(defaultWorkerMetricsAddr)
	require.True(t, serve.Addr().IsLoopback(), defaultMetricsAddr)
	require.True(t, worker.Addr().IsLoopback(), defaultWorkerMetricsAddr)
	require.NotEqual(t, serve.Port(), worker.Port())
	for _, off := range []string{"off", "OFF", "", " "} {
		ln, err := listenMetrics(off)
		require.NoError(t, err)
		require.Nil(t, ln, "%q serves no metrics", off)
	}
}
