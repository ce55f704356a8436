package stripeclient_test

import (
	"context"
	"net/http"
	"net/http/httptrace"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/stripesim"
)

// Every failure below is one stripe-go retries by default (network error,
// 429 lock_timeout, 409, 5xx on GET). The wrapper turns that off, so the
// simulator sees exactly one request per call.
func TestNoHiddenRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, tc := range map[string]struct {
		fault stripesim.Fault
		call  func(*stripeclient.Client) error
	}{
		"network error on POST": {
			stripesim.Fault{PathPrefix: "/v1/payment_intents", Kind: stripesim.FaultDropConnection},
			func(c *stripeclient.Client) error {
				_, err := c.CreatePaymentIntent(ctx, "k1", payment("pm_card_visa"))
				return err
			},
		},
		"429 lock_timeout on POST": {
			stripesim.Fault{PathPrefix: "/v1/refunds", Kind: stripesim.FaultRateLimit},
			func(c *stripeclient.Client) error {
				_, err := c.CreateRefund(ctx, "k2", stripeclient.RefundRequest{PaymentIntent: "pi_1"})
				return err
			},
		},
		"500 on GET": {
			stripesim.Fault{PathPrefix: "/v1/payment_intents", Kind: stripesim.FaultError500},
			func(c *stripeclient.Client) error {
				_, err := c.GetPaymentIntent(ctx, "pi_1")
				return err
			},
		},
		"network error on GET": {
			stripesim.Fault{PathPrefix: "/v1/payment_intents", Method: "GET", Kind: stripesim.FaultDropConnection},
			func(c *stripeclient.Client) error {
				_, err := c.ListPaymentIntentsByMetadata(ctx, time.Now(), time.Now().Add(time.Minute), "k", "v")
				return err
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, freshConnections)
			require.NoError(t, f.sim.AddFault(tc.fault))

			err := tc.call(f.client)
			require.Error(t, err)
			require.Equal(t, stripeclient.Transient, stripeclient.Classify(err))
			require.Len(t, requestsOverHTTP(t, f.url), 1)
		})
	}
}

// The same 429 with stripe-go's retries left on: the fault above would have
// been retried, so the test above proves something.
func TestStripeGoWouldRetry(t *testing.T) {
	t.Parallel()
	f := setup(t)
	require.NoError(t, f.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/refunds", Kind: stripesim.FaultRateLimit}))
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(f.url),
		MaxNetworkRetries: stripe.Int64(1),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	api := client.New(testKey, &stripe.Backends{API: backend, Connect: backend, Uploads: backend})

	params := &stripe.RefundParams{PaymentIntent: stripe.String("pi_1")}
	params.SetIdempotencyKey("k")
	_, _ = api.Refunds.New(params) // the retry gets past the fault to a 400: no such payment intent

	recs := requestsOverHTTP(t, f.url)
	require.Len(t, recs, 2)
	require.Equal(t, http.StatusTooManyRequests, recs[0].Status)
	require.Equal(t, recs[0].IdempotencyKey, recs[1].IdempotencyKey)
}

// Go's own http.Transport resends a request that carries an Idempotency-Key,
// once, when a reused keep-alive connection dies before any answer (it cannot
// tell that from a server closing an idle connection). The wrapper keeps this
// behaviour: the key makes it safe, and the caller sees one call with the
// real answer.
func TestTransportResendsOnReusedConnection(t *testing.T) {
	t.Parallel()
	// One connection per host, so that the POST waits for the warm-up's
	// connection instead of racing its return to the idle pool.
	f := setup(t, func(c *stripeclient.Config) {
		c.HTTPClient = &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	})
	_, err := f.client.GetPaymentIntent(context.Background(), "pi_warm_up")
	require.Error(t, err)
	require.NoError(t, f.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/payment_intents", Method: "POST", Kind: stripesim.FaultDropConnection}))

	var reused []bool
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { reused = append(reused, info.Reused) },
	})
	pi, err := f.client.CreatePaymentIntent(ctx, "resent", payment("pm_card_visa"))
	require.NoError(t, err)
	require.Equal(t, "true", pi.LastResponse.Header.Get("Idempotent-Replayed"))
	require.Equal(t, []bool{true, false}, reused, "sent on the warm connection, resent on a new one")

	recs := requestsOverHTTP(t, f.url)
	require.Len(t, recs, 3)
	require.Equal(t, stripesim.FaultDropConnection, recs[1].Fault)
	require.True(t, recs[2].Replayed)
}
