package payments_test

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/stripesim"
	"github.com/example/payments/internal/users"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

type testBundle struct {
	pool   *pgxpool.Pool
	sim    *stripesim.Simulator
	stripe *stripeclient.Client
	now    time.Time
	userID int64
}

// setup gives a database with the demo users, the simulator over HTTP, and
// a clock the test moves by hand.
func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := dbtest.NewPool(t)
	ctx := context.Background()
	require.NoError(t, users.SeedDemoUsers(ctx, pool))
	u, err := users.Authenticate(ctx, pool, users.DemoUsers[0].APIKey)
	require.NoError(t, err)
	sim := stripesim.New(stripesim.Config{})
	server := httptest.NewServer(sim.Handler())
	t.Cleanup(func() { server.Close(); sim.Close() })
	stripe, err := stripeclient.New(stripeclient.Config{SecretKey: "sk_test_completer", APIBase: server.URL})
	require.NoError(t, err)
	return &testBundle{pool: pool, sim: sim, stripe: stripe, userID: u.ID,
		// Starts at the simulator's (real) time and only moves forward: a
		// reconcile lists the PaymentIntents Stripe made since the key was
		// created, by Stripe's clock, which must not be behind the test's.
		now: time.Now().UTC().Truncate(time.Second)}
}

// service builds the flows on an engine with the bundle's clock and the given failpoints.
func (b *testBundle) service(t *testing.T, failpoints string) (*payments.Service, *recovery.Engine) {
	t.Helper()
	fp, err := failpoint.Parse(failpoints)
	require.NoError(t, err)
	return newService(t, recovery.Config{
		Pool: b.pool, Failpoints: fp, LockTimeout: time.Minute, Now: func() time.Time { return b.now },
	}, b.stripe)
}

func (b *testBundle) completer(svc *payments.Service, engine *recovery.Engine, reg ...prometheus.Registerer) *recovery.Completer {
	cfg := recovery.CompleterConfig{Engine: engine, Grace: 30 * time.Second}
	if len(reg) > 0 {
		cfg.Registry = reg[0]
	}
	return recovery.NewCompleter(cfg)
}

// abandon runs a create request that stops at the failpoint, as a client
// that gave up would leave it.
func (b *testBundle) abandon(t *testing.T, where string) {
	t.Helper()
	b.abandonKey(t, where, "abandoned")
}

// abandonKey is abandon with the Idempotency-Key key.
func (b *testBundle) abandonKey(t *testing.T, where, key string) {
	t.Helper()
	svc, _ := b.service(t, where+"=error")
	body := []byte(`{"amount":1500,"currency":"usd","payment_method":"pm_card_visa"}`)
	_, err := svc.Create(context.Background(), payments.KeyedRequest{
		UserID: b.userID, Key: key, Method: "POST", Path: "/v1/payments", Body: body,
	}, payments.CreateParams{Amount: 1500, Currency: "usd", PaymentMethod: "pm_card_visa", Capture: true})
	require.ErrorIs(t, err, failpoint.ErrInjected)
}

func (b *testBundle) keyState(t *testing.T) (point string, code *int32, attention bool) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT recovery_point, response_code, needs_attention_at IS NOT NULL FROM idempotency_keys WHERE idempotency_key = 'abandoned'").
		Scan(&point, &code, &attention))
	return point, code, attention
}

func (b *testBundle) paymentIntentCreations() int {
	n := 0
	for _, r := range b.sim.Requests() {
		if r.Method == "POST" && r.Path == "/v1/payment_intents" {
			n++
		}
	}
	return n
}

