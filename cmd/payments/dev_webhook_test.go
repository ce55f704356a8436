package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/webhooktest"
)

var webhookApplied = regexp.MustCompile(`"msg":"stripe webhook".*"type":"(payment_intent.succeeded)","outcome":"(?:applied|no_change)"`)

func TestDev_theSimulatorsWebhooksReachTheService(t *testing.T) {
	t.Parallel()
	dev, base := startDev(t, filepath.Join(worldReachableDir(t), "data"))

	status, body, err := createPayment(t, base, "webhook-demo")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(body))
	dev.waitFor(t, &dev.stderr, webhookApplied)

	// The flow and the webhook both learned of the payment; the merchant
	// hears of it once.
	var events struct {
		Data []struct{ Type string } `json:"data"`
	}
	require.Eventually(t, func() bool {
		code, body := get(t, base+"/v1/events", aliceKey)
		require.Equal(t, http.StatusOK, code)
		require.NoError(t, json.Unmarshal([]byte(body), &events))
		return len(events.Data) > 0
	}, 20*time.Second, 50*time.Millisecond)
	time.Sleep(500 * time.Millisecond) // a duplicate, if there were one, would be written by now
	code, out := get(t, base+"/v1/events", aliceKey)
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal([]byte(out), &events))
	require.Len(t, events.Data, 1)
	require.Equal(t, "payment.succeeded", events.Data[0].Type)
}

var devStripe = regexp.MustCompile(`Stripe:\s+(http://\S+)`)

// docs/API.md section 7: payments dev allows webhook endpoints on private
// addresses, but never at the addresses of the service itself or of its
// simulator. An endpoint at the simulator's /_sim/reset used to be
// accepted, and each event POSTed there wiped Stripe's state. Refused when
// the endpoint is created, and again when a delivery connects (an endpoint
// that got in another way, here written into the table, gets nothing).
func TestDev_webhooksNeverReachTheServiceOrItsSimulator(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewURL(t)
	dev := startProc(t, []string{"DATABASE_URL=" + dbURL, "STRIPE_API_BASE=", "STRIPE_SECRET_KEY=", "PAYMENTS_FAILPOINTS=",
		"PAYMENTS_ENQUEUER_POLL_INTERVAL=50ms", "PAYMENTS_WEBHOOK_RETRY_SCHEDULE=1h"},
		"dev", "--data-dir", t.TempDir(), "--addr", "127.0.0.1:0", "--stripesim-addr", "127.0.0.1:0")
	base := dev.waitFor(t, &dev.stdout, devURL)
	simURL := dev.waitFor(t, &dev.stdout, devStripe)
	_, simPort, err := net.SplitHostPort(strings.TrimPrefix(simURL, "http://"))
	require.NoError(t, err)

	for i, url := range []string{simURL + "/_sim/reset", "http://localhost:" + simPort + "/_sim/reset",
		"http://0.0.0.0:" + simPort + "/_sim/reset", base + "/v1/payments"} {
		status, data, err := postIdempotent(t, base, "/v1/webhook_endpoints", fmt.Sprintf("own-%d", i), `{"url":"`+url+`"}`)
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", url, data)
		var p struct{ Code, Detail string }
		require.NoError(t, json.Unmarshal(data, &p))
		require.Equal(t, "validation_failed", p.Code, url)
		require.Contains(t, p.Detail, "this service", url)
	}

	// A receiver on loopback is a newcomer's endpoint: accepted.
	receiver := webhooktest.NewReceiver(t)
	status, data, err := postIdempotent(t, base, "/v1/webhook_endpoints", "mine", `{"url":"`+receiver.URL()+`"}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(data))
	var endpoint struct{ Secret string }
	require.NoError(t, json.Unmarshal(data, &endpoint))
	receiver.SetSecret(endpoint.Secret)

	pool := dbtestPool(t, dbURL)
	ctx := context.Background()
	_, err = pool.Exec(ctx, `INSERT INTO webhook_endpoints (id, user_id, url, enabled_events, secret)
		SELECT 'we_sneaked_in', id, $1, '{*}', 'whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=' FROM users WHERE email = 'alice@example.com'`,
		simURL+"/_sim/reset")
	require.NoError(t, err)

	status, data, err = createPayment(t, base, "own-order")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(data))
	var payment struct{ ID string }
	require.NoError(t, json.Unmarshal(data, &payment))

	var lastError string
	require.Eventually(t, func() bool {
		err := pool.QueryRow(ctx, "SELECT coalesce(last_error, '') FROM webhook_deliveries WHERE endpoint_id = 'we_sneaked_in' AND attempts > 0").
			Scan(&lastError)
		return err == nil
	}, 60*time.Second, 50*time.Millisecond, "the delivery to the sneaked-in endpoint was attempted")
	require.Contains(t, lastError, "this service")
	require.Eventually(t, func() bool { return len(receiver.Deliveries()) > 0 }, 60*time.Second, 50*time.Millisecond,
		"the newcomer's own endpoint is delivered to")
	require.Len(t, simPaymentIntents(t, simURL, payment.ID), 1, "the simulator was not reset")
}
