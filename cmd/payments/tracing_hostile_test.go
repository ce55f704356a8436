package main_test

// Tracing under a hostile caller and a hung collector: neither may cost a
// request its answer, or a process its shutdown.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/dbtest"
)

// hungCollector accepts connections and never answers them, as a collector
// whose process is wedged does; it reports how many it accepted.
func hungCollector(t *testing.T) (url string, accepted func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never read, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "http://" + ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return len(conns) }
}

// postWithTraceHeaders creates a payment as alice with the trace headers
// given (none when empty); a request not answered within 15 s is an error,
// so that a hang fails the test instead of stalling it.
func postWithTraceHeaders(t *testing.T, base, key, traceParent, traceState string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/payments",
		strings.NewReader(`{"amount":4200,"currency":"eur","payment_method":"pm_card_visa"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	if traceParent != "" {
		req.Header.Set("traceparent", traceParent)
	}
	if traceState != "" {
		req.Header.Set("tracestate", traceState)
	}
	resp, err := apiClient(t).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// A collector that hangs slows no request down and does not stop the
// process from shutting down: spans wait in a bounded queue (and are
// dropped when it is full), the exporter's calls have their own timeout,
// and the last flush at exit is bounded.
func TestTracing_aHungCollectorStallsNeitherRequestsNorShutdown(t *testing.T) {
	t.Parallel()
	collector, accepted := hungCollector(t)
	simURL := startSimulator(t)
	dbURL := dbtest.NewURL(t)
	seedDemoUsers(t, dbURL)
	serve, base := startServe(t, dbURL, simURL,
		"OTEL_EXPORTER_OTLP_ENDPOINT="+collector, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=", "OTEL_EXPORTER_OTLP_PROTOCOL=",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=", "OTEL_SDK_DISABLED=", "OTEL_TRACES_SAMPLER=",
		"OTEL_BSP_SCHEDULE_DELAY=10", "OTEL_BSP_MAX_QUEUE_SIZE=64", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE=16")

	// Enough requests to fill the span queue many times over (each makes
	// a dozen spans or more), each answered as it would be untraced.
	for i := range 60 {
		traceParent, _, _ := newTraceParent()
		status, data, err := postWithTraceHeaders(t, base, fmt.Sprintf("hung-collector-%d", i), traceParent, "")
		require.NoError(t, err, "request %d", i)
		require.Equal(t, 201, status, "request %d: %s", i, data)
	}
	require.Eventually(t, func() bool { return accepted() > 0 }, 30*time.Second, 20*time.Millisecond,
		"the exporter did try the collector (else this test proves nothing)")

	// Shutdown: the in-flight nothing, then the bounded last flush.
	start := time.Now()
	require.Zero(t, serve.signalAndWait(t, syscall.SIGTERM), "a clean exit, not a kill")
	require.Less(t, time.Since(start), 20*time.Second, "the flush to a hung collector is bounded")
}

// Trace headers are the caller's to get wrong: a malformed, oversized or
// hostile traceparent or tracestate is ignored (the request starts a trace
// of its own), never an error; and what the key row keeps is a traceparent
// this service made, never the caller's text.
func TestTracing_malformedTraceHeadersAreIgnoredAndNeverStored(t *testing.T) {
	t.Parallel()
	collector, _ := hungCollector(t) // tracing on; what is exported does not matter here
	simURL := startSimulator(t)
	dbURL := dbtest.NewURL(t)
	seedDemoUsers(t, dbURL)
	_, base := startServe(t, dbURL, simURL,
		"OTEL_EXPORTER_OTLP_ENDPOINT="+collector, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=", "OTEL_EXPORTER_OTLP_PROTOCOL=",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=", "OTEL_SDK_DISABLED=", "OTEL_TRACES_SAMPLER=")

	valid, _, _ := newTraceParent()
	hostile := map[string][2]string{ // name: traceparent, tracestate
		"garbage":          {"not a traceparent", ""},
		"all-zero trace":   {"00-00000000000000000000000000000000-0000000000000001-01", ""},
		"version ff":       {"ff" + valid[2:], ""},
		"upper-case hex":   {strings.ToUpper(valid), ""},
		"trailing data":    {valid + "-and-more'); DROP TABLE idempotency_keys; --", ""},
		"oversized":        {valid + strings.Repeat("a", 6000), ""},
		"huge tracestate":  {valid, strings.Repeat("k=v,", 1500)},
		"bad tracestate":   {valid, "===,,,=,@@@,k=\"v\""},
		"future version":   {"01" + valid[2:] + "-extra", ""},
		"unsampled parent": {valid[:len(valid)-2] + "00", ""},
	}
	i := 0
	for name, h := range hostile {
		i++
		status, data, err := postWithTraceHeaders(t, base, fmt.Sprintf("hostile-trace-%d", i), h[0], h[1])
		require.NoError(t, err, name)
		require.Equal(t, 201, status, "%s: %s", name, data)
	}

	pool := dbtestPool(t, dbURL)
	rows, err := pool.Query(context.Background(), `SELECT coalesce(trace_parent, '') FROM idempotency_keys`)
	require.NoError(t, err)
	ours := regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$`)
	n := 0
	for rows.Next() {
		var tp string
		require.NoError(t, rows.Scan(&tp))
		require.Regexp(t, ours, tp, "a traceparent the service made")
		require.NotContains(t, tp, "00000000000000000000000000000000")
		n++
	}
	require.NoError(t, rows.Err())
	require.Positive(t, n)
}
