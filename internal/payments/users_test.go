package payments_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/payments"
)

// A new payment takes no lock on its user's row (migration 000028): no
// table it writes references users by a foreign key, whose check locked
// the row FOR KEY SHARE for every key, payment and audit record, so that a
// user's concurrent requests shared one lock (a MultiXact) and each wrote a
// WAL record for the row. Here another transaction holds the row FOR
// UPDATE, which any such lock waits for: the payment is made all the same.
func TestCreate_takesNoLockOnTheUsersRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc, _ := b.service(t, "")
	ctx := context.Background()

	holder, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx) //nolint:errcheck // nothing to keep
	_, err = holder.Exec(ctx, "SELECT 1 FROM users WHERE id = $1 FOR UPDATE", b.userID)
	require.NoError(t, err)

	createCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	body := []byte(`{"amount":1500,"currency":"usd","payment_method":"pm_card_visa"}`)
	resp, err := svc.Create(createCtx, payments.KeyedRequest{
		UserID: b.userID, Key: "beside-a-lock", Method: "POST", Path: "/v1/payments", Body: body,
	}, payments.CreateParams{Amount: 1500, Currency: "usd", PaymentMethod: "pm_card_visa", Capture: true})
	require.NoError(t, err, "a request waited for its user's row")
	require.Equal(t, 201, resp.Status)
}

// What the foreign keys to users held, that no row names a user who does
// not exist, holds because a user is never deleted: the database refuses
// it, a DELETE and a TRUNCATE alike, with or without rows that name the
// user. Only api_keys still references users (ON DELETE CASCADE).
func TestUsers_areNeverDeleted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	var referencing []string
	rows, err := b.pool.Query(ctx, "SELECT conrelid::regclass::text FROM pg_constraint WHERE confrelid = 'users'::regclass ORDER BY 1")
	require.NoError(t, err)
	referencing, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"api_keys"}, referencing, "the tables with a foreign key to users")

	var lonely int64
	require.NoError(t, b.pool.QueryRow(ctx, "INSERT INTO users (email) VALUES ('lonely@example.com') RETURNING id").Scan(&lonely))
	for _, statement := range []struct {
		sql  string
		args []any
	}{
		{"DELETE FROM users WHERE id = $1", []any{lonely}},
		{"DELETE FROM users WHERE id = $1", []any{b.userID}},
		{"TRUNCATE users CASCADE", nil},
	} {
		_, err := b.pool.Exec(ctx, statement.sql, statement.args...)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "%s %v: %v", statement.sql, statement.args, err)
		require.Equal(t, "23001", pgErr.Code, statement.sql) // restrict_violation
	}
	var users int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM users").Scan(&users))
	require.GreaterOrEqual(t, users, 2)
}
