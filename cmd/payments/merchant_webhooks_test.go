package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/safehttp"
	"github.com/example/payments/internal/webhooktest"
)

// API.md section 7, through the real binary: every event reaches every
// endpoint that subscribed to it, through a SIGKILL of the worker while its
// deliveries are pending (the merchant's endpoint failing at first), with
// the event's id as webhook-id and a signature the independent
// implementation accepts.
func TestWorker_everyEventReachesTheMerchantThroughASIGKILL(t *testing.T) {
	t.Parallel()
	simURL := startSimulator(t)
	dbURL := dbtest.NewURL(t)
	seedDemoUsers(t, dbURL)
	// The receiver listens on loopback, which serve and worker refuse
	// unless told otherwise (see the next test).
	_, base := startServe(t, dbURL, simURL, "PAYMENTS_WEBHOOK_ALLOW_PRIVATE=true")

	receiver := webhooktest.NewReceiver(t)
	receiver.SetMode(webhooktest.Fail)
	status, data, err := postIdempotent(t, base, "/v1/webhook_endpoints", "endpoint-1", `{"url":"`+receiver.URL()+`"}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(data))
	var endpoint struct{ ID, Secret string }
	require.NoError(t, json.Unmarshal(data, &endpoint))
	receiver.SetSecret(endpoint.Secret)

	workerEnv := []string{"DATABASE_URL=" + dbURL, "STRIPE_API_BASE=" + simURL, "STRIPE_SECRET_KEY=",
		"PAYMENTS_FAILPOINTS=", "PAYMENTS_METRICS_ADDR=127.0.0.1:0", "PAYMENTS_ENQUEUER_POLL_INTERVAL=50ms",
		"PAYMENTS_WEBHOOK_ALLOW_PRIVATE=true", "PAYMENTS_WEBHOOK_RETRY_SCHEDULE=500ms,500ms,500ms,500ms,500ms,500ms,500ms,500ms,500ms,500ms,500ms,500ms"}
	doomed := startProc(t, workerEnv, "worker")

	const payments = 5
	for i := range payments {
		status, data, err := createPayment(t, base, fmt.Sprintf("order-%d", i))
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, status, string(data))
	}
	// Some deliveries were attempted (and failed): the worker dies with
	// deliveries pending, and perhaps events and jobs not yet moved.
	require.Eventually(t, func() bool { return len(receiver.Deliveries()) >= 2 }, 60*time.Second, 20*time.Millisecond)
	doomed.signalAndWait(t, syscall.SIGKILL)

	pool := dbtestPool(t, dbURL)
	ctx := context.Background()
	var pending int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'").Scan(&pending))
	require.Positive(t, pending, "deliveries were pending when the worker died")

	receiver.SetMode(webhooktest.OK)
	startProc(t, workerEnv, "worker")

	require.Eventually(t, func() bool {
		var events int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM events WHERE type = 'payment.succeeded'").Scan(&events))
		return events == payments
	}, 150*time.Second, 50*time.Millisecond,
		"every event is written (an event job running at the SIGKILL is rescued by River a minute after it started, at its rescuer's next pass)")
	rows, err := pool.Query(ctx, "SELECT id FROM events")
	require.NoError(t, err)
	var eventIDs []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		eventIDs = append(eventIDs, id)
	}
	require.NoError(t, rows.Err())
	require.Eventually(t, func() bool {
		acked := receiver.Acknowledged()
		for _, id := range eventIDs {
			if len(acked[id]) == 0 {
				return false
			}
		}
		return true
	}, 150*time.Second, 100*time.Millisecond, "every event arrives (a job running at the SIGKILL is rescued after a minute)")
	require.Empty(t, receiver.Invalid(), "every delivery verifies")
	for _, d := range receiver.Deliveries() {
		require.Contains(t, eventIDs, d.ID, "webhook-id is the event's id")
	}
	require.Eventually(t, func() bool {
		var succeeded int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM webhook_deliveries WHERE status = 'succeeded'").Scan(&succeeded))
		return succeeded == len(eventIDs)
	}, 30*time.Second, 50*time.Millisecond)
}

// API.md section 7: payments serve refuses an endpoint on a non-public
// address, and a worker connects to none, checked when it connects (so an
// endpoint registered where private addresses were allowed, or a name that
// resolves elsewhere later, still gets nothing), unless
// PAYMENTS_WEBHOOK_ALLOW_PRIVATE=true.
func TestServe_webhookEndpointsOnNonPublicAddressesAreRefused(t *testing.T) {
	t.Parallel()
	simURL := startSimulator(t)
	dbURL := dbtest.NewURL(t)
	seedDemoUsers(t, dbURL)
	_, strict := startServe(t, dbURL, simURL)
	receiver := webhooktest.NewReceiver(t)
	for i, url := range []string{receiver.URL(), "http://10.1.2.3/hooks", "http://169.254.169.254/latest/meta-data",
		"http://[::1]:8080/x", "http://100.64.0.1/x", "http://localhost:9/x"} {
		status, data, err := postIdempotent(t, strict, "/v1/webhook_endpoints", fmt.Sprintf("private-%d", i), `{"url":"`+url+`"}`)
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", url, data)
		var p struct{ Code, Detail string }
		require.NoError(t, json.Unmarshal(data, &p))
		require.Equal(t, "validation_failed", p.Code, url)
		if strings.Contains(url, "localhost") {
			// "The refusal does not tell what a host name resolved to."
			require.Contains(t, p.Detail, `"localhost" `+safehttp.HostRefused)
			require.NotContains(t, p.Detail, "127.0.0.1")
			require.NotContains(t, p.Detail, "::1")
			require.NotContains(t, p.Detail, "loopback")
		}
	}

	// Registered through an instance that allows private addresses, the
	// endpoint still gets nothing from a worker that does not: its dialer
	// refuses the address, and the delivery says why.
	_, lax := startServe(t, dbURL, simURL, "PAYMENTS_WEBHOOK_ALLOW_PRIVATE=true")
	status, data, err := postIdempotent(t, lax, "/v1/webhook_endpoints", "private-allowed", `{"url":"`+receiver.URL()+`"}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(data))
	startProc(t, []string{"DATABASE_URL=" + dbURL, "STRIPE_API_BASE=" + simURL, "STRIPE_SECRET_KEY=",
		"PAYMENTS_FAILPOINTS=", "PAYMENTS_METRICS_ADDR=127.0.0.1:0", "PAYMENTS_ENQUEUER_POLL_INTERVAL=50ms",
		"PAYMENTS_WEBHOOK_RETRY_SCHEDULE=1h"}, "worker")
	status, data, err = createPayment(t, lax, "private-order")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(data))

	pool := dbtestPool(t, dbURL)
	var lastError string
	require.Eventually(t, func() bool {
		err := pool.QueryRow(context.Background(),
			"SELECT coalesce(last_error, '') FROM webhook_deliveries WHERE attempts > 0").Scan(&lastError)
		return err == nil
	}, 60*time.Second, 50*time.Millisecond, "the delivery was attempted")
	require.Contains(t, lastError, "loopback")
	require.Empty(t, receiver.Deliveries(), "nothing reached the non-public address")
}
