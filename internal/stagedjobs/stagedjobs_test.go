package stagedjobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/stagedjobs"
	"github.com/example/payments/internal/users"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

type testBundle struct {
	pool  *pgxpool.Pool
	river *river.Client[pgx.Tx] // insert-only
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := dbtest.NewPool(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	return &testBundle{pool: pool, river: client}
}

// stage writes n staged jobs straight into the table, each numbered in its
// args. They are receipts whose arguments name no payment, which the drain
// cannot write itself (TestEnqueuer_writesReceipts...) and so moves into
// River as they are: the fallback of Enqueuer.writeInline.
func (b *testBundle) stage(t *testing.T, n int) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), `INSERT INTO staged_jobs (kind, args)
		SELECT 'receipt_email', jsonb_build_object('n', g) FROM generate_series(1, $1) g`, n)
	require.NoError(t, err)
}

// riverCounts says, for each staged number, how many River jobs carry it.
func (b *testBundle) riverCounts(t *testing.T) map[int]int {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), "SELECT (args->>'n')::int FROM river_job WHERE kind = 'receipt_email'")
	require.NoError(t, err)
	counts := map[int]int{}
	for rows.Next() {
		var n int
		require.NoError(t, rows.Scan(&n))
		counts[n]++
	}
	require.NoError(t, rows.Err())
	return counts
}

func (b *testBundle) staged(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT count(*) FROM staged_jobs").Scan(&n))
	return n
}

// drainUntilEmpty drains as a running enqueuer would, woken again and again:
// rows a killed session still holds locked for a moment are skipped (SKIP
// LOCKED) by one pass and moved by a later one.
func (b *testBundle) drainUntilEmpty(t *testing.T, e *stagedjobs.Enqueuer) {
	t.Helper()
	require.Eventually(t, func() bool {
		require.NoError(t, e.DrainAll(context.Background()))
		return b.staged(t) == 0
	}, 10*time.Second, 20*time.Millisecond)
}

// crashOnce kills the drain transaction's database session the first time,
// between the insert into River and the commit: as if the process died there.
func crashOnce() func(context.Context, pgx.Tx) error {
	var once sync.Once
	return func(ctx context.Context, tx pgx.Tx) error {
		var crash bool
		once.Do(func() { crash = true })
		if !crash {
			return nil
		}
		_, err := tx.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
		if err == nil {
			err = errors.New("the session survived its own termination")
		}
		return err
	}
}

func TestEnqueuer_aCrashMidDrainLosesAndDuplicatesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.stage(t, 10)
	e := stagedjobs.NewEnqueuer(stagedjobs.EnqueuerConfig{Pool: b.pool, River: b.river, BatchSize: 4, BeforeCommit: crashOnce()})

	_, err := e.DrainOnce(context.Background())
	require.Error(t, err, "the drain died")
	require.Empty(t, b.riverCounts(t), "its River inserts died with it")
	require.Equal(t, 10, b.staged(t), "its staged jobs are all still there")

	b.drainUntilEmpty(t, e)
	counts := b.riverCounts(t)
	require.Len(t, counts, 10)
	for n, c := range counts {
		require.Equal(t, 1, c, "staged job %d", n)
	}
	require.Zero(t, b.staged(t))
}

func TestEnqueuer_twoEnqueuersAndACrashMoveEveryJobExactlyOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const jobs = 1000
	b.stage(t, jobs)
	reg, crashingReg := prometheus.NewRegistry(), prometheus.NewRegistry()
	crashing := stagedjobs.NewEnqueuer(stagedjobs.EnqueuerConfig{Pool: b.pool, River: b.river, BatchSize: 25, BeforeCommit: crashOnce(),
		Registry: crashingReg})
	steady := stagedjobs.NewEnqueuer(stagedjobs.EnqueuerConfig{Pool: b.pool, River: b.river, BatchSize: 25, Registry: reg})
	require.Equal(t, float64(jobs), testutil.ToFloat64(metric(t, reg, "payments_staged_jobs_backlog")))

	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for crashing.DrainAll(context.Background()) != nil { // restart after the crash, as a supervisor would
		}
	}()
	go func() { defer wg.Done(); require.NoError(t, steady.DrainAll(context.Background())) }()
	wg.Wait()
	b.drainUntilEmpty(t, steady)

	counts := b.riverCounts(t)
	require.Len(t, counts, jobs, "none lost")
	for n, c := range counts {
		require.Equal(t, 1, c, "staged job %d moved once", n)
	}
	require.Zero(t, b.staged(t))
	require.Zero(t, testutil.ToFloat64(metric(t, reg, "payments_staged_jobs_backlog")))
	// Each counts only the batches it committed (the crashed one not), and
	// either may have moved most of them: how the two share the work is the
	// scheduler's, so only their sum is known.
	drained := testutil.ToFloat64(metric(t, reg, "payments_staged_jobs_drained_total")) +
		testutil.ToFloat64(metric(t, crashingReg, "payments_staged_jobs_drained_total"))
	require.Equal(t, float64(jobs), drained, "every job counted once, by the enqueuer that moved it")
}

