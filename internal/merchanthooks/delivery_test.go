package merchanthooks_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/api"
	"github.com/example/payments/internal/app"
	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/merchanthooks"
	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/stripesim"
	"github.com/example/payments/internal/users"
	"github.com/example/payments/internal/webhooktest"
	"github.com/example/payments/internal/worker"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

const aliceKey = "sk_dev_alice_0123456789abcdef"

// testBundle is the service as `payments dev` runs it, in one process: the
// API and the background work (River, the enqueuer, the delivery worker)
// on a real database, the simulator over HTTP.
type testBundle struct {
	app *app.App
	api string
}

// setup starts the service with a short retry schedule and an HTTP client
// that gives up after clientTimeout (the real one waits 10 s).
func setup(t *testing.T, schedule []time.Duration, clientTimeout time.Duration) *testBundle {
	t.Helper()
	ctx := context.Background()
	sim := stripesim.New(stripesim.Config{})
	simServer := httptest.NewServer(sim.Handler())
	t.Cleanup(func() { simServer.Close(); sim.Close() })
	stripe, err := stripeclient.New(stripeclient.Config{SecretKey: "sk_test_hooks", APIBase: simServer.URL})
	require.NoError(t, err)
	a, err := app.New(ctx, app.Config{DatabaseURL: dbtest.NewURL(t), Pool: db.PoolConfig{MaxConns: 6}, KeyTTL: time.Hour, Stripe: stripe})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	require.NoError(t, users.SeedDemoUsers(ctx, a.Pool))
	handler, err := a.APIHandler(api.RateLimit{}, 0)
	require.NoError(t, err)
	apiServer := httptest.NewServer(handler)
	t.Cleanup(apiServer.Close)

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- worker.Run(runCtx, worker.Config{
			Pool: a.Pool, Logger: a.Log, Registry: a.Registry, Engine: a.Engine,
			Payments:             a.Payments,
			EnqueuerPollInterval: 50 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
			WebhookRetrySchedule: schedule, WebhookClient: &http.Client{Timeout: clientTimeout},
		})
	}()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Error("the worker did not stop")
		}
	})
	return &testBundle{app: a, api: apiServer.URL}
}

func (b *testBundle) call(t *testing.T, method, path, idemKey, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, b.api+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, data
}

// endpoint registers r as an endpoint for enabledEvents (JSON, or "" for
// the default) and tells r its secret.
func (b *testBundle) endpoint(t *testing.T, r *webhooktest.Receiver, enabledEvents string) string {
	t.Helper()
	body := `{"url":"` + r.URL() + `"}`
	if enabledEvents != "" {
		body = `{"url":"` + r.URL() + `","enabled_events":` + enabledEvents + `}`
	}
	status, data := b.call(t, http.MethodPost, "/v1/webhook_endpoints", "we-"+r.URL(), body)
	require.Equal(t, http.StatusCreated, status, string(data))
	var e struct{ ID, Secret string }
	require.NoError(t, json.Unmarshal(data, &e))
	r.SetSecret(e.Secret)
	return e.ID
}

// pay makes a payment, which the event worker announces as payment.succeeded,
// and returns that event's id once it is written.
func (b *testBundle) pay(t *testing.T, idemKey string) string {
	t.Helper()
	status, data := b.call(t, http.MethodPost, "/v1/payments", idemKey, `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`)
	require.Equal(t, http.StatusCreated, status, string(data))
	var p struct{ ID string }
	require.NoError(t, json.Unmarshal(data, &p))
	var eventID string
	require.Eventually(t, func() bool {
		err := b.app.Pool.QueryRow(context.Background(),
			`SELECT id FROM events WHERE type = 'payment.succeeded' AND data->>'id' = $1`, p.ID).Scan(&eventID)
		return err == nil
	}, 30*time.Second, 20*time.Millisecond)
	return eventID
}

type deliveryJSON struct {
	Event, Endpoint, Status string
	Attempts                int
	LastStatusCode          *int    `json:"last_status_code"`
	LastError               *string `json:"last_error"`
	NextAttempt             *int64  `json:"next_attempt"`
	Created                 int64
}

func (b *testBundle) deliveries(t *testing.T, eventID string) map[string]deliveryJSON {
	t.Helper()
	status, data := b.call(t, http.MethodGet, "/v1/events/"+eventID+"/deliveries", "", "")
	require.Equal(t, http.StatusOK, status, string(data))
	var l struct{ Data []deliveryJSON }
	require.NoError(t, json.Unmarshal(data, &l))
	out := map[string]deliveryJSON{}
	for _, d := range l.Data {
		out[d.Endpoint] = d
	}
	return out
}

