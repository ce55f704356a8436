package payments_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/keyfilter"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/users"
)

// sendLog records what a pool sends: one entry per round trip, the
// statements of a batch joined by " + ".
type sendLog struct {
	mu    sync.Mutex
	sends []string
	batch []string
}

func (l *sendLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sends = append(l.sends, statementName(d.SQL))
	return ctx
}
func (l *sendLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (l *sendLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	var names []string
	for _, q := range d.Batch.QueuedQueries {
		names = append(names, statementName(q.SQL))
	}
	l.sends = append(l.sends, strings.Join(names, " + "))
	return ctx
}
func (l *sendLog) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (l *sendLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (l *sendLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sends
	l.sends = nil
	return s
}

// statementName is sqlc's name of a query ("-- name: InsertPayment :one"), or its first words.
func statementName(sql string) string {
	if rest, ok := strings.CutPrefix(sql, "-- name: "); ok {
		name, _, _ := strings.Cut(rest, " ")
		return name
	}
	f := strings.Fields(sql)
	return strings.Join(f[:min(len(f), 2)], " ")
}

// A new payment is two transactions, and they reach the database in two
// round trips: BEGIN goes with the first statement, the writes nobody reads
// go with the next statement. This pins how many, so that a change that
// adds a round trip to every payment is seen.
func TestCreate_roundTripsOfANewPaymentAndOfItsReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	cfg, err := pgxpool.ParseConfig(b.pool.Config().ConnString())
	require.NoError(t, err)
	log := &sendLog{}
	cfg.ConnConfig.Tracer = log
	cfg.MaxConns = 1 // one connection, so statements are prepared once
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	u, err := users.Authenticate(ctx, pool, users.DemoUsers[0].APIKey)
	require.NoError(t, err)
	filter, err := keyfilter.New(keyfilter.Config{ExpectedKeysPerSlice: 1024})
	require.NoError(t, err)
	svc, engine := newService(t, recovery.Config{Pool: pool, KeyFilter: filter}, b.stripe)
	_, err = engine.RebuildKeyFilter(ctx)
	require.NoError(t, err)

	create := func(key string) recovery.Response {
		body := []byte(`{"amount":1500,"currency":"usd","payment_method":"pm_card_visa"}`)
		resp, err := svc.Create(ctx, payments.KeyedRequest{UserID: u.ID, Key: key, Method: "POST", Path: "/v1/payments", Body: body},
			payments.CreateParams{Amount: 1500, Currency: "usd", PaymentMethod: "pm_card_visa", Capture: true})
		require.NoError(t, err)
		require.Equal(t, 201, resp.Status)
		return resp
	}
	create("warm-up") // prepares the statements on the connection
	log.take()
	create("counted")
	sends := log.take()
	require.Equal(t, []string{
		// The claim: the key is new (the filter has never seen it), so no
		// lookup; the key's row first (if the key exists after all, the
		// unique index fails the transaction before the payment is
		// written), the payment and its audit record, in one transaction
		// that reads nothing back: one round trip. The key's move to
		// payment_created is no statement of its own: the row is inserted
		// there (its insert is made when the COMMIT sends it), so it is
		// written once, and the transaction reads no index page by the
		// key's id but the foreign keys' checks.
		"BEGIN ISOLATION + InsertIdempotencyKey + InsertPayment + InsertAuditRecord + COMMIT",
		// (Stripe is called here.) Its answer is recorded and the key
		// finished, in one round trip: the move is computed from the
		// payment the claim handed off (paymentInserted), and written only
		// if the payment is still as handed off (else the transaction fails
		// as a serialization failure and runs again, without the hand-off,
		// with the payment read locked); the answer renders the payment the
		// record handed on (paymentRecorded); the fenced finish raises if
		// the key was taken over.
		"BEGIN ISOLATION + TransitionPaymentIfUnchanged + InsertStagedJobs + InsertAuditRecord + FinishIdempotencyKey + COMMIT",
	}, sends)

	// A retry of the finished request is answered from the stored
	// response: one read, no transaction, no lock.
	require.True(t, create("counted").Replayed)
	require.Equal(t, []string{"FindFinishedKey"}, log.take())
}
