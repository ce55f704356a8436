package stripeclient_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/stripesim"
)

func TestCardDeclinesAreTerminalWithDetails(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for pm, declineCode := range map[string]string{
		"pm_card_chargeDeclined":                  "generic_decline",
		"pm_card_chargeDeclinedInsufficientFunds": "insufficient_funds",
		"pm_card_chargeDeclinedLostCard":          "lost_card",
	} {
		_, err := f.client.CreatePaymentIntent(context.Background(), "decline-"+pm, payment(pm))
		require.Equal(t, stripeclient.Terminal, stripeclient.Classify(err), pm)

		d, ok := stripeclient.AsDecline(err)
		require.True(t, ok, pm)
		require.Equal(t, "card_declined", d.Code)
		require.Equal(t, declineCode, d.DeclineCode)
		require.NotEmpty(t, d.Message)
		require.Regexp(t, `^pi_`, d.PaymentIntent)
		require.Regexp(t, `^ch_`, d.Charge)
	}

	_, ok := stripeclient.AsDecline(errors.New("not stripe"))
	require.False(t, ok)
}

// Stripe's final answers for a key are Terminal.
func TestStripeRefusalsAreTerminal(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	pi, err := f.client.CreatePaymentIntent(ctx, "terminal-pi", payment("pm_card_visa"))
	require.NoError(t, err)

	refusals := map[string]func() error{
		"unknown payment method": func() error {
			_, err := f.client.CreatePaymentIntent(ctx, "terminal-1", payment("pm_card_unknown"))
			return err
		},
		"key reused with other parameters": func() error {
			req := payment("pm_card_visa")
			req.Amount = 1
			_, err := f.client.CreatePaymentIntent(ctx, "terminal-pi", req)
			return err
		},
		"capture of a succeeded payment intent": func() error {
			_, err := f.client.CapturePaymentIntent(ctx, "terminal-2", pi.ID, 0)
			return err
		},
		"refund of more than was paid": func() error {
			_, err := f.client.CreateRefund(ctx, "terminal-3", stripeclient.RefundRequest{PaymentIntent: pi.ID, Amount: 2001})
			return err
		},
		"missing payment intent": func() error {
			_, err := f.client.GetPaymentIntent(ctx, "pi_missing")
			return err
		},
	}
	for name, call := range refusals {
		err := call()
		require.Error(t, err, name)
		require.Equal(t, stripeclient.Terminal, stripeclient.Classify(err), "%s: %v", name, err)
		_, isDecline := stripeclient.AsDecline(err)
		require.False(t, isDecline, name)
	}
}

// Failures after which the call may or may not have happened are Transient.
func TestUncertainOutcomesAreTransient(t *testing.T) {
	t.Parallel()
	for _, kind := range []stripesim.FaultKind{
		stripesim.FaultError500, stripesim.FaultRateLimit, stripesim.FaultLostResponse, stripesim.FaultDropConnection,
	} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			f := setup(t, freshConnections)
			require.NoError(t, f.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/payment_intents", Kind: kind}))

			_, err := f.client.CreatePaymentIntent(context.Background(), "transient", payment("pm_card_visa"))
			require.Error(t, err)
			require.Equal(t, stripeclient.Transient, stripeclient.Classify(err), err.Error())
		})
	}
}

func TestKeyInUseIsTransient(t *testing.T) {
	t.Parallel()
	f := setup(t)
	// Both requests are held after claiming the key; whichever claims it
	// second is refused with 409 at once.
	require.NoError(t, f.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/payment_intents", Kind: stripesim.FaultDelay, DelayMS: 1000, Count: 2}))

	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = f.client.CreatePaymentIntent(context.Background(), "busy", payment("pm_card_visa"))
		})
	}
	wg.Wait()

	failed := errors.Join(errs...)
	require.Error(t, failed)
	require.Equal(t, stripeclient.Transient, stripeclient.Classify(failed))
	require.Contains(t, failed.Error(), "idempotency_key_in_use")
}

