package keyadmin_test

import (
	"context"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/failpoint"
	"github.com/example/payments/internal/keyadmin"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/stripesim"
	"github.com/example/payments/internal/users"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

type bundle struct {
	pool   *pgxpool.Pool
	sim    *stripesim.Simulator
	stripe *stripeclient.Client
	userID int64
	now    time.Time
}

const alice = "alice@example.com"

func setup(t *testing.T) *bundle {
	t.Helper()
	pool := dbtest.NewPool(t)
	ctx := context.Background()
	require.NoError(t, users.SeedDemoUsers(ctx, pool))
	u, err := users.Authenticate(ctx, pool, users.DemoUsers[0].APIKey)
	require.NoError(t, err)
	sim := stripesim.New(stripesim.Config{})
	server := httptest.NewServer(sim.Handler())
	t.Cleanup(func() { server.Close(); sim.Close() })
	stripe, err := stripeclient.New(stripeclient.Config{SecretKey: "sk_test_keyadmin", APIBase: server.URL})
	require.NoError(t, err)
	return &bundle{pool: pool, sim: sim, stripe: stripe, userID: u.ID, now: time.Now()}
}

// admin is what `payments keys` runs: the flows on an engine with the
// bundle's clock, and a completer for retries.
func (b *bundle) admin(t *testing.T, failpoints string) (*keyadmin.Admin, *payments.Service, *recovery.Completer) {
	t.Helper()
	fp, err := failpoint.Parse(failpoints)
	require.NoError(t, err)
	flows := recovery.NewBuilder(recovery.Config{Pool: b.pool, Failpoints: fp, LockTimeout: time.Minute, Now: func() time.Time { return b.now }})
	svc := payments.NewService(b.pool, flows, b.stripe)
	engine, err := flows.Build()
	require.NoError(t, err)
	c := recovery.NewCompleter(recovery.CompleterConfig{Engine: engine, Grace: time.Second})
	return keyadmin.New(b.pool, engine.Flows(), c), svc, c
}

// abandon runs a create request that fails at the failpoint and leaves its
// key unfinished, as a client that gave up would.
func (b *bundle) abandon(t *testing.T, where, key string) {
	t.Helper()
	_, svc, _ := b.admin(t, where+"=error")
	_, err := svc.Create(context.Background(), payments.KeyedRequest{
		UserID: b.userID, Key: key, Method: "POST", Path: "/v1/payments",
		Body: []byte(`{"amount":1500,"currency":"usd","payment_method":"pm_card_visa"}`),
	}, payments.CreateParams{Amount: 1500, Currency: "usd", PaymentMethod: "pm_card_visa", Capture: true})
	require.ErrorIs(t, err, failpoint.ErrInjected)
}

func (b *bundle) paymentIntents(t *testing.T) int {
	t.Helper()
	objects, err := b.sim.Objects("payment_intent")
	require.NoError(t, err)
	return len(objects)
}

// A key past Stripe's window with nothing at Stripe is given up on by the
// completer: listed as needing attention, with the reason on record, and
// counted by the gauge an alert watches. An operator's retry drives it as
// the completer would, so it still never charges blindly: it is marked
// again.
func TestAdmin_aKeyNeedingAttentionIsListedCountedAndNeverChargedBlindly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.abandon(t, "after_commit:payment_created", "never-sent") // Stripe was never called
	admin, _, completer := b.admin(t, "")

	unfinished, err := admin.List(ctx, keyadmin.ListParams{State: keyadmin.Unfinished, Limit: 10})
	require.NoError(t, err)
	require.Len(t, unfinished, 1)
	require.Nil(t, unfinished[0].LastError, "a failed attempt's error is not on record")
	reg := prometheus.NewRegistry()
	keyadmin.RegisterMetrics(reg, b.pool)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP payments_idempotency_keys_needing_attention Idempotency keys given up on (past Stripe's idempotency window with nothing found at Stripe, or failed with an error no retry can cure): each needs a person.
# TYPE payments_idempotency_keys_needing_attention gauge
payments_idempotency_keys_needing_attention 0
`), "payments_idempotency_keys_needing_attention"))
	lag, err := testutil.GatherAndCount(reg, "payments_idempotency_keys_oldest_unfinished_age_seconds")
	require.NoError(t, err)
	require.Equal(t, 1, lag)

	b.now = b.now.Add(25 * time.Hour)
	run, err := completer.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, run.NeedsAttention)

	listed, err := admin.List(ctx, keyadmin.ListParams{State: keyadmin.NeedsAttention, UserEmail: alice, Limit: 10})
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Equal(t, "never-sent", listed[0].Key)
	require.Equal(t, "payment_created", listed[0].RecoveryPoint)
	require.NotNil(t, listed[0].NeedsAttentionSince)
	require.NotNil(t, listed[0].LastError)
	require.Contains(t, *listed[0].LastError, "needs attention")
	require.EqualValues(t, 2, listed[0].Attempts, "the request, then the completer")
	require.EqualValues(t, 1, listed[0].CompleterAttempts)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP payments_idempotency_keys_needing_attention Idempotency keys given up on (past Stripe's idempotency window with nothing found at Stripe, or failed with an error no retry can cure): each needs a person.
# TYPE payments_idempotency_keys_needing_attention gauge
payments_idempotency_keys_needing_attention 1
# HELP payments_idempotency_keys_oldest_unfinished_age_seconds Age of the oldest request without its final answer, not counting keys needing attention: the completer's lag (0 when none).
# TYPE payments_idempotency_keys_oldest_unfinished_age_seconds gauge
payments_idempotency_keys_oldest_unfinished_age_seconds 0
`)))

	_, err = admin.Retry(ctx, alice, "never-sent")
	require.ErrorIs(t, err, recovery.ErrNeedsAttention, "still nothing at Stripe, still past its window")
	story, err := admin.Show(ctx, alice, "never-sent")
	require.NoError(t, err)
	require.NotNil(t, story.NeedsAttentionSince, "marked again")
	require.EqualValues(t, 3, story.Attempts)
	require.Zero(t, b.paymentIntents(t), "never charged blindly")

	none, err := admin.List(ctx, keyadmin.ListParams{State: keyadmin.Locked, Limit: 10})
	require.NoError(t, err)
	require.Empty(t, none, "a key given up on is not left locked")
}

