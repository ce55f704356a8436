package api_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/api"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/merchanthooks"
	"github.com/example/payments/internal/openapitest"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/stripesim"
	"github.com/example/payments/internal/users"
	"github.com/example/payments/internal/webhooks"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

const (
	aliceKey = "sk_dev_alice_0123456789abcdef"
	bobKey   = "sk_dev_bob_0123456789abcdef"
)

type testBundle struct {
	pool     *pgxpool.Pool
	server   *httptest.Server
	sim      *stripesim.Simulator
	payments *payments.Service
	engine   *recovery.Engine
	// handler is the API's handler itself, without the server's check
	// against the OpenAPI document (FuzzHandler wraps it per input).
	handler http.Handler
	// registry holds the API's metrics, which the process serves on its
	// metrics listener (cmd/payments), not on the API's.
	registry *prometheus.Registry
}

type setupOpts struct {
	engine    recovery.Config // Pool is filled in
	rateLimit api.RateLimit
	// webhooks: the simulator sends its events, signed, to the API's
	// /v1/stripe/webhooks, as Stripe would.
	webhooks bool
	// checkURL vets webhook endpoint URLs (api.Config.WebhookURLCheck).
	checkURL api.URLCheck
	// logger, when set, is the API's (else its lines are discarded).
	logger *slog.Logger
	// pool, when set, is the database (one on a cluster of the test's
	// own: dbtest.NewCluster); else a fresh one on the shared cluster.
	pool *pgxpool.Pool
	// simWrap, if set, stands between the service and the simulator (to
	// change an answer on its way, as a Stripe in another state would).
	simWrap func(http.Handler) http.Handler
}

const webhookSecret = "whsec_api_test_0123456789"

// setup serves the API on a fresh database, with the Stripe simulator
// behind it over real HTTP.
func setup(t testing.TB, opts ...setupOpts) *testBundle {
	t.Helper()
	var o setupOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	pool := o.pool
	if pool == nil {
		pool = dbtest.NewPool(t)
	}
	require.NoError(t, users.SeedDemoUsers(context.Background(), pool))

	// The API's server starts first, so that the simulator can be told
	// where to send webhooks; its handler is set once the rest exists.
	// Every exchange it serves is checked against the OpenAPI document.
	var handler http.Handler
	server := httptest.NewServer(openapitest.Handler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) })))
	t.Cleanup(server.Close)

	simCfg := stripesim.Config{}
	if o.webhooks {
		simCfg = stripesim.Config{WebhookURL: server.URL + "/v1/stripe/webhooks", WebhookSecret: webhookSecret,
			WebhookBackoff: 10 * time.Millisecond}
	}
	sim := stripesim.New(simCfg)
	simHandler := sim.Handler()
	if o.simWrap != nil {
		simHandler = o.simWrap(simHandler)
	}
	simServer := httptest.NewServer(simHandler)
	t.Cleanup(func() { simServer.Close(); sim.Close() })
	stripe, err := stripeclient.New(stripeclient.Config{SecretKey: "sk_test_api", APIBase: simServer.URL})
	require.NoError(t, err)

	o.engine.Pool = pool
	flows := recovery.NewBuilder(o.engine)
	svc := payments.NewService(pool, flows, stripe)
	hooks := merchanthooks.NewService(pool, flows)
	engine, err := flows.Build()
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	handler = newHandler(t, api.Config{
		Pool: pool, Engine: engine, Payments: svc,
		Logger: cmp.Or(o.logger, slog.New(slog.DiscardHandler)), Registry: reg, RateLimit: o.rateLimit,
		Webhooks: webhooks.NewReceiver(webhooks.Config{Pool: pool, Secret: webhookSecret, Registry: reg}),
		Hooks:    hooks, WebhookURLCheck: o.checkURL,
	})
	return &testBundle{pool: pool, server: server, sim: sim, payments: svc, engine: engine, handler: handler, registry: reg}
}

// metrics is the text the metrics listener serves for b's API.
func (b *testBundle) metrics(t testing.TB) string { return metricsText(t, b.registry) }

// metricsText is what GET /metrics on the process's metrics listener
// answers for reg: Prometheus' text format.
func metricsText(t testing.TB, reg prometheus.Gatherer) string {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	return rec.Body.String()
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
		"metadata": map[string]any{}, "created": float64(base.Add(4 * time.Minute).Unix()), "dispute": nil, "duplicate_charges": nil,
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
	metrics := b.metrics(t)
	require.Contains(t, metrics, `payments_http_requests_total{code="200",method="GET",route="/v1/payments"} 1`)
	require.Contains(t, metrics, `payments_http_request_duration_seconds_bucket{method="GET",route="/v1/payments",le="+Inf"} 1`)
	// Issue 42: Prometheus scrapes a listener of the metrics' own
	// (cmd/payments' TestServe_metricsOnTheirOwnListener); the API's
	// /metrics answers a client on the machine itself (this test's), and
	// 404 to one a proxy forwarded.
	resp, body = b.do(t, http.MethodGet, "/metrics", "", nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), "payments_http_requests_total")
	for _, h := range []http.Header{{"X-Forwarded-For": {"203.0.113.7"}}, {"Forwarded": {"for=203.0.113.7"}}} {
		resp, body = b.do(t, http.MethodGet, "/metrics", "", nil, h)
		requireProblem(t, resp, body, http.StatusNotFound, "not_found")
	}
	// A peer from another machine, as the handler sees it.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.RemoteAddr = "203.0.113.7:41234"
	b.handler.ServeHTTP(rec, req)
	require.Equal(t, http.StatusNotFound, rec.Code, rec.Body.String())

	b.pool.Close() // the database goes away
	resp, body = b.do(t, http.MethodGet, "/readyz", "", nil, nil)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(body))
	resp, _ = b.do(t, http.MethodGet, "/healthz", "", nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the process is still up")
}

