package api_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/api"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/openapitest"
	"github.com/example/payments/internal/users"
)

// authCacheBundle serves the API with only what authentication and
// GET /v1/events need: a database with the demo users.
type authCacheBundle struct {
	pool     *pgxpool.Pool
	server   *httptest.Server
	registry *prometheus.Registry
}

func setupAuthCache(t *testing.T, ttl time.Duration) *authCacheBundle {
	t.Helper()
	pool := dbtest.NewPool(t)
	require.NoError(t, users.SeedDemoUsers(context.Background(), pool))
	reg := prometheus.NewRegistry()
	server := httptest.NewServer(openapitest.Handler(t, newHandler(t, api.Config{
		Pool: pool, Logger: slog.New(slog.DiscardHandler), Registry: reg, AuthCacheTTL: ttl,
	})))
	t.Cleanup(server.Close)
	return &authCacheBundle{pool: pool, server: server, registry: reg}
}

func (b *authCacheBundle) get(t *testing.T, path, key string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.server.URL+path, nil)
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func (b *authCacheBundle) revoke(t *testing.T, key string) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(),
		"UPDATE api_keys SET revoked_at = now() WHERE key_hash = sha256(convert_to($1, 'UTF8'))", key)
	require.NoError(t, err)
}

func TestAuthenticate_answersAKnownKeyFromTheCacheByDefault(t *testing.T) {
	t.Parallel()
	b := setupAuthCache(t, 0) // 0: the default TTL, 10s
	code, body := b.get(t, "/v1/events", aliceKey)
	require.Equal(t, http.StatusOK, code, body)

	b.revoke(t, aliceKey)
	code, body = b.get(t, "/v1/events", aliceKey)
	require.Equal(t, http.StatusOK, code, "the revoked key is still cached: no query was made: %s", body)
	code, body = b.get(t, "/v1/events", bobKey)
	require.Equal(t, http.StatusOK, code, body)

	metrics := metricsText(t, b.registry)
	require.Contains(t, metrics, "\npayments_auth_cache_hits_total 1\n")
	require.Contains(t, metrics, "\npayments_auth_cache_misses_total 2\n")
}

func TestAuthenticate_withTheCacheOffRefusesARevokedKeyAtOnce(t *testing.T) {
	t.Parallel()
	b := setupAuthCache(t, -1)
	code, body := b.get(t, "/v1/events", aliceKey)
	require.Equal(t, http.StatusOK, code, body)

	b.revoke(t, aliceKey)
	code, body = b.get(t, "/v1/events", aliceKey)
	require.Equal(t, http.StatusUnauthorized, code, body)
	require.Contains(t, body, `"unauthorized"`)

	metrics := metricsText(t, b.registry)
	require.Contains(t, metrics, "\npayments_auth_cache_hits_total 0\n")
	require.Contains(t, metrics, "\npayments_auth_cache_misses_total 2\n")
}