// waitDelivery waits until the delivery of eventID to endpoint has status.
func (b *testBundle) waitDelivery(t *testing.T, eventID, endpoint, status string) deliveryJSON {
	t.Helper()
	var d deliveryJSON
	require.Eventually(t, func() bool {
		d = b.deliveries(t, eventID)[endpoint]
		return d.Status == status
	}, 60*time.Second, 50*time.Millisecond, "delivery of %s to %s never became %s", eventID, endpoint, status)
	return d
}

type attemptRow struct {
	cycle      int
	statusCode *int
	err        *string
	succeeded  bool
}

func (b *testBundle) attempts(t *testing.T, eventID, endpoint string) []attemptRow {
	t.Helper()
	rows, err := b.app.Pool.Query(context.Background(), `SELECT cycle, status_code, error, succeeded FROM webhook_attempts
		WHERE event_id = $1 AND endpoint_id = $2 ORDER BY id`, eventID, endpoint)
	require.NoError(t, err)
	defer rows.Close()
	var out []attemptRow
	for rows.Next() {
		var a attemptRow
		require.NoError(t, rows.Scan(&a.cycle, &a.statusCode, &a.err, &a.succeeded))
		out = append(out, a)
	}
	require.NoError(t, rows.Err())
	return out
}

func TestDelivery_signedEventToEverySubscribedEndpointThatExisted(t *testing.T) {
	t.Parallel()
	b := setup(t, []time.Duration{100 * time.Millisecond}, 2*time.Second)
	all, payments, refunds := webhooktest.NewReceiver(t), webhooktest.NewReceiver(t), webhooktest.NewReceiver(t)
	allID := b.endpoint(t, all, "")
	paymentsID := b.endpoint(t, payments, `["payment.succeeded"]`)
	refundsID := b.endpoint(t, refunds, `["refund.*"]`)

	first := b.pay(t, "pay-1")
	b.waitDelivery(t, first, allID, merchanthooks.StatusSucceeded)
	d := b.waitDelivery(t, first, paymentsID, merchanthooks.StatusSucceeded)
	require.Equal(t, 1, d.Attempts)
	require.Equal(t, 204, *d.LastStatusCode)
	require.Nil(t, d.LastError)
	require.Nil(t, d.NextAttempt)
	require.NotContains(t, b.deliveries(t, first), refundsID, "refund.* does not subscribe to payment.succeeded")

	// The body is the Event object exactly as GET /v1/events/{id} renders it.
	status, event := b.call(t, http.MethodGet, "/v1/events/"+first, "", "")
	require.Equal(t, http.StatusOK, status)
	got := all.Acknowledged()[first]
	require.Len(t, got, 1)
	require.Equal(t, strings.TrimSpace(string(event)), string(got[0].Body))
	require.Equal(t, first, got[0].ID)

	// An endpoint made after the first event gets the next one only.
	late := webhooktest.NewReceiver(t)
	lateID := b.endpoint(t, late, "")
	second := b.pay(t, "pay-2")
	b.waitDelivery(t, second, lateID, merchanthooks.StatusSucceeded)
	b.waitDelivery(t, second, allID, merchanthooks.StatusSucceeded)
	require.NotContains(t, b.deliveries(t, first), lateID)
	require.Empty(t, late.Acknowledged()[first])
	require.Len(t, all.Acknowledged(), 2)

	require.Empty(t, refunds.Deliveries())
	for _, r := range []*webhooktest.Receiver{all, payments, late} {
		require.Empty(t, r.Invalid(), "every delivery verifies with the independent implementation")
	}
	require.Equal(t, 5.0, counter(t, b, "succeeded"), "two events to all and payments, one to late")

	// A redelivery goes to every endpoint that subscribes and exists (API.md
	// section 7), the one made after the event too: the merchant asked.
	status, data := b.call(t, http.MethodPost, "/v1/events/"+first+"/redeliver", "again-first", "")
	require.Equal(t, http.StatusOK, status, string(data))
	var list struct {
		Data []struct{ Endpoint string }
	}
	require.NoError(t, json.Unmarshal(data, &list))
	var got3 []string
	for _, d := range list.Data {
		got3 = append(got3, d.Endpoint)
	}
	require.ElementsMatch(t, []string{allID, paymentsID, lateID}, got3)
	b.waitDelivery(t, first, lateID, merchanthooks.StatusSucceeded)
	require.Len(t, late.Acknowledged()[first], 1)
	require.Empty(t, refunds.Deliveries(), "refund.* still does not subscribe")
}

