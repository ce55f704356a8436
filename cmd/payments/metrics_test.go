package main_test

import (
	"io"
	"net/http"
	"net/netip"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/dbtest"
)

// Issue 42, item 7: /metrics was open on the API's port. serve (as dev and
// worker) serves it on a listener of its own, PAYMENTS_METRICS_ADDR
// (loopback by default), and the API's port answers it only to a client on
// the machine itself that no proxy forwarded (404 otherwise); `off` serves
// none.
func TestServe_metricsOnTheirOwnListener(t *testing.T) {
	t.Parallel()
	simURL := startSimulator(t)
	dbURL := dbtest.NewURL(t)
	seedDemoUsers(t, dbURL)

	serve, base := startServe(t, dbURL, simURL)
	addr := netip.MustParseAddrPort(serve.waitFor(t, &serve.stderr, metricsListening))
	require.True(t, addr.Addr().IsLoopback(), "%s", addr)
	status, _ := get(t, base+"/v1/payments", aliceKey)
	require.Equal(t, http.StatusOK, status)

	resp, err := http.Get("http://" + addr.String() + "/metrics")
	require.NoError(t, err)
	body := readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, `payments_http_requests_total{code="200",method="GET",route="/v1/payments"} 1`)

	resp, err = http.Get(base + "/metrics")
	require.NoError(t, err)
	body = readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, "to a client on the machine itself: %s", body)
	req, err := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("X-Forwarded-For", "203.0.113.7") // as a proxy in front of the API forwards others
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	body = readAll(t, resp)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "not to a forwarded client: %s", body)
	require.Contains(t, body, `"not_found"`)

	for _, setting := range []string{"off", ""} {
		off, offBase := startServe(t, dbURL, simURL, "PAYMENTS_METRICS_ADDR="+setting)
		off.waitFor(t, &off.stderr, regexp.MustCompile(`"msg":"metrics (not served)"`))
		require.NotRegexp(t, metricsListening, off.output(&off.stderr), "%q", setting)
		status, _ = get(t, offBase+"/healthz", "")
		require.Equal(t, http.StatusOK, status)
	}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(data)
}