// Once its cause is fixed (here: Stripe's search, which had not shown the
// PaymentIntent when the completer looked, shows it now), a retry clears
// the mark and finishes the key with what Stripe made.
func TestAdmin_retryClearsTheMarkAndFinishesAKeyWhoseCauseIsFixed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.abandon(t, "after_stripe:payment_intent", "found-later") // Stripe made the PaymentIntent
	admin, _, _ := b.admin(t, "")
	// The mark the completer would have set had Stripe's search lagged.
	_, err := b.pool.Exec(ctx, "UPDATE idempotency_keys SET needs_attention_at = now() WHERE idempotency_key = 'found-later'")
	require.NoError(t, err)
	b.now = b.now.Add(25 * time.Hour)

	resp, err := admin.Retry(ctx, alice, "found-later")
	require.NoError(t, err)
	require.Equal(t, 201, resp.Status)
	story, err := admin.Show(ctx, alice, "found-later")
	require.NoError(t, err)
	require.Equal(t, "finished", story.RecoveryPoint)
	require.Nil(t, story.NeedsAttentionSince, "the mark is cleared")
	require.Equal(t, 201, story.Response.Status)
	require.JSONEq(t, string(resp.Body), string(story.Response.Body))
	require.Equal(t, 1, b.paymentIntents(t), "the PaymentIntent Stripe made before, not a second")

	_, err = admin.Retry(ctx, alice, "found-later")
	require.ErrorIs(t, err, keyadmin.ErrAlreadyFinished)
	_, err = admin.Show(ctx, "nobody@example.com", "found-later")
	require.ErrorIs(t, err, keyadmin.ErrUnknownUser)
	_, err = admin.Show(ctx, alice, "never-used")
	require.ErrorIs(t, err, keyadmin.ErrUnknownKey)
}

// Issue 41: a key whose phase failed with an error no retry can cure is
// listed as needing attention, with that error as its last error, and a
// retry before its cause is fixed fails it again, with the error.
func TestAdmin_aFailedKeyShowsItsErrorAndARetryFailsItAgainUntilItsCauseIsFixed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// The payment's insert meets a constraint of the service's own (a
	// trigger raising unique_violation, as a clashing insert would).
	_, err := b.pool.Exec(ctx, `
		CREATE FUNCTION refuse_payments() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'payment % clashes with another', NEW.id USING ERRCODE = 'unique_violation'; END $$;
		CREATE TRIGGER refuse_payments BEFORE INSERT ON payments FOR EACH ROW EXECUTE FUNCTION refuse_payments();`)
	require.NoError(t, err)
	admin, svc, _ := b.admin(t, "")
	req := payments.KeyedRequest{UserID: b.userID, Key: "clashing", Method: "POST", Path: "/v1/payments",
		Body: []byte(`{"amount":1500,"currency":"usd","payment_method":"pm_card_visa"}`)}
	params := payments.CreateParams{Amount: 1500, Currency: "usd", PaymentMethod: "pm_card_visa", Capture: true}
	_, err = svc.Create(ctx, req, params)
	require.ErrorIs(t, err, recovery.ErrFailed)

	listed, err := admin.List(ctx, keyadmin.ListParams{State: keyadmin.NeedsAttention, UserEmail: alice, Limit: 10})
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Equal(t, "clashing", listed[0].Key)
	require.NotNil(t, listed[0].LastError)
	require.Contains(t, *listed[0].LastError, "clashes with another")

	_, err = admin.Retry(ctx, alice, "clashing")
	require.ErrorIs(t, err, recovery.ErrFailed, "the cause is still there")
	story, err := admin.Show(ctx, alice, "clashing")
	require.NoError(t, err)
	require.NotNil(t, story.NeedsAttentionSince, "marked again")
	require.Contains(t, *story.LastError, "clashes with another")

	_, err = b.pool.Exec(ctx, "DROP TRIGGER refuse_payments ON payments")
	require.NoError(t, err)
	resp, err := admin.Retry(ctx, alice, "clashing")
	require.NoError(t, err)
	require.Equal(t, 201, resp.Status)
	require.Equal(t, 1, b.paymentIntents(t), "charged once, by the operator's retry")
}