// The helpers below serve the idempotency and payment-flow tests.

const (
	pathPayments = "/v1/payments"
	visaBody     = `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`
)

// jsonRequest is a POST with a JSON body as the API expects it. An empty
// idemKey sends no Idempotency-Key header.
type jsonRequest struct {
	apiKey, path, idemKey, body string
}

// send makes req without touching t, so that goroutines may call it.
func (b *testBundle) send(req jsonRequest) (*http.Response, []byte, error) {
	var body io.Reader
	if req.body != "" {
		body = strings.NewReader(req.body)
	}
	r, err := http.NewRequest(http.MethodPost, b.server.URL+req.path, body)
	if err != nil {
		return nil, nil, err
	}
	if req.body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	if req.apiKey != "" {
		r.Header.Set("Authorization", "Bearer "+req.apiKey)
	}
	if req.idemKey != "" {
		r.Header.Set("Idempotency-Key", req.idemKey)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp, data, err
}

// post sends a JSON POST as apiKey with the Idempotency-Key idemKey.
func (b *testBundle) post(t *testing.T, apiKey, path, idemKey, body string) (*http.Response, []byte) {
	t.Helper()
	resp, data, err := b.send(jsonRequest{apiKey: apiKey, path: path, idemKey: idemKey, body: body})
	require.NoError(t, err)
	return resp, data
}

// createPayment posts body as apiKey's new payment with idemKey and requires a 201.
func (b *testBundle) createPayment(t *testing.T, apiKey, idemKey, body string) paymentJSON {
	t.Helper()
	resp, data := b.post(t, apiKey, pathPayments, idemKey, body)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(data))
	return decodePayment(t, data)
}

// paymentJSON is the API's Payment object.
type paymentJSON struct {
	ID                  string            `json:"id"`
	Object              string            `json:"object"`
	Amount              int64             `json:"amount"`
	Currency            string            `json:"currency"`
	Status              string            `json:"status"`
	Captured            bool              `json:"captured"`
	AmountCaptured      int64             `json:"amount_captured"`
	AmountRefunded      int64             `json:"amount_refunded"`
	PaymentMethod       string            `json:"payment_method"`
	StripePaymentIntent *string           `json:"stripe_payment_intent"`
	FailureCode         *string           `json:"failure_code"`
	FailureMessage      *string           `json:"failure_message"`
	Description         *string           `json:"description"`
	Metadata            map[string]string `json:"metadata"`
	Created             int64             `json:"created"`
	Dispute             *disputeJSON      `json:"dispute"`
	DuplicateCharges    []duplicateJSON   `json:"duplicate_charges"`
}

// disputeJSON is a payment's dispute.
type disputeJSON struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Amount  int64  `json:"amount"`
	Created int64  `json:"created"`
}

// duplicateJSON is an entry of a payment's duplicate_charges.
type duplicateJSON struct {
	StripePaymentIntent string `json:"stripe_payment_intent"`
	Amount              int64  `json:"amount"`
	Status              string `json:"status"`
}

func decodePayment(t *testing.T, data []byte) paymentJSON {
	t.Helper()
	var p paymentJSON
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&p), string(data))
	require.Equal(t, "payment", p.Object)
	return p
}

// getPayment reads a payment back through the API and requires a 200.
func (b *testBundle) getPayment(t *testing.T, apiKey, id string) paymentJSON {
	t.Helper()
	resp, data := b.do(t, http.MethodGet, "/v1/payments/"+id, apiKey, nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))
	return decodePayment(t, data)
}

// problemJSON is an application/problem+json body with its extensions.
type problemJSON struct {
	Code        string `json:"code"`
	Status      int    `json:"status"`
	DeclineCode string `json:"decline_code"`
	Payment     string `json:"payment"`
}

func decodeProblem(t *testing.T, data []byte) problemJSON {
	t.Helper()
	var p problemJSON
	require.NoError(t, json.Unmarshal(data, &p), string(data))
	return p
}

// requireRetryAfter checks a positive whole number of seconds in Retry-After.
func requireRetryAfter(t *testing.T, resp *http.Response) {
	t.Helper()
	seconds, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", resp.Header.Get("Retry-After"))
	require.Positive(t, seconds)
}

