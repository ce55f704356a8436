package stripeclient_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/stripesim"
)

const testKey = "sk_test_stripeclient"

// fixture is a wrapper client talking to a simulator over real HTTP.
type fixture struct {
	sim    *stripesim.Simulator
	url    string
	client *stripeclient.Client
}

// setup starts a simulator and a client for it; cfg, if given, adjusts the
// client's configuration.
func setup(t testing.TB, cfg ...func(*stripeclient.Config)) *fixture {
	t.Helper()
	sim := stripesim.New(stripesim.Config{})
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(func() {
		srv.Close()
		sim.Close()
	})
	return &fixture{sim: sim, url: srv.URL, client: newClient(t, srv.URL, cfg...)}
}

func newClient(t testing.TB, url string, cfg ...func(*stripeclient.Config)) *stripeclient.Client {
	t.Helper()
	c := stripeclient.Config{SecretKey: testKey, APIBase: url, Timeout: 5 * time.Second}
	for _, f := range cfg {
		f(&c)
	}
	client, err := stripeclient.New(c)
	require.NoError(t, err)
	return client
}

// freshConnections makes the client dial for every request; see
// TestTransportResendsOnReusedConnection for why some tests need it.
func freshConnections(c *stripeclient.Config) {
	c.HTTPClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
}

func payment(pm string) stripeclient.PaymentIntentRequest {
	return stripeclient.PaymentIntentRequest{Amount: 2000, Currency: "usd", PaymentMethod: pm}
}

func TestNewChecksItsConfig(t *testing.T) {
	t.Parallel()
	valid := map[string]stripeclient.Config{
		"test key":             {SecretKey: "sk_test_123", APIBase: "http://127.0.0.1:12111/"},
		"live key allowed":     {SecretKey: "sk_live_123", AllowLive: true},
		"caller's HTTP client": {SecretKey: "sk_test_1", HTTPClient: &http.Client{}},
	}
	for name, cfg := range valid {
		_, err := stripeclient.New(cfg)
		require.NoError(t, err, name)
	}

	invalid := map[string]stripeclient.Config{
		"live key":            {SecretKey: "sk_live_123"},
		"restricted live key": {SecretKey: "rk_live_123"},
		"no key":              {},
		"base is not a URL":   {SecretKey: "sk_test_1", APIBase: "127.0.0.1:12111"},
		"base has no host":    {SecretKey: "sk_test_1", APIBase: "http://"},
		"negative timeout":    {SecretKey: "sk_test_1", Timeout: -time.Second},
	}
	for name, cfg := range invalid {
		_, err := stripeclient.New(cfg)
		require.Error(t, err, name)
	}
	_, err := stripeclient.New(invalid["live key"])
	require.ErrorIs(t, err, stripeclient.ErrLiveKeyRefused)
}

func TestNewLeavesTheCallersHTTPClientAlone(t *testing.T) {
	t.Parallel()
	mine := &http.Client{}
	_, err := stripeclient.New(stripeclient.Config{SecretKey: "sk_test_1", HTTPClient: mine})
	require.NoError(t, err)
	require.Zero(t, mine.Timeout)
}

func TestAutomaticPaymentAndRefunds(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()

	req := payment("pm_card_visa")
	req.Description = "order 42"
	req.Metadata = map[string]string{"key_row": "kr_1"}
	pi, err := f.client.CreatePaymentIntent(ctx, "create-1", req)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, pi.Status)
	require.Equal(t, stripe.PaymentIntentCaptureMethodAutomatic, pi.CaptureMethod)
	require.Equal(t, "order 42", pi.Description)

	again, err := f.client.CreatePaymentIntent(ctx, "create-1", req)
	require.NoError(t, err)
	require.Equal(t, pi.ID, again.ID, "same key, same payment intent")

	got, err := f.client.GetPaymentIntent(ctx, pi.ID)
	require.NoError(t, err)
	require.EqualValues(t, 2000, got.AmountReceived)

	re, err := f.client.CreateRefund(ctx, "refund-1", stripeclient.RefundRequest{
		PaymentIntent: pi.ID, Amount: 500, Reason: "requested_by_customer", Metadata: map[string]string{"key_row": "kr_2"},
	})
	require.NoError(t, err)
	require.EqualValues(t, 500, re.Amount)
	require.Equal(t, stripe.RefundReasonRequestedByCustomer, re.Reason)

	rest, err := f.client.CreateRefund(ctx, "refund-2", stripeclient.RefundRequest{PaymentIntent: pi.ID})
	require.NoError(t, err)
	require.EqualValues(t, 1500, rest.Amount)

	_, err = f.client.CreateRefund(ctx, "refund-3", stripeclient.RefundRequest{PaymentIntent: pi.ID, Amount: 1})
	require.Equal(t, stripeclient.Terminal, stripeclient.Classify(err))

	fetched, err := f.client.GetRefund(ctx, re.ID)
	require.NoError(t, err)
	require.Equal(t, re.ID, fetched.ID)
}

