package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/dbtest"
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
	_, base := startServe(t, dbURL, simURL)

	receiver := webhooktest.NewReceiver(t)
	receiver.SetMode(webhooktest.Fail)
	status, data, err := postIdempotent(base, "/v1/webhook_endpoints", "endpoint-1", `{"url":"`+receiver.URL()+`"}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(data))
	var endpoint struct{ ID, Secret string }
	require.NoError(t, json.Unmarshal(data, &endpoint))
	receiver.SetSecret(endpoint.Secret)

	workerEnv := []string{"DATABASE_URL=" + dbURL, "STRIPE_API_BASE=" + simURL, "STRIPE_SECRET_KEY=",
		"PAYMENTS_FAILPOINTS=", "PAYMENTS_METRICS_ADDR=127.0.0.1:0", "PAYMENTS_ENQUEUER_POLL_INTERVAL=50ms",
		"PAYMENTS_WEBHOOK_RETRY_SCHEDULE=500ms,500ms,500ms,500ms,500ms,500ms,500ms,500ms,500ms,500ms,500ms,500ms"}
	doomed := startProc(t, workerEnv, "worker")

	const payments = 5
	for i := range payments {
		status, data, err := createPayment(base, fmt.Sprintf("order-%d", i))
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
	}, 60*time.Second, 50*time.Millisecond)
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