func TestEnqueuer_runningFindsJobsStagedAfterItStarted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := stagedjobs.NewEnqueuer(stagedjobs.EnqueuerConfig{Pool: b.pool, River: b.river}) // the default poll interval
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()
	time.Sleep(100 * time.Millisecond) // let it drain the (empty) table and wait

	tx, err := b.pool.Begin(context.Background())
	require.NoError(t, err)
	keyID := insertKey(t, tx)
	require.NoError(t, stagedjobs.StageTx(context.Background(), tx, keyID, stagedjobs.Job{
		Kind: stagedjobs.ReceiptEmail, Args: map[string]int{"n": 7},
	}))
	require.NoError(t, tx.Commit(context.Background()))

	staged := time.Now()
	require.Eventually(t, func() bool { return b.riverCounts(t)[7] == 1 }, 5*time.Second, 10*time.Millisecond)
	// Within about one poll interval (generous: this machine is shared).
	require.Less(t, time.Since(staged), 10*stagedjobs.DefaultPollInterval)
}

// recordingMailer counts what it is asked to send.
type recordingMailer struct {
	mu   sync.Mutex
	sent []stagedjobs.Message
}

func (m *recordingMailer) Send(_ context.Context, msg stagedjobs.Message) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent = append(m.sent, msg)
	return nil
}

func (m *recordingMailer) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sent)
}

func TestWorkers_aJobThatRunsTwiceSendsOneReceiptAndWritesOneEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	userID := b.seedPayment(t, "pay_receipt")

	receipt := stagedjobs.ReceiptArgs{UserID: userID, Payment: "pay_receipt", Amount: 2000, Currency: "usd", Reason: "payment"}
	event := stagedjobs.NewEventArgs(userID, "payment.succeeded", json.RawMessage(`{"id":"pay_receipt"}`))
	// The same job, twice: as River's at-least-once delivery may run it.
	_, err := b.river.InsertMany(ctx, []river.InsertManyParams{{Args: receipt}, {Args: receipt}, {Args: event}, {Args: event}})
	require.NoError(t, err)

	mailer := &recordingMailer{}
	workers := river.NewWorkers()
	stagedjobs.AddWorkers(workers, stagedjobs.WorkersConfig{Pool: b.pool, Mailer: mailer})
	client, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{
		Queues: map[string]river.QueueConfig{
			river.QueueDefault: {MaxWorkers: 4}, stagedjobs.ReceiptQueue: {MaxWorkers: 4},
		},
		Workers:           workers,
		FetchPollInterval: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	completed, cancel := client.Subscribe(river.EventKindJobCompleted)
	defer cancel()
	require.NoError(t, client.Start(ctx))
	defer func() { require.NoError(t, client.Stop(ctx)) }()
	for range 4 {
		select {
		case <-completed:
		case <-time.After(10 * time.Second):
			t.Fatal("jobs did not complete")
		}
	}

	require.Equal(t, 1, mailer.count(), "one receipt sent")
	require.Equal(t, "alice@example.com", mailer.sent[0].To)
	require.Contains(t, mailer.sent[0].Body, "20.00 USD")
	var events, sent int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM events WHERE id = $1", event.EventID).Scan(&events))
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM receipts WHERE sent_at IS NOT NULL").Scan(&sent))
	require.Equal(t, 1, events, "one event, under the id chosen at staging")
	require.Equal(t, 1, sent)
}

// seedPayment seeds the demo users and a succeeded payment of alice's, and
// returns her id.
func (b *testBundle) seedPayment(t *testing.T, paymentID string) int64 {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, users.SeedDemoUsers(ctx, b.pool))
	var userID int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT id FROM users WHERE email = 'alice@example.com'").Scan(&userID))
	_, err := b.pool.Exec(ctx, `INSERT INTO payments (id, user_id, amount, currency, status, amount_captured, payment_method)
		VALUES ($1, $2, 2000, 'usd', 'succeeded', 2000, 'pm_card_visa')`, paymentID, userID)
	require.NoError(t, err)
	return userID
}

func insertKey(t *testing.T, tx pgx.Tx) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	var id uuid.UUID
	require.NoError(t, tx.QueryRow(ctx, `
		WITH u AS (INSERT INTO users (email) VALUES ('stager@example.com') RETURNING id)
		INSERT INTO idempotency_keys (user_id, idempotency_key, flow, request_method, request_path, request_params,
			request_fingerprint)
		SELECT id, 'k', 'test', 'POST', '/x', '{}', sha256('x') FROM u
		RETURNING id`).Scan(&id))
	return id
}

func metric(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	return gatherer{reg, name}
}

// gatherer exposes one metric of a registry to testutil.ToFloat64.
type gatherer struct {
	reg  *prometheus.Registry
	name string
}

func (g gatherer) Describe(chan<- *prometheus.Desc) {}
func (g gatherer) Collect(ch chan<- prometheus.Metric) {
	families, _ := g.reg.Gather()
	for _, f := range families {
		if f.GetName() == g.name {
			for _, m := range f.GetMetric() {
				v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
				ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(g.name, "", nil, nil), prometheus.UntypedValue, v)
			}
		}
	}
}