func TestDelivery_retriesOnTheScheduleThenFailsAndARedeliveryKeepsTheID(t *testing.T) {
	t.Parallel()
	b := setup(t, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond}, 2*time.Second)
	r := webhooktest.NewReceiver(t)
	r.SetMode(webhooktest.Fail)
	id := b.endpoint(t, r, "")
	event := b.pay(t, "pay-1")

	d := b.waitDelivery(t, event, id, merchanthooks.StatusFailed)
	require.Equal(t, 3, d.Attempts, "the first attempt and one per delay of the schedule")
	require.Equal(t, 500, *d.LastStatusCode)
	require.Contains(t, *d.LastError, "failing on purpose")
	require.Nil(t, d.NextAttempt)
	attempts := b.attempts(t, event, id)
	require.Len(t, attempts, 3)
	for _, a := range attempts {
		require.Equal(t, 500, *a.statusCode)
		require.False(t, a.succeeded)
	}
	got := r.Deliveries()
	require.Len(t, got, 3)
	for _, g := range got {
		require.Equal(t, event, g.ID, "the same webhook-id on every attempt")
		require.NoError(t, g.Err)
	}
	require.Equal(t, 1.0, counter(t, b, "failed"))
	require.Equal(t, 2.0, counter(t, b, "retrying"))

	r.SetMode(webhooktest.OK)
	status, data := b.call(t, http.MethodPost, "/v1/events/"+event+"/redeliver", "again-1", "")
	require.Equal(t, http.StatusOK, status, string(data))
	d = b.waitDelivery(t, event, id, merchanthooks.StatusSucceeded)
	require.Equal(t, 4, d.Attempts)
	require.Len(t, r.Acknowledged()[event], 1, "the redelivery carries the event's id")
	require.Equal(t, 1, b.attempts(t, event, id)[3].cycle)

	// A second redelivery of the finished delivery is not swallowed by the
	// uniqueness of the delivery jobs.
	status, data = b.call(t, http.MethodPost, "/v1/events/"+event+"/redeliver", "again-2", "")
	require.Equal(t, http.StatusOK, status, string(data))
	require.Eventually(t, func() bool { return len(r.Acknowledged()[event]) == 2 }, 30*time.Second, 50*time.Millisecond)
	require.Empty(t, r.Invalid())
}

func TestDelivery_timeoutsAndClosedConnectionsAreRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}, 500*time.Millisecond)
	r := webhooktest.NewReceiver(t)
	r.SetHangFor(5 * time.Second)
	r.SetMode(webhooktest.Hang)
	id := b.endpoint(t, r, "")
	event := b.pay(t, "pay-1")

	require.Eventually(t, func() bool { return len(b.attempts(t, event, id)) == 1 }, 30*time.Second, 20*time.Millisecond)
	r.SetMode(webhooktest.Close)
	require.Eventually(t, func() bool { return len(b.attempts(t, event, id)) == 2 }, 30*time.Second, 20*time.Millisecond)
	r.SetMode(webhooktest.OK)
	d := b.waitDelivery(t, event, id, merchanthooks.StatusSucceeded)
	require.Equal(t, 3, d.Attempts)
	attempts := b.attempts(t, event, id)
	for _, a := range attempts[:2] {
		require.Nil(t, a.statusCode, "no answer, no status")
		require.NotEmpty(t, *a.err)
	}
	// Worded for the endpoint's owner (safehttp.Describe): Go's text named
	// the address dialled ("Post \"http://127.0.0.1:...\": ... Timeout").
	require.Equal(t, "no answer in time: the attempt timed out", *attempts[0].err)
	require.Equal(t, "the connection was closed before an answer", *attempts[1].err)
	require.True(t, attempts[2].succeeded)
}

func TestDelivery_aDeletedEndpointGetsNothingMore(t *testing.T) {
	t.Parallel()
	b := setup(t, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond}, 2*time.Second)
	r := webhooktest.NewReceiver(t)
	r.SetMode(webhooktest.Fail)
	id := b.endpoint(t, r, "")
	event := b.pay(t, "pay-1")
	require.Eventually(t, func() bool { return len(r.Deliveries()) == 1 }, 30*time.Second, 20*time.Millisecond)

	status, data := b.call(t, http.MethodDelete, "/v1/webhook_endpoints/"+id, "", "")
	require.Equal(t, http.StatusOK, status, string(data))
	r.SetMode(webhooktest.OK)
	d := b.waitDelivery(t, event, id, merchanthooks.StatusFailed)
	require.Equal(t, "endpoint deleted", *d.LastError)
	require.Len(t, r.Deliveries(), 1, "nothing sent after the delete")

	// Nor do later events, nor a redelivery.
	second := b.pay(t, "pay-2")
	require.Empty(t, b.deliveries(t, second))
	status, data = b.call(t, http.MethodPost, "/v1/events/"+event+"/redeliver", "again", "")
	require.Equal(t, http.StatusOK, status, string(data))
	require.JSONEq(t, `{"object":"list","data":[],"has_more":false}`, string(data))
}

// counter is payments_webhook_deliveries_total{outcome}, read from the
// app's registry through the collector registered there.
func counter(t *testing.T, b *testBundle, outcome string) float64 {
	t.Helper()
	families, err := b.app.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "payments_webhook_deliveries_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