// A timed-out call may have charged: it is Transient, and the retry with the
// same key finds out what happened.
func TestTimeoutsAreTransient(t *testing.T) {
	t.Parallel()
	f := setup(t, func(c *stripeclient.Config) { c.Timeout = 100 * time.Millisecond })
	require.NoError(t, f.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/payment_intents", Kind: stripesim.FaultDelay, DelayMS: 400}))

	_, err := f.client.CreatePaymentIntent(context.Background(), "slow", payment("pm_card_visa"))
	require.Equal(t, stripeclient.Transient, stripeclient.Classify(err), err.Error())

	require.Eventually(t, func() bool {
		objs, err := f.sim.Objects("payment_intent")
		return err == nil && len(objs) == 1
	}, 5*time.Second, 10*time.Millisecond, "Stripe finished the charge the client gave up on")
	pi, err := f.client.CreatePaymentIntent(context.Background(), "slow", payment("pm_card_visa"))
	require.NoError(t, err)
	require.Equal(t, "true", pi.LastResponse.Header.Get("Idempotent-Replayed"))
}

func TestContextErrorsAreTransient(t *testing.T) {
	t.Parallel()
	f := setup(t)
	require.NoError(t, f.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/payment_intents", Kind: stripesim.FaultDelay, DelayMS: 300, Count: 2}))

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := f.client.CreatePaymentIntent(ctx, "deadline", payment("pm_card_visa"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, stripeclient.Transient, stripeclient.Classify(err))

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err = f.client.GetPaymentIntent(ctx, "pi_whatever")
	require.Error(t, err)
	require.Equal(t, stripeclient.Transient, stripeclient.Classify(err))
}

func TestUnreachableStripeIsTransient(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more

	_, err := newClient(t, url).GetPaymentIntent(context.Background(), "pi_1")
	require.Error(t, err)
	require.Equal(t, stripeclient.Transient, stripeclient.Classify(err))
}

func TestAnswersThatAreNotStripesAreTransient(t *testing.T) {
	t.Parallel()
	// A proxy in front of Stripe answering with its own error page.
	for _, status := range []int{http.StatusBadRequest, http.StatusBadGateway} {
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(status)
			_, _ = w.Write([]byte("<html>upstream trouble</html>"))
		}))
		t.Cleanup(proxy.Close)

		_, err := newClient(t, proxy.URL).CreatePaymentIntent(context.Background(), "proxy", payment("pm_card_visa"))
		require.Error(t, err)
		require.Equal(t, stripeclient.Transient, stripeclient.Classify(err), "status %d: %v", status, err)
	}
}

func TestKeyProblemsAreTransient(t *testing.T) {
	t.Parallel()
	f := setup(t)
	// The simulator only accepts sk_test_ keys: a restricted key is 401.
	client := newClient(t, f.url, func(c *stripeclient.Config) { c.SecretKey = "rk_test_revoked" })

	_, err := client.GetPaymentIntent(context.Background(), "pi_1")
	require.Error(t, err)
	require.Equal(t, stripeclient.Transient, stripeclient.Classify(err))
}

func TestErrorClassString(t *testing.T) {
	t.Parallel()
	require.Equal(t, "terminal", stripeclient.Terminal.String())
	require.Equal(t, "transient", stripeclient.Transient.String())
}

// A 5xx that Stripe replays from its idempotency store is its answer for the
// key from then on: ErrChildKeySpent, still Transient (the object may or may
// not exist), on every mutating call. A first 500, or a 500 that was never
// stored, is not.
func TestAReplayed500SpendsTheKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	pi, err := f.client.CreatePaymentIntent(ctx, "paid", payment("pm_card_visa"))
	require.NoError(t, err)
	auth, err := f.client.CreatePaymentIntent(ctx, "authorised", stripeclient.PaymentIntentRequest{
		Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_visa", CaptureManually: true})
	require.NoError(t, err)

	calls := map[string]func(key string) error{
		"create": func(key string) error {
			_, err := f.client.CreatePaymentIntent(ctx, key, payment("pm_card_visa"))
			return err
		},
		"capture": func(key string) error {
			_, err := f.client.CapturePaymentIntent(ctx, key, auth.ID, 0)
			return err
		},
		"cancel": func(key string) error {
			_, err := f.client.CancelPaymentIntent(ctx, key, auth.ID)
			return err
		},
		"refund": func(key string) error {
			_, err := f.client.CreateRefund(ctx, key, stripeclient.RefundRequest{PaymentIntent: pi.ID, Amount: 100})
			return err
		},
	}
	for name, call := range calls {
		require.NoError(t, f.sim.AddFault(stripesim.Fault{Kind: stripesim.FaultStoredError500}))
		err := call("stored-" + name)
		require.Equal(t, stripeclient.Transient, stripeclient.Classify(err), name)
		require.NotErrorIs(t, err, stripeclient.ErrChildKeySpent, "%s: a first 500 may be a passing failure", name)

		err = call("stored-" + name)
		require.ErrorIs(t, err, stripeclient.ErrChildKeySpent, name)
		require.Equal(t, stripeclient.Transient, stripeclient.Classify(err), name)

		require.NoError(t, f.sim.AddFault(stripesim.Fault{Kind: stripesim.FaultError500}))
		err = call("unstored-" + name)
		require.NotErrorIs(t, err, stripeclient.ErrChildKeySpent, name)
	}
}