func TestManualCaptureAndCancel(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	req := payment("pm_card_mastercard")
	req.CaptureManually = true

	pi, err := f.client.CreatePaymentIntent(ctx, "auth-1", req)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusRequiresCapture, pi.Status)
	captured, err := f.client.CapturePaymentIntent(ctx, "capture-1", pi.ID, 1200)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, captured.Status)
	require.EqualValues(t, 1200, captured.AmountReceived)

	other, err := f.client.CreatePaymentIntent(ctx, "auth-2", req)
	require.NoError(t, err)
	full, err := f.client.CapturePaymentIntent(ctx, "capture-2", other.ID, 0)
	require.NoError(t, err)
	require.EqualValues(t, 2000, full.AmountReceived)

	third, err := f.client.CreatePaymentIntent(ctx, "auth-3", req)
	require.NoError(t, err)
	canceled, err := f.client.CancelPaymentIntent(ctx, "cancel-3", third.ID)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusCanceled, canceled.Status)
}

// Found by the metadata, created in the given span, newest first, over
// pages of Stripe's list; a payment intent made before the span, or after
// it, is not.
func TestListPaymentIntentsByMetadata(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	awkward := `it's a \ "value"`

	before := payment("pm_card_visa")
	before.Metadata = map[string]string{"key_row": awkward}
	_, err := f.client.CreatePaymentIntent(ctx, "list-before", before)
	require.NoError(t, err)
	since := f.sim.Advance(time.Minute)

	var want []string
	for i, value := range []string{awkward, "plain", awkward} {
		for range 60 { // more than a page (100) in all
			other := payment("pm_card_visa")
			_, err := f.client.CreatePaymentIntent(ctx, "list-other-"+rand.Text(), other)
			require.NoError(t, err)
		}
		req := payment("pm_card_visa")
		req.Metadata = map[string]string{"key_row": value}
		pi, err := f.client.CreatePaymentIntent(ctx, "list-"+string(rune('a'+i)), req)
		require.NoError(t, err)
		if value == awkward {
			want = append([]string{pi.ID}, want...) // newest first
		}
	}

	until := f.sim.Advance(0)
	f.sim.Advance(2 * time.Second) // past until's second
	after := payment("pm_card_visa")
	after.Metadata = map[string]string{"key_row": awkward}
	late, err := f.client.CreatePaymentIntent(ctx, "list-after", after)
	require.NoError(t, err)

	found, err := f.client.ListPaymentIntentsByMetadata(ctx, since, until, "key_row", awkward)
	require.NoError(t, err)
	var ids []string
	for _, pi := range found {
		ids = append(ids, pi.ID)
	}
	require.Equal(t, want, ids, "the two made in the span, over the list's pages; not the one made before, nor the one after")

	open, err := f.client.ListPaymentIntentsByMetadata(ctx, since, time.Time{}, "key_row", awkward)
	require.NoError(t, err)
	require.Len(t, open, 3, "without an end: until now")
	require.Equal(t, late.ID, open[0].ID)

	none, err := f.client.ListPaymentIntentsByMetadata(ctx, since, time.Time{}, "key_row", "absent")
	require.NoError(t, err)
	require.Empty(t, none)
}

func TestMutatingCallsNeedAnIdempotencyKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()

	calls := map[string]func() error{
		"create":  func() error { _, err := f.client.CreatePaymentIntent(ctx, "", payment("pm_card_visa")); return err },
		"capture": func() error { _, err := f.client.CapturePaymentIntent(ctx, " ", "pi_1", 0); return err },
		"cancel":  func() error { _, err := f.client.CancelPaymentIntent(ctx, "", "pi_1"); return err },
		"refund": func() error {
			_, err := f.client.CreateRefund(ctx, "", stripeclient.RefundRequest{PaymentIntent: "pi_1"})
			return err
		},
	}
	for name, call := range calls {
		err := call()
		require.ErrorIs(t, err, stripeclient.ErrNoIdempotencyKey, name)
		require.Equal(t, stripeclient.Terminal, stripeclient.Classify(err), name)
	}
	require.Empty(t, f.sim.Requests(), "nothing reached Stripe")
}

// requestsOverHTTP reads the simulator's request log from /_sim/requests.
func requestsOverHTTP(t *testing.T, url string) []stripesim.RequestRecord {
	t.Helper()
	resp, err := http.Get(url + "/_sim/requests")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var recs []stripesim.RequestRecord
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&recs))
	return recs
}

// ListRefunds finds a refund by its payment intent, with its metadata, as
// soon as it is made.
func TestListRefunds(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	pi, err := f.client.CreatePaymentIntent(ctx, "listed-pi", payment("pm_card_visa"))
	require.NoError(t, err)
	none, err := f.client.ListRefunds(ctx, pi.ID)
	require.NoError(t, err)
	require.Empty(t, none)

	re, err := f.client.CreateRefund(ctx, "listed-re", stripeclient.RefundRequest{
		PaymentIntent: pi.ID, Amount: 500, Metadata: map[string]string{"idempotency_key_id": "k1"}})
	require.NoError(t, err)
	listed, err := f.client.ListRefunds(ctx, pi.ID)
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Equal(t, re.ID, listed[0].ID)
	require.Equal(t, "k1", listed[0].Metadata["idempotency_key_id"])
}
