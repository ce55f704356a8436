package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/api"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/stripesim"
	"github.com/example/payments/internal/users"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

const (
	aliceKey = "sk_dev_alice_0123456789abcdef"
	bobKey   = "sk_dev_bob_0123456789abcdef"
)

type testBundle struct {
	pool   *pgxpool.Pool
	server *httptest.Server
	sim    *stripesim.Simulator
}

type setupOpts struct {
	engine recovery.Config // Pool is filled in
}

// setup serves the API on a fresh database, with the Stripe simulator
// behind it over real HTTP.
func setup(t *testing.T, opts ...setupOpts) *testBundle {
	t.Helper()
	var o setupOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	pool := dbtest.NewPool(t)
	require.NoError(t, users.SeedDemoUsers(context.Background(), pool))

	sim := stripesim.New(stripesim.Config{})
	simServer := httptest.NewServer(sim.Handler())
	t.Cleanup(func() { simServer.Close(); sim.Close() })
	stripe, err := stripeclient.New(stripeclient.Config{SecretKey: "sk_test_api", APIBase: simServer.URL})
	require.NoError(t, err)

	o.engine.Pool = pool
	engine := recovery.New(o.engine)
	handler := api.NewHandler(api.Config{
		Pool: pool, Engine: engine, Payments: payments.NewService(pool, engine, stripe),
		Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(),
	})
	server := httptest.NewServer(handler)
	t.Cleanup(server.Close)
	return &testBundle{pool: pool, server: server, sim: sim}
}

// do sends a request and returns the response with its body read.
func (b *testBundle) do(t *testing.T, method, path, key string, body io.Reader, header http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, b.server.URL+path, body)
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, data
}

// requireProblem checks a problem+json answer and its stable code.
func requireProblem(t *testing.T, resp *http.Response, body []byte, status int, code string) {
	t.Helper()
	require.Equal(t, status, resp.StatusCode, string(body))
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	var p map[string]any
	require.NoError(t, json.Unmarshal(body, &p))
	require.Equal(t, code, p["code"])
	require.EqualValues(t, status, p["status"])
	require.NotEmpty(t, p["title"])
	require.NotEmpty(t, p["type"])
}

type paymentList struct {
	Object  string           `json:"object"`
	Data    []map[string]any `json:"data"`
	HasMore bool             `json:"has_more"`
}

func (b *testBundle) list(t *testing.T, key, query string) paymentList {
	t.Helper()
	resp, body := b.do(t, http.MethodGet, "/v1/payments"+query, key, nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var l paymentList
	require.NoError(t, json.Unmarshal(body, &l))
	return l
}

// insertPayment writes a payment row directly: the flows that create them
// come with the idempotency engine.
func (b *testBundle) insertPayment(t *testing.T, email, id string, created time.Time) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), `
		INSERT INTO payments (id, user_id, amount, currency, status, amount_captured, payment_method, created_at)
		SELECT $1, id, 2000, 'usd', 'succeeded', 2000, 'pm_card_visa', $3 FROM users WHERE email = $2`,
		id, email, created)
	require.NoError(t, err)
}

func TestAuth(t *testing.T) {
	t.Parallel()
	b := setup(t)

	resp, body := b.do(t, http.MethodGet, "/v1/payments", "", nil, nil)
	requireProblem(t, resp, body, http.StatusUnauthorized, "unauthorized")
	require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Bearer")

	resp, body = b.do(t, http.MethodGet, "/v1/payments", "sk_dev_mallory_0000000000000000", nil, nil)
	requireProblem(t, resp, body, http.StatusUnauthorized, "unauthorized")

	resp, body = b.do(t, http.MethodGet, "/v1/payments", "", nil, http.Header{"Authorization": {"Basic " + aliceKey}})
	requireProblem(t, resp, body, http.StatusUnauthorized, "unauthorized")

	// Unknown /v1 routes are not revealed to callers without a key.
	resp, body = b.do(t, http.MethodGet, "/v1/nothing-here", "", nil, nil)
	requireProblem(t, resp, body, http.StatusUnauthorized, "unauthorized")

	require.Equal(t, paymentList{Object: "list", Data: []map[string]any{}}, b.list(t, aliceKey, ""))
}

func TestAuth_aNewUsersKeyWorks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, key, err := users.CreateUser(context.Background(), b.pool, "carol@example.com")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(key, "sk_"))
	require.Equal(t, "list", b.list(t, key, "").Object)

	ctx := context.Background()
	var hashed, plain int
	require.NoError(t, b.pool.QueryRow(ctx,
		"SELECT count(*) FROM api_keys WHERE key_hash = sha256(convert_to($1, 'UTF8'))", key).Scan(&hashed))
	require.NoError(t, b.pool.QueryRow(ctx,
		"SELECT count(*) FROM api_keys k WHERE k::text LIKE '%' || $1 || '%'", key).Scan(&plain))
	require.Equal(t, 1, hashed, "the key's SHA-256 is stored")
	require.Zero(t, plain, "the plain key is stored nowhere")
}

