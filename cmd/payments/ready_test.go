package main_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/dbtest"
)

// docs/API.md section 11: `payments worker` answers /readyz on its metrics
// address as serve does: 200 while it can commit, 503 service_unavailable
// within 5 s of commits becoming impossible (here its cluster's synchronous
// standby is named but absent, so every commit waits), and 200 again once
// it can; /healthz, its liveness, stays 200 throughout.
func TestWorker_readyzProvesACommit(t *testing.T) {
	t.Parallel()
	cluster := dbtest.NewCluster(t)
	worker := startProc(t, []string{"DATABASE_URL=" + cluster.URL(), "STRIPE_API_BASE=http://127.0.0.1:1", "STRIPE_SECRET_KEY=",
		"PAYMENTS_FAILPOINTS=", "PAYMENTS_METRICS_ADDR=127.0.0.1:0", "PAYMENTS_DB_TX_TIMEOUT=1s"}, "worker")
	base := "http://" + worker.waitFor(t, &worker.stderr, metricsListening)
	client := &http.Client{Timeout: 10 * time.Second}
	status := func(path string) int {
		resp, err := client.Get(base + path)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, status("/readyz"))

	cluster.SetSynchronousStandbys("phantom")
	lost := time.Now()
	for status("/readyz") != http.StatusServiceUnavailable {
		require.Less(t, time.Since(lost), 5*time.Second, "503 within 5 s of commits becoming impossible")
	}
	resp, err := client.Get(base + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	require.Equal(t, http.StatusOK, status("/healthz"), "liveness does not depend on the database")

	cluster.SetSynchronousStandbys("")
	back := time.Now()
	for status("/readyz") != http.StatusOK {
		require.Less(t, time.Since(back), 5*time.Second, "200 again once a commit is possible")
	}
}
