package stripesim_test

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/example/payments/internal/stripesim"
)

const webhookSecret = "whsec_test_0123456789abcdef"

// receiver is a webhook endpoint that verifies every delivery the way the
// service does, with stripe-go's webhook.ConstructEvent.
type receiver struct {
	url string

	mu       sync.Mutex
	attempts int
	fail     func(attempt int) bool // answers 500 when true
	events   []stripe.Event
	errs     []error
}

func newReceiver(t *testing.T, fail func(attempt int) bool) *receiver {
	t.Helper()
	r := &receiver{fail: fail}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	payload, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts++
	if r.fail != nil && r.fail(r.attempts) {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	ev, err := webhook.ConstructEvent(payload, req.Header.Get("Stripe-Signature"), webhookSecret)
	if err != nil {
		r.errs = append(r.errs, err)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.events = append(r.events, ev)
}

func (r *receiver) received() (types []string, attempts int, errs []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range r.events {
		types = append(types, string(ev.Type))
	}
	return types, r.attempts, r.errs
}

func setupWithReceiver(t *testing.T, fail func(int) bool, cfg ...func(*stripesim.Config)) (*fixture, *receiver) {
	t.Helper()
	rcv := newReceiver(t, fail)
	f := setup(t, append([]func(*stripesim.Config){func(c *stripesim.Config) {
		c.WebhookURL = rcv.url
		c.WebhookSecret = webhookSecret
		c.WebhookBackoff = 10 * time.Millisecond
	}}, cfg...)...)
	return f, rcv
}

// waitForEvents waits until the receiver has n events.
func waitForEvents(t *testing.T, rcv *receiver, n int) []string {
	t.Helper()
	eventually(t, func() bool {
		types, _, _ := rcv.received()
		return len(types) >= n
	}, "webhooks delivered")
	types, _, errs := rcv.received()
	require.Empty(t, errs)
	return types
}

func TestWebhooksForEveryStateChange(t *testing.T) {
	t.Parallel()
	f, rcv := setupWithReceiver(t, nil)

	paid, err := f.stripe.PaymentIntents.New(paymentIntent("wh-paid", "pm_card_visa"))
	require.NoError(t, err)
	_, err = f.stripe.PaymentIntents.New(paymentIntent("wh-declined", "pm_card_chargeDeclinedLostCard"))
	require.Error(t, err)
	authorised, err := f.stripe.PaymentIntents.New(manualPaymentIntent("wh-auth-1"))
	require.NoError(t, err)
	_, err = f.stripe.PaymentIntents.Capture(authorised.ID, nil)
	require.NoError(t, err)
	abandoned, err := f.stripe.PaymentIntents.New(manualPaymentIntent("wh-auth-2"))
	require.NoError(t, err)
	_, err = f.stripe.PaymentIntents.Cancel(abandoned.ID, nil)
	require.NoError(t, err)
	_, err = f.stripe.Refunds.New(refundParams(paid.ID, 700, "wh-refund"))
	require.NoError(t, err)

	want := []string{
		"payment_intent.created", "charge.succeeded", "payment_intent.succeeded",
		"payment_intent.created", "charge.failed", "payment_intent.payment_failed",
		"payment_intent.created", "charge.succeeded", "payment_intent.amount_capturable_updated",
		"charge.captured", "payment_intent.succeeded",
		"payment_intent.created", "charge.succeeded", "payment_intent.amount_capturable_updated",
		"payment_intent.canceled",
		"charge.refunded", "refund.created",
	}
	require.Equal(t, want, waitForEvents(t, rcv, len(want)))

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	first := rcv.events[0]
	require.Equal(t, stripesim.APIVersion, first.APIVersion)
	require.Equal(t, "event", first.Object)
	require.Equal(t, "wh-paid", first.Request.IdempotencyKey)
	require.Equal(t, paid.ID, first.Data.Object["id"])

	refunded := rcv.events[len(want)-2]
	require.Equal(t, paid.ID, refunded.Data.Object["payment_intent"])
	require.EqualValues(t, 700, refunded.Data.Object["amount_refunded"])
}

func TestWebhooksAreRetriedInOrder(t *testing.T) {
	t.Parallel()
	// The endpoint fails its first two deliveries.
	f, rcv := setupWithReceiver(t, func(attempt int) bool { return attempt <= 2 })

	_, err := f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_visa"))
	require.NoError(t, err)

	types := waitForEvents(t, rcv, 3)
	require.Equal(t, []string{"payment_intent.created", "charge.succeeded", "payment_intent.succeeded"}, types)
	_, attempts, _ := rcv.received()
	require.Equal(t, 5, attempts)
}

func TestWebhooksGiveUpAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	f, rcv := setupWithReceiver(t, func(attempt int) bool { return attempt <= 3 },
		func(c *stripesim.Config) { c.WebhookMaxAttempts = 3 })

	_, err := f.stripe.Customers.New(&stripe.CustomerParams{})
	require.NoError(t, err)
	eventually(t, func() bool { _, attempts, _ := rcv.received(); return attempts == 3 }, "three attempts")

	_, err = f.stripe.Customers.New(&stripe.CustomerParams{})
	require.NoError(t, err)
	require.Equal(t, []string{"customer.created"}, waitForEvents(t, rcv, 1), "the next event still goes out")
}

func TestWebhookDeliveryNeverBlocksRequests(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(stuck.Close)
	t.Cleanup(func() { close(release) })

	f := setup(t, func(c *stripesim.Config) { c.WebhookURL = stuck.URL })
	for range 20 {
		_, err := f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_visa"))
		require.NoError(t, err)
	}

	closed := make(chan struct{})
	go func() {
		f.sim.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not stop a delivery stuck on its endpoint")
	}
}

func TestSignMatchesStripeGo(t *testing.T) {
	t.Parallel()
	payload := []byte(`{"id":"evt_1","object":"event"}`)
	at := time.Unix(1763800000, 0)

	want := "t=1763800000,v1=" + hex.EncodeToString(webhook.ComputeSignature(at, payload, webhookSecret))
	require.Equal(t, want, stripesim.Sign(payload, webhookSecret, at))
}