func TestListPayments_newestFirstOwnOnlyPaginated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	base := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	for i := range 5 {
		b.insertPayment(t, "alice@example.com", fmt.Sprintf("pay_alice%d", i), base.Add(time.Duration(i)*time.Minute))
	}
	b.insertPayment(t, "bob@example.com", "pay_bob0", base.Add(time.Hour))

	ids := func(l paymentList) []string {
		var out []string
		for _, p := range l.Data {
			out = append(out, p["id"].(string))
		}
		return out
	}
	page := b.list(t, aliceKey, "?limit=2")
	require.Equal(t, []string{"pay_alice4", "pay_alice3"}, ids(page))
	require.True(t, page.HasMore)
	page = b.list(t, aliceKey, "?limit=2&starting_after=pay_alice3")
	require.Equal(t, []string{"pay_alice2", "pay_alice1"}, ids(page))
	require.True(t, page.HasMore)
	page = b.list(t, aliceKey, "?limit=2&starting_after=pay_alice1")
	require.Equal(t, []string{"pay_alice0"}, ids(page))
	require.False(t, page.HasMore)
	require.Len(t, b.list(t, aliceKey, "").Data, 5, "default limit is 10")
	require.Equal(t, []string{"pay_bob0"}, ids(b.list(t, bobKey, "")))

	p := b.list(t, aliceKey, "?limit=1").Data[0]
	require.Equal(t, map[string]any{
		"id": "pay_alice4", "object": "payment", "amount": 2000.0, "currency": "usd", "status": "succeeded",
		"captured": true, "amount_captured": 2000.0, "amount_refunded": 0.0, "payment_method": "pm_card_visa",
		"stripe_payment_intent": nil, "failure_code": nil, "failure_message": nil, "description": nil,
		"metadata": map[string]any{}, "created": float64(base.Add(4 * time.Minute).Unix()),
	}, p)
}

func TestListPayments_rejectsBadParameters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insertPayment(t, "bob@example.com", "pay_bob0", time.Now())
	for _, query := range []string{"?limit=0", "?limit=101", "?limit=ten", "?limit=-1",
		"?starting_after=pay_nope", "?starting_after=pay_bob0"} {
		resp, body := b.do(t, http.MethodGet, "/v1/payments"+query, aliceKey, nil, nil)
		requireProblem(t, resp, body, http.StatusBadRequest, "validation_failed")
	}
}

func TestRouting_notFoundAndMethodNotAllowed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	resp, body := b.do(t, http.MethodGet, "/v1/nothing-here", aliceKey, nil, nil)
	requireProblem(t, resp, body, http.StatusNotFound, "not_found")
	resp, body = b.do(t, http.MethodGet, "/nothing-here", "", nil, nil)
	requireProblem(t, resp, body, http.StatusNotFound, "not_found")

	resp, body = b.do(t, http.MethodDelete, "/v1/payments", aliceKey, nil, nil)
	requireProblem(t, resp, body, http.StatusMethodNotAllowed, "method_not_allowed")
	require.Equal(t, "GET, POST", resp.Header.Get("Allow"))
}

func TestBodyRules(t *testing.T) {
	t.Parallel()
	b := setup(t)
	jsonHeader := http.Header{"Content-Type": {"application/json"}}

	resp, body := b.do(t, http.MethodPost, "/v1/payments", aliceKey, strings.NewReader(`amount=2000`),
		http.Header{"Content-Type": {"application/x-www-form-urlencoded"}})
	requireProblem(t, resp, body, http.StatusUnsupportedMediaType, "unsupported_media_type")
	resp, body = b.do(t, http.MethodPost, "/v1/payments", aliceKey, strings.NewReader(`{}`), nil)
	requireProblem(t, resp, body, http.StatusUnsupportedMediaType, "unsupported_media_type")

	big := `{"description":"` + strings.Repeat("x", api.MaxBodyBytes) + `"}`
	resp, body = b.do(t, http.MethodPost, "/v1/payments", aliceKey, strings.NewReader(big), jsonHeader)
	requireProblem(t, resp, body, http.StatusRequestEntityTooLarge, "body_too_large")

	// Auth comes first: an anonymous oversized request is 401, and says nothing more.
	resp, body = b.do(t, http.MethodPost, "/v1/payments", "", strings.NewReader(big), jsonHeader)
	requireProblem(t, resp, body, http.StatusUnauthorized, "unauthorized")

	// application/json with parameters passes the media-type check.
	resp, body = b.do(t, http.MethodPost, "/v1/payments", aliceKey, strings.NewReader(`{}`),
		http.Header{"Content-Type": {"application/json; charset=utf-8"}})
	require.NotEqual(t, http.StatusUnsupportedMediaType, resp.StatusCode, string(body))
}

func TestHealthReadyMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	resp, body := b.do(t, http.MethodGet, "/healthz", "", nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	resp, body = b.do(t, http.MethodGet, "/readyz", "", nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.NotEmpty(t, resp.Header.Get("X-Request-Id"))

	b.list(t, aliceKey, "")
	resp, body = b.do(t, http.MethodGet, "/metrics", "", nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), `payments_http_requests_total{code="200",method="GET",route="/v1/payments"} 1`)
	require.Contains(t, string(body), `payments_http_request_duration_seconds_bucket{method="GET",route="/v1/payments",le="+Inf"} 1`)

	b.pool.Close() // the database goes away
	resp, body = b.do(t, http.MethodGet, "/readyz", "", nil, nil)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(body))
	resp, _ = b.do(t, http.MethodGet, "/healthz", "", nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the process is still up")
}
