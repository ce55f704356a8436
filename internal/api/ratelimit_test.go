package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/api"
)

func TestRateLimit_perUserWithRetryAfter(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{rateLimit: api.RateLimit{Rate: 0.5, Burst: 3}})
	for range 3 {
		resp, body := b.do(t, http.MethodGet, "/v1/payments", aliceKey, nil, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	}
	resp, body := b.do(t, http.MethodGet, "/v1/payments", aliceKey, nil, nil)
	requireProblem(t, resp, body, http.StatusTooManyRequests, "rate_limited")
	require.Equal(t, "2", resp.Header.Get("Retry-After"), "one token every two seconds")

	resp, body = b.do(t, http.MethodGet, "/v1/payments", bobKey, nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "another user has a bucket of their own: %s", body)
	resp, _ = b.do(t, http.MethodGet, "/healthz", "", nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "health checks are not limited")
}