func TestCompleter_finishesARequestNobodyRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.abandon(t, "after_commit:payment_created")
	svc, engine := b.service(t, "")
	reg := prometheus.NewRegistry()
	c := b.completer(svc, engine, reg)
	ctx := context.Background()

	run, err := c.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, run.Claimed, "within the grace period the client may still retry")

	b.now = b.now.Add(time.Minute)
	run, err = c.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, recovery.CompleterRun{Claimed: 1, Finished: 1}, run)
	point, code, _ := b.keyState(t)
	require.Equal(t, "finished", point)
	require.EqualValues(t, 201, *code)
	require.Equal(t, 1, b.paymentIntentCreations())

	var status string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT status FROM payments").Scan(&status))
	require.Equal(t, "succeeded", status)

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP payments_completer_keys_finished_total Abandoned requests the completer finished.
# TYPE payments_completer_keys_finished_total counter
payments_completer_keys_finished_total 1
# HELP payments_completer_runs_total Completer runs.
# TYPE payments_completer_runs_total counter
payments_completer_runs_total 2
`), "payments_completer_runs_total", "payments_completer_keys_finished_total"))
}

func TestCompleter_backsOffAKeyThatKeepsFailing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.abandon(t, "after_commit:payment_created")
	svc, engine := b.service(t, "")
	c := b.completer(svc, engine)
	ctx := context.Background()
	require.NoError(t, b.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/payment_intents", Method: "POST", Kind: stripesim.FaultError500, Count: 2}))

	b.now = b.now.Add(time.Minute)
	run, err := c.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, recovery.CompleterRun{Claimed: 1, Failed: 1}, run)

	b.now = b.now.Add(45 * time.Second) // past the grace, inside grace*2
	run, err = c.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, run.Claimed, "the second try waits twice the grace")

	b.now = b.now.Add(30 * time.Second)
	run, err = c.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, run.Failed)

	b.now = b.now.Add(5 * time.Minute)
	run, err = c.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, run.Finished)
	require.Equal(t, 1, countObjects(t, b.sim, "payment_intent"))
}

func TestCompleter_pastStripesWindowReconcilesInsteadOfCharging(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Stripe charged, and the process died before recording it.
	b.abandon(t, "after_stripe:payment_intent")
	require.Equal(t, 1, b.paymentIntentCreations())
	svc, engine := b.service(t, "")

	b.now = b.now.Add(25 * time.Hour) // Stripe may have forgotten the child key by now
	run, err := b.completer(svc, engine).RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, recovery.CompleterRun{Claimed: 1, Finished: 1}, run)
	require.Equal(t, 1, b.paymentIntentCreations(), "found by its metadata, not created again")

	var pi string
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT stripe_payment_intent FROM payments").Scan(&pi))
	objects, err := b.sim.Objects("payment_intent")
	require.NoError(t, err)
	require.Len(t, objects, 1)
	var obj struct{ ID string }
	require.NoError(t, json.Unmarshal(objects[0], &obj))
	require.Equal(t, obj.ID, pi, "the payment records the PaymentIntent Stripe made")
}

func TestCompleter_pastStripesWindowWithNothingAtStripeNeedsAttention(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The payment row committed; Stripe was never called.
	b.abandon(t, "after_commit:payment_created")
	svc, engine := b.service(t, "")

	b.now = b.now.Add(25 * time.Hour)
	c := b.completer(svc, engine)
	run, err := c.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, recovery.CompleterRun{Claimed: 1, NeedsAttention: 1}, run)
	point, code, attention := b.keyState(t)
	require.Equal(t, "payment_created", point)
	require.Nil(t, code)
	require.True(t, attention)
	require.Zero(t, b.paymentIntentCreations(), "never charged blindly")

	b.now = b.now.Add(time.Hour)
	run, err = c.RunOnce(context.Background())
	require.NoError(t, err)
	require.Zero(t, run.Claimed, "left for a person")
}

func countObjects(t *testing.T, sim *stripesim.Simulator, typ string) int {
	t.Helper()
	objects, err := sim.Objects(typ)
	require.NoError(t, err)
	return len(objects)
}

// Issue 14, item 7: a run claimed a whole batch at once and worked it key by
// key; keys it had no time for were counted as failed attempts (their
// backoff doubled) and sat locked, answering their clients 409. A run now
// claims a key only when it is about to work on it, and stops claiming when
// its time is spent: every key it counts, it tried; the others are left
// untouched, claimable at once.
func TestCompleter_aRunFitsItsTimeAndCountsOnlyTheKeysItTried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const abandoned = 8
	for i := range abandoned {
		b.abandonKey(t, "after_commit:payment_created", fmt.Sprintf("abandoned-%d", i))
	}
	_, engine := b.service(t, "") // registers the flows with engine
	c := recovery.NewCompleter(recovery.CompleterConfig{
		Engine: engine, Grace: 30 * time.Second, RunBudget: time.Second, Concurrency: 2,
	})
	// Stripe takes 600 ms per PaymentIntent: eight keys need 4.8 s of calls.
	require.NoError(t, b.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/payment_intents", Method: "POST",
		Kind: stripesim.FaultDelay, DelayMS: 600, Count: 100}))
	b.now = b.now.Add(time.Minute)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // the job's timeout
	defer cancel()
	start := time.Now()
	run, err := c.RunOnce(ctx)
	require.NoError(t, err)
	require.Less(t, time.Since(start), 2500*time.Millisecond, "the run ends within its budget and its last keys' calls")
	require.Zero(t, run.Failed, "no key is counted as failed for want of time")
	require.Equal(t, run.Claimed, run.Finished)
	require.GreaterOrEqual(t, run.Finished, 2)
	require.Less(t, run.Claimed, abandoned)

	var tried, untouched, locked int
	require.NoError(t, b.pool.QueryRow(context.Background(), `
		SELECT count(*) FILTER (WHERE completer_attempts > 0),
		       count(*) FILTER (WHERE completer_attempts = 0 AND recovery_point <> 'finished'),
		       count(*) FILTER (WHERE locked_at IS NOT NULL)
		FROM idempotency_keys`).Scan(&tried, &untouched, &locked))
	require.Equal(t, run.Claimed, tried, "only the keys it worked on count as tried")
	require.Equal(t, abandoned-run.Claimed, untouched)
	require.Zero(t, locked, "no key sits claimed: the untried ones are claimable at once")

	b.sim.ClearFaults()
	run, err = c.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, recovery.CompleterRun{Claimed: abandoned - tried, Finished: abandoned - tried}, run,
		"the next run takes the rest at once, with no backoff")
}

// newService is the service with its flows on an engine of cfg, built.
func newService(t testing.TB, cfg recovery.Config, stripe *stripeclient.Client) (*payments.Service, *recovery.Engine) {
	t.Helper()
	flows := recovery.NewBuilder(cfg)
	svc := payments.NewService(cfg.Pool, flows, stripe)
	engine, err := flows.Build()
	require.NoError(t, err)
	return svc, engine
}
