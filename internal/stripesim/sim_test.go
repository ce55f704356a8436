package stripesim_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/example/payments/internal/clocktest"
	"github.com/example/payments/internal/stripesim"
)

const testKey = "sk_test_simulator"

// fixture is a simulator served over real HTTP, with a stripe-go client
// pointed at it.
type fixture struct {
	sim    *stripesim.Simulator
	url    string
	stripe *client.API
	clock  *clocktest.Clock
}

// setup starts a simulator; cfg, if given, adjusts its configuration.
func setup(t *testing.T, cfg ...func(*stripesim.Config)) *fixture {
	t.Helper()
	clk := clocktest.New(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	c := stripesim.Config{Now: clk.Now}
	for _, f := range cfg {
		f(&c)
	}
	sim := stripesim.New(c)
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(func() {
		srv.Close()
		sim.Close()
	})
	return &fixture{sim: sim, url: srv.URL, stripe: newStripe(srv.URL, testKey), clock: clk}
}

// newStripe is a stripe-go client for the simulator at url, without retries
// or logging.
func newStripe(url, key string) *client.API {
	return newStripeWithHTTP(url, key, &http.Client{Timeout: 10 * time.Second})
}

// newStripeOnFreshConnections never reuses a connection. Go's transport
// silently resends a request carrying an Idempotency-Key once when a reused
// keep-alive connection fails before answering; a test that must see the
// failure itself uses this client.
func newStripeOnFreshConnections(url, key string) *client.API {
	return newStripeWithHTTP(url, key, &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{DisableKeepAlives: true},
	})
}

func newStripeWithHTTP(url, key string, httpClient *http.Client) *client.API {
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		HTTPClient:        httpClient,
		URL:               stripe.String(url),
		MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		EnableTelemetry:   stripe.Bool(false),
	})
	return client.New(key, &stripe.Backends{API: backend, Connect: backend, Uploads: backend})
}

// paymentIntent is the params of a confirmed payment intent for 20.00 usd.
func paymentIntent(key, pm string) *stripe.PaymentIntentParams {
	p := &stripe.PaymentIntentParams{
		Amount:             stripe.Int64(2000),
		Currency:           stripe.String("usd"),
		PaymentMethod:      stripe.String(pm),
		PaymentMethodTypes: stripe.StringSlice([]string{"card"}),
		Confirm:            stripe.Bool(true),
	}
	if key != "" {
		p.SetIdempotencyKey(key)
	}
	return p
}

func manualPaymentIntent(key string) *stripe.PaymentIntentParams {
	p := paymentIntent(key, "pm_card_visa")
	p.CaptureMethod = stripe.String("manual")
	return p
}

func withKey[P interface{ SetIdempotencyKey(string) }](p P, key string) P {
	p.SetIdempotencyKey(key)
	return p
}

// requireStripeError asserts that err is a Stripe error with this status,
// type and code.
func requireStripeError(t *testing.T, err error, status int, typ stripe.ErrorType, code stripe.ErrorCode) *stripe.Error {
	t.Helper()
	var se *stripe.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, status, se.HTTPStatusCode, se.Msg)
	require.Equal(t, typ, se.Type, se.Msg)
	require.Equal(t, code, se.Code, se.Msg)
	require.NotEmpty(t, se.RequestID)
	return se
}

func replayed(r *stripe.APIResponse) bool {
	return r.Header.Get("Idempotent-Replayed") == "true"
}

// objects lists the simulator's objects of one type through /_sim/objects.
func (f *fixture) objects(t *testing.T, typ string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	f.control(t, http.MethodGet, "/_sim/objects?type="+typ, nil, http.StatusOK, &objs)
	return objs
}

// requests lists the simulator's request log through /_sim/requests.
func (f *fixture) requests(t *testing.T) []stripesim.RequestRecord {
	t.Helper()
	var recs []stripesim.RequestRecord
	f.control(t, http.MethodGet, "/_sim/requests", nil, http.StatusOK, &recs)
	return recs
}

// addFault arms a fault through POST /_sim/faults.
func (f *fixture) addFault(t *testing.T, fault stripesim.Fault) {
	t.Helper()
	f.control(t, http.MethodPost, "/_sim/faults", fault, http.StatusOK, nil)
}

// control calls the control surface and decodes its answer into out.
func (f *fixture) control(t *testing.T, method, path string, in any, wantStatus int, out any) {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		require.NoError(t, err)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, f.url+path, body)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, wantStatus, resp.StatusCode, string(raw))
	if out != nil {
		require.NoError(t, json.Unmarshal(raw, out), string(raw))
	}
}

// post sends a raw form-encoded API request, for what stripe-go cannot send.
func (f *fixture) post(t *testing.T, path, auth, idempotencyKey, form string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.url+path, strings.NewReader(form))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	return resp.StatusCode, resp.Header, body
}

// eventually polls cond until it holds or 5 seconds pass.
func eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, 5*time.Second, 5*time.Millisecond, msg)
}
