package payments_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/payments"
)

// The columns a move of a payment (TransitionPayment,
// TransitionPaymentIfUnchanged) or a refund writes.
var movedColumns = []string{"status", "stripe_payment_intent", "amount_captured", "amount_refunded",
	"failure_code", "failure_message", "updated_at"}

// No index of payments names a column a move changes (its key, its
// expressions or its predicate), so that a move is a HOT update: no new
// entry in the table's indexes, on the pages other requests' records read
// (docs/failure-scenarios.md "A young database", migration 000024).
func TestPayments_noIndexNamesAColumnAMoveChanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rows, err := b.pool.Query(context.Background(), `
		SELECT i.indexrelid::regclass::text, a.attname
		FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum > 0 AND NOT a.attisdropped
		WHERE i.indrelid = 'payments'::regclass
		  AND (a.attnum = ANY (i.indkey)
		       OR pg_get_expr(i.indexprs, i.indrelid) ~ ('\m' || a.attname || '\M')
		       OR pg_get_expr(i.indpred, i.indrelid) ~ ('\m' || a.attname || '\M'))
		  AND a.attname = ANY ($1)
		ORDER BY 1, 2`, movedColumns)
	require.NoError(t, err)
	var found []string
	for rows.Next() {
		var index, column string
		require.NoError(t, rows.Scan(&index, &column))
		found = append(found, index+" ("+column+")")
	}
	require.NoError(t, rows.Err())
	require.Empty(t, found, "indexes of payments that a move's update must write a new entry into")
}

// New payments' moves are HOT updates, and each payment is still found by
// its PaymentIntent.
func TestCreate_theRecordsMovesOfNewPaymentsAreHOTAndFoundByTheirIntent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc, _ := b.service(t, "")
	ctx := context.Background()
	const n = 5
	for i := range n {
		body := []byte(`{"amount":1500,"currency":"usd","payment_method":"pm_card_visa"}`)
		_, err := svc.Create(ctx, payments.KeyedRequest{
			UserID: b.userID, Key: fmt.Sprintf("hot-%d", i), Method: "POST", Path: "/v1/payments", Body: body,
		}, payments.CreateParams{Amount: 1500, Currency: "usd", PaymentMethod: "pm_card_visa", Capture: true})
		require.NoError(t, err)
	}

	rows, err := b.pool.Query(ctx, "SELECT id, stripe_payment_intent FROM payments")
	require.NoError(t, err)
	intents := map[string]string{}
	for rows.Next() {
		var id string
		var intent *string
		require.NoError(t, rows.Scan(&id, &intent))
		require.NotNil(t, intent, id)
		intents[id] = *intent
	}
	require.NoError(t, rows.Err())
	require.Len(t, intents, n)
	for id, intent := range intents {
		got, err := dbsqlc.New().GetPaymentByIntent(ctx, b.pool, pgtype.Text{String: intent, Valid: true})
		require.NoError(t, err)
		require.Equal(t, id, got.ID)
	}

	// The statistics reach pg_stat_user_tables when the service's
	// connections flush them (at the latest about 10 s after going idle).
	var updates, hot int64
	deadline := time.Now().Add(30 * time.Second)
	for {
		require.NoError(t, b.pool.QueryRow(ctx,
			"SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = 'payments'::regclass").Scan(&updates, &hot))
		if updates >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.GreaterOrEqual(t, updates, int64(n), "every payment moved at least once")
	require.Equal(t, updates, hot, "every move of a payment is a HOT update")
}
