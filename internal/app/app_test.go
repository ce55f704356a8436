package app_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/api"
	"github.com/example/payments/internal/app"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/keyfilter"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

func TestNew_refusesABadKeyFilterBeforeConnecting(t *testing.T) {
	t.Parallel()
	_, err := app.New(context.Background(), app.Config{
		DatabaseURL: "postgres://nobody@127.0.0.1:1/none", KeyFilter: keyfilter.Config{FalsePositiveRate: 2},
	})
	require.ErrorIs(t, err, app.ErrKeyFilterConfig)
}

func TestNew_assemblesAServiceThatAnswers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, err := app.New(ctx, app.Config{DatabaseURL: dbtest.NewURL(t), KeyTTL: time.Hour})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	st, err := a.Engine.RebuildKeyFilter(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Added)

	handler, err := a.APIHandler(api.RateLimit{}, 0)
	require.NoError(t, err)
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	for path, status := range map[string]int{"/healthz": http.StatusOK, "/readyz": http.StatusOK, "/metrics": http.StatusOK} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, status, resp.StatusCode, "%s (the metrics: to this test, a client on the machine itself)", path)
	}
	// Every route under /v1 needs an API key.
	resp, err := http.Get(srv.URL + "/v1/payments")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	families, err := a.Registry.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	require.True(t, names["payments_keyfilter_checks_total"], "the key filter's metrics are in the app's registry")
	require.True(t, names["go_goroutines"], "so are the Go runtime's")
}
