package api_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/api"
	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/problem"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/route"
	"github.com/example/payments/internal/users"
)

type widgetRequest struct {
	Size *int `json:"size"`
}

// widgetRoute is a team's route (api.Config.Routes): its flow answers 201
// with the size the route's Params checked.
func widgetRoute() (route.Route, *recovery.Flow) {
	flow := recovery.NewFlow("make_widget", recovery.From(recovery.Started,
		recovery.LocalPhase(func(_ context.Context, _ *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
			return recovery.Respond(http.StatusCreated, k.Params), nil
		}), recovery.Finished))
	return route.Route{
		Method: http.MethodPost, Path: "/v1/widgets", Flow: "make_widget", Request: widgetRequest{}, Status: http.StatusCreated,
		Params: func(req any) (any, error) {
			if size := req.(*widgetRequest).Size; size != nil && *size > 0 {
				return map[string]int{"size": *size}, nil
			}
			return nil, problem.New(http.StatusBadRequest, problem.ValidationFailed, "size is required.")
		},
	}, flow
}

// A team's route is served behind /v1's authentication, its body read as
// strictly as the service's own routes' (an unknown field is 400), its
// Params' refusal answered and not stored (the key stays free), its flow
// run under the key and its answer replayed.
func TestTeamRoutes_readStrictlyAndRunTheFlow(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	require.NoError(t, users.SeedDemoUsers(context.Background(), pool))
	rt, flow := widgetRoute()
	engine := recovery.New(recovery.Config{Pool: pool})
	require.NoError(t, engine.Register(flow))
	server := httptest.NewServer(api.NewHandler(api.Config{Pool: pool, Engine: engine, Logger: slog.New(slog.DiscardHandler),
		Registry: prometheus.NewRegistry(), Routes: []route.Route{rt}}))
	t.Cleanup(server.Close)
	post := func(apiKey, key, body string) (int, string, string) {
		req, err := http.NewRequest(http.MethodPost, server.URL+"/v1/widgets", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(b)
	}

	status, _, body := post("sk_nobody", "w-1", `{"size": 3}`)
	require.Equal(t, http.StatusUnauthorized, status, body)
	status, _, body = post(aliceKey, "w-1", `{"size": 3, "colour": "red"}`)
	require.Equal(t, http.StatusBadRequest, status, body)
	require.Contains(t, body, `"code":"validation_failed"`)
	status, _, body = post(aliceKey, "w-1", `{"size": 0}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, body, "size is required.")

	status, replayed, body := post(aliceKey, "w-1", `{"size": 3}`)
	require.Equal(t, []any{http.StatusCreated, "", `{"size":3}`}, []any{status, replayed, body})
	status, replayed, body = post(aliceKey, "w-1", `{"size": 3}`)
	require.Equal(t, []any{http.StatusCreated, "true", `{"size":3}`}, []any{status, replayed, body})
}

// A team's route whose flow the engine does not run cannot be served: the
// handler is not built, instead of answering 500 at request time.
func TestNewHandler_refusesATeamRouteWhoseFlowIsNotRegistered(t *testing.T) {
	t.Parallel()
	rt, _ := widgetRoute()
	require.PanicsWithError(t, `route POST /v1/widgets: its flow "make_widget" is not registered with the engine`, func() {
		api.NewHandler(api.Config{Engine: recovery.New(recovery.Config{}), Logger: slog.New(slog.DiscardHandler),
			Registry: prometheus.NewRegistry(), Routes: []route.Route{rt}})
	})
}
