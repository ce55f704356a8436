package stagedjobs_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/merchanthooks"
	"github.com/example/payments/internal/stagedjobs"
)

// An endpoint whose creating transaction is still open while an event is
// written (staged and drained) gets the event if and only if its created
// is earlier than the event's: it is never left out while it claims to be
// older than the event (docs/API.md section 7: every event reaches every
// endpoint that subscribed when the event was created). The transactions
// are driven by hand, in the three orders that matter:
//
//   - insertedBeforeStaging: the endpoint's row is inserted, then the
//     event is staged and committed, then the drain runs while the
//     endpoint's transaction is still open. The endpoint is older: it
//     must get the event (the drain must see it).
//   - begunBeforeStaging: the endpoint's transaction begins before the
//     event is staged, but inserts its row after: a created_at of the
//     transaction's start would claim the endpoint is older than an event
//     the drain cannot yet see it for.
//   - insertedAfterStaging: the event is staged first; the endpoint's row
//     comes after. It must not get the event.
func TestEnqueuer_anEndpointBeingCreatedGetsAnEventIffItIsOlder(t *testing.T) {
	t.Parallel()
	for _, order := range []string{"insertedBeforeStaging", "begunBeforeStaging", "insertedAfterStaging"} {
		t.Run(order, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			userID := b.seedPayment(t, "pay_race")
			var event stagedjobs.EventArgs
			stage := func() { // as a flow does: the event is described in the transaction that stages it
				event = stagedjobs.NewEventArgs(userID, "payment.succeeded", json.RawMessage(`{"id":"pay_race"}`))
				b.stageTx(t, stagedjobs.Job{Kind: stagedjobs.MerchantEvent, Args: event})
			}

			tx, err := b.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable}) // as the create flow's phase
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			var endpoint merchanthooks.Endpoint
			insert := func() {
				endpoint, err = merchanthooks.InsertEndpointTx(ctx, tx, userID,
					merchanthooks.CreateParams{URL: "https://example.com/hooks", EnabledEvents: []string{"*"}}, nil)
				require.NoError(t, err)
			}
			switch order {
			case "insertedBeforeStaging":
				insert()
				stage()
			case "begunBeforeStaging":
				_, err := tx.Exec(ctx, "SELECT 1") // the transaction has begun
				require.NoError(t, err)
				stage()
				insert()
			case "insertedAfterStaging":
				stage()
				insert()
			}

			drained := make(chan error, 1)
			go func() {
				_, err := stagedjobs.NewEnqueuer(stagedjobs.EnqueuerConfig{Pool: b.pool, River: b.river}).DrainOnce(ctx)
				drained <- err
			}()
			// The drain either finishes without the endpoint's commit or
			// waits for it; either way the endpoint commits only then.
			var drainErr error
			finished := false
			require.Eventually(t, func() bool {
				select {
				case drainErr = <-drained:
					finished = true
					return true
				default:
					return b.count(t, "SELECT count(*) FROM pg_locks WHERE NOT granted") > 0
				}
			}, 10*time.Second, 5*time.Millisecond)
			require.NoError(t, tx.Commit(ctx))
			if !finished {
				drainErr = <-drained
			}
			require.NoError(t, drainErr)

			var endpointCreated, eventCreated time.Time
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT created_at FROM webhook_endpoints WHERE id = $1", endpoint.ID).Scan(&endpointCreated))
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT created_at FROM events WHERE id = $1", event.EventID).Scan(&eventCreated))
			delivered := b.count(t, "SELECT count(*) FROM webhook_deliveries WHERE event_id = $1 AND endpoint_id = $2",
				event.EventID, endpoint.ID) == 1
			require.Equal(t, endpointCreated.Before(eventCreated), delivered,
				"endpoint created %s, event created %s, delivered: %v", endpointCreated, eventCreated, delivered)
			if order == "insertedBeforeStaging" {
				require.True(t, delivered, "the endpoint is older than the event")
			} else if order == "insertedAfterStaging" {
				require.False(t, delivered, "the event is older than the endpoint")
			}
		})
	}
}

// The event worker (events the drain could not write, or jobs staged
// straight into River) keeps the same promise: with an endpoint's creating
// transaction open, it waits for it, and the endpoint, older than the
// event, gets it.
func TestEventWorker_waitsForAnEndpointBeingCreated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	userID := b.seedPayment(t, "pay_race_worker")

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	endpoint, err := merchanthooks.InsertEndpointTx(ctx, tx, userID,
		merchanthooks.CreateParams{URL: "https://example.com/hooks", EnabledEvents: []string{"payment.*"}}, nil)
	require.NoError(t, err)

	event := stagedjobs.NewEventArgs(userID, "payment.succeeded", json.RawMessage(`{"id":"pay_race_worker"}`))
	worked := make(chan error, 1)
	go func() {
		worked <- stagedjobs.NewEventWorker(b.pool).Work(ctx, &river.Job[stagedjobs.EventArgs]{Args: event})
	}()
	require.Eventually(t, func() bool {
		select {
		case err := <-worked:
			worked <- err
			return true
		default:
			return b.count(t, "SELECT count(*) FROM pg_locks WHERE NOT granted") > 0
		}
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-worked)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM webhook_deliveries WHERE event_id = $1 AND endpoint_id = $2",
		event.EventID, endpoint.ID), "the endpoint is older than the event")
}
