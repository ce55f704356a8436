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
	require.Empty(t, indexesNaming(t, b, "payments", movedColumns),
		"indexes of payments that a move's update must write a new entry into")
}

// The columns the updates of a key write after its insert: its moves and
// finish (SetRecoveryPoint, FinishIdempotencyKey), its locks and heartbeats,
// the completer's claims and an operator's mark, and a failed key's error.
var keyUpdatedColumns = []string{"recovery_point", "response_code", "response_body", "locked_at", "lock_expires_at",
	"lock_token", "last_run_at", "expires_at", "needs_attention_at", "completer_attempts", "attention_error"}

// Nor does any index of idempotency_keys name a column that the key's
// updates change, so that its finish is a HOT update too (migration
// 000026): the unfinished keys are found through a table of their own, the
// expired ones through their creation time.
func TestIdempotencyKeys_noIndexNamesAColumnAnUpdateChanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.Empty(t, indexesNaming(t, b, "idempotency_keys", keyUpdatedColumns),
		"indexes of idempotency_keys that a key's update must write a new entry into")
}

// indexesNaming lists the indexes of table whose key, expressions or
// predicate name one of columns, as "index (column)".
func indexesNaming(t *testing.T, b *testBundle, table string, columns []string) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `
		SELECT i.indexrelid::regclass::text, a.attname
		FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum > 0 AND NOT a.attisdropped
		WHERE i.indrelid = $1::regclass
		  AND (a.attnum = ANY (i.indkey)
		       OR pg_get_expr(i.indexprs, i.indrelid) ~ ('\m' || a.attname || '\M')
		       OR pg_get_expr(i.indpred, i.indrelid) ~ ('\m' || a.attname || '\M'))
		  AND a.attname = ANY ($2)
		ORDER BY 1, 2`, table, columns)
	require.NoError(t, err)
	var found []string
	for rows.Next() {
		var index, column string
		require.NoError(t, rows.Scan(&index, &column))
		found = append(found, index+" ("+column+")")
	}
	require.NoError(t, rows.Err())
	return found
}

// New payments' moves, and their keys' finishes, are HOT updates, and each
// payment is still found by its PaymentIntent.
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
	for _, table := range []string{"payments", "idempotency_keys"} {
		var updates, hot int64
		deadline := time.Now().Add(30 * time.Second)
		for {
			require.NoError(t, b.pool.QueryRow(ctx,
				"SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = $1::regclass", table).Scan(&updates, &hot))
			if updates >= n || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		require.GreaterOrEqual(t, updates, int64(n), "every row of %s was updated at least once", table)
		require.Equal(t, updates, hot, "every update of %s is a HOT update", table)
	}
}