// requireReplayOf checks that again is first replayed: same status, same
// bytes, marked Idempotent-Replayed.
func requireReplayOf(t *testing.T, first *http.Response, firstBody []byte, again *http.Response, againBody []byte) {
	t.Helper()
	require.Empty(t, first.Header.Get("Idempotent-Replayed"), "the first answer is not a replay")
	require.Equal(t, first.StatusCode, again.StatusCode, string(againBody))
	require.Equal(t, string(firstBody), string(againBody), "a replay is byte for byte the first answer")
	require.Equal(t, first.Header.Get("Content-Type"), again.Header.Get("Content-Type"))
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
}

// count runs a SELECT count(*) ... query.
func (b *testBundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

// keyRows counts the idempotency_keys rows of every user.
func (b *testBundle) keyRows(t *testing.T) int {
	t.Helper()
	return b.count(t, "SELECT count(*) FROM idempotency_keys")
}

// keyState is the idempotency-key object of GET /v1/idempotency_keys/{key}.
type keyState struct {
	Object        string `json:"object"`
	Key           string `json:"key"`
	RecoveryPoint string `json:"recovery_point"`
	Locked        bool   `json:"locked"`
	RequestMethod string `json:"request_method"`
	RequestPath   string `json:"request_path"`
	ResponseCode  *int   `json:"response_code"`
	Created       int64  `json:"created"`
	ExpiresAt     *int64 `json:"expires_at"`
}

// keyState reads one of apiKey's keys and requires a 200.
func (b *testBundle) keyState(t *testing.T, apiKey, idemKey string) keyState {
	t.Helper()
	resp, data := b.do(t, http.MethodGet, "/v1/idempotency_keys/"+url.PathEscape(idemKey), apiKey, nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))
	var k keyState
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&k), string(data))
	return k
}

// simIntents returns the simulator's payment intents, decoded.
func (b *testBundle) simIntents(t *testing.T) []simIntent {
	t.Helper()
	raw, err := b.sim.Objects("payment_intent")
	require.NoError(t, err)
	out := make([]simIntent, 0, len(raw))
	for _, r := range raw {
		var pi simIntent
		require.NoError(t, json.Unmarshal(r, &pi))
		out = append(out, pi)
	}
	return out
}

// simIntentsFor returns the payment intents made for one payment.
func (b *testBundle) simIntentsFor(t *testing.T, paymentID string) []simIntent {
	t.Helper()
	var out []simIntent
	for _, pi := range b.simIntents(t) {
		if pi.Metadata["payment"] == paymentID {
			out = append(out, pi)
		}
	}
	return out
}

type simIntent struct {
	ID               string            `json:"id"`
	Status           string            `json:"status"`
	Amount           int64             `json:"amount"`
	AmountReceived   int64             `json:"amount_received"`
	AmountCapturable int64             `json:"amount_capturable"`
	Metadata         map[string]string `json:"metadata"`
}

// simRequests returns the simulator's log of method path requests.
func (b *testBundle) simRequests(method, path string) []stripesim.RequestRecord {
	var out []stripesim.RequestRecord
	for _, r := range b.sim.Requests() {
		if r.Method == method && r.Path == path {
			out = append(out, r)
		}
	}
	return out
}

// simIntentCreations counts the PaymentIntent creations the simulator
// executed (received and not answered from its idempotency store).
func (b *testBundle) simIntentCreations() int {
	n := 0
	for _, r := range b.simRequests(http.MethodPost, "/v1/payment_intents") {
		if !r.Replayed {
			n++
		}
	}
	return n
}

// addFault arms a fault on PaymentIntent creation.
func (b *testBundle) addFault(t *testing.T, kind stripesim.FaultKind, delay time.Duration) {
	t.Helper()
	require.NoError(t, b.sim.AddFault(stripesim.Fault{
		PathPrefix: "/v1/payment_intents", Method: http.MethodPost, Kind: kind, DelayMS: int(delay.Milliseconds()),
	}))
}

// requireEventually polls cond until it holds, failing after a deadline.
func requireEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			require.FailNow(t, "timed out waiting: "+what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stagedJobs lists "kind type" of the jobs staged by apiKey's user for idemKey.
func (b *testBundle) stagedJobs(t *testing.T, email, idemKey string) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `
		SELECT j.kind || coalesce(' ' || (j.args->>'type'), '')
		FROM staged_jobs j
		JOIN idempotency_keys k ON k.id = j.idempotency_key_id
		JOIN users u ON u.id = k.user_id
		WHERE u.email = $1 AND k.idempotency_key = $2
		ORDER BY j.kind`, email, idemKey)
	require.NoError(t, err)
	jobs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return jobs
}

// newHandler is api.NewHandler's router for cfg, which the test's
// configuration must not make it refuse.
func newHandler(t testing.TB, cfg api.Config) http.Handler {
	t.Helper()
	h, err := api.NewHandler(cfg)
	require.NoError(t, err)
	return h
}
