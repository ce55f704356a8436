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
	"github.com/example/payments/internal/merchanthooks"
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
		Events: []string{"widget.made"},
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
// run under the key and its answer replayed; its event types join the
// service's in the feed's filter (and in webhook endpoints' enabled_events).
func TestTeamRoutes_readStrictlyAndRunTheFlow(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	require.NoError(t, users.SeedDemoUsers(context.Background(), pool))
	rt, flow := widgetRoute()
	flows := recovery.NewBuilder(recovery.Config{Pool: pool})
	flows.Register(flow)
	hooks := merchanthooks.NewService(pool, flows)
	engine, err := flows.Build()
	require.NoError(t, err)
	server := httptest.NewServer(newHandler(t, api.Config{Pool: pool, Engine: engine, Hooks: hooks, Logger: slog.New(slog.DiscardHandler),
		Registry: prometheus.NewRegistry(), Routes: []route.Route{rt}}))
	t.Cleanup(server.Close)
	postTo := func(path, apiKey, key, body string) (int, string, string) {
		req, err := http.NewRequest(http.MethodPost, server.URL+path, strings.NewReader(body))
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
	post := func(apiKey, key, body string) (int, string, string) { return postTo("/v1/widgets", apiKey, key, body) }

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

	// The event types the route declares are ones a merchant may filter
	// the feed by; one nobody declares is refused.
	for eventType, want := range map[string]int{"widget.made": http.StatusOK, "refund.failed": http.StatusOK, "widget.lost": http.StatusBadRequest} {
		req, err := http.NewRequest(http.MethodGet, server.URL+"/v1/events?type="+eventType, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+aliceKey)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, want, resp.StatusCode, eventType)
	}
	for events, want := range map[string]int{`["widget.made"]`: http.StatusCreated, `["widget.*"]`: http.StatusCreated, `["widget.lost"]`: http.StatusBadRequest} {
		status, _, body := postTo("/v1/webhook_endpoints", aliceKey, "we-"+events, `{"url": "https://example.com/hooks", "enabled_events": `+events+`}`)
		require.Equal(t, want, status, body)
	}
}

// A team's route that cannot be served as declared is refused when the
// handler is built, instead of answering 500 at request time: its flow not
// registered with the engine, or the route outside /v1's authentication.
func TestNewHandler_refusesATeamRouteWhoseFlowIsNotRegistered(t *testing.T) {
	t.Parallel()
	rt, flow := widgetRoute()
	build := func(rt route.Route, flows ...*recovery.Flow) error {
		engine, err := recovery.New(recovery.Config{}, flows...)
		require.NoError(t, err)
		_, err = api.NewHandler(api.Config{Engine: engine, Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(), Routes: []route.Route{rt}})
		return err
	}
	require.EqualError(t, build(rt), `route POST /v1/widgets: its flow "make_widget" is not registered with the engine`)
	require.NoError(t, build(rt, flow))
	public := rt
	public.Public = true
	require.EqualError(t, build(public, flow), `route POST /v1/widgets: a team's route is served under /v1, behind its authentication`)
}
