package stagedjobs_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/smtptest"
	"github.com/example/payments/internal/stagedjobs"
)

// stageReceipts seeds a payment of alice's per id and stages a receipt for
// each, the way a flow does, and returns alice's id.
func (b *testBundle) stageReceipts(t *testing.T, payments ...string) int64 {
	t.Helper()
	userID := b.seedPayment(t, payments[0])
	var jobs []stagedjobs.Job
	for i, p := range payments {
		if i > 0 {
			_, err := b.pool.Exec(context.Background(), `INSERT INTO payments (id, user_id, amount, currency, status, amount_captured, payment_method)
				VALUES ($1, $2, 2000, 'usd', 'succeeded', 2000, 'pm_card_visa')`, p, userID)
			require.NoError(t, err)
		}
		jobs = append(jobs, stagedjobs.Job{Kind: stagedjobs.ReceiptEmail,
			Args: stagedjobs.ReceiptArgs{UserID: userID, Payment: p, Amount: 2000, Currency: "usd", Reason: "payment"}})
	}
	b.stageTx(t, jobs...)
	return userID
}

// runSender runs s until the test ends, and returns a function that stops
// it and waits for Run to return.
func runSender(t *testing.T, s *stagedjobs.ReceiptSender) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(20 * time.Second):
				t.Error("the sender did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// messageIDs counts the messages a recordingMailer was asked to send, by
// Message-ID.
func (m *recordingMailer) messageIDs() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := map[string]int{}
	for _, msg := range m.sent {
		ids[msg.MessageID]++
	}
	return ids
}

// The drain writes a receipt's row itself, due at once, in the transaction
// that deletes its staged job: no River job per receipt. The sender then
// sends it once and records it.
func TestEnqueuer_writesReceiptsDueAtOnceForTheSender(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.stageReceipts(t, "pay_r1", "pay_r2")
	b.stageTx(t, stagedjobs.Job{Kind: stagedjobs.ReceiptEmail, Args: stagedjobs.ReceiptArgs{UserID: alice, Payment: "pay_r1",
		Amount: 500, Currency: "usd", Reason: "refund", Refund: "re_1"}})
	e := stagedjobs.NewEnqueuer(stagedjobs.EnqueuerConfig{Pool: b.pool, River: b.river})
	require.NoError(t, e.DrainAll(context.Background()))

	require.Empty(t, b.riverJobs(t), "no River job for a receipt")
	require.Zero(t, b.staged(t))
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM receipts WHERE next_attempt_at <= now() AND sent_at IS NULL
		AND recipient = 'alice@example.com' AND amount = 2000 AND currency = 'usd' AND kind = 'payment'`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM receipts WHERE payment_id = 'pay_r1' AND kind = 'refund:re_1' AND amount = 500`))

	mailer := &recordingMailer{}
	runSender(t, stagedjobs.NewReceiptSender(stagedjobs.SenderConfig{Pool: b.pool, Mailer: mailer}))
	require.Eventually(t, func() bool {
		return b.count(t, "SELECT count(*) FROM receipts WHERE sent_at IS NOT NULL AND next_attempt_at IS NULL") == 3
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, map[string]int{"receipt.payment.pay_r1": 1, "receipt.payment.pay_r2": 1, "receipt.refund.re_1.pay_r1": 1},
		mailer.messageIDs())
	bodies := map[string]string{}
	for _, m := range mailer.sent {
		require.Equal(t, "alice@example.com", m.To)
		bodies[m.MessageID] = m.Body
	}
	require.Contains(t, bodies["receipt.payment.pay_r2"], "Payment of 20.00 USD for payment pay_r2.")
	require.Contains(t, bodies["receipt.refund.re_1.pay_r1"], "Refund of 5.00 USD for payment pay_r1.")
}

// Two senders side by side, and a crash of the drain: every receipt is sent
// exactly once.
func TestReceiptSender_twoSendersSendEveryReceiptOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var payments []string
	for i := range 120 {
		payments = append(payments, fmt.Sprintf("pay_many_%03d", i))
	}
	b.stageReceipts(t, payments...)
	e := stagedjobs.NewEnqueuer(stagedjobs.EnqueuerConfig{Pool: b.pool, River: b.river, BatchSize: 25, BeforeCommit: crashOnce()})
	_, err := e.DrainOnce(context.Background())
	require.Error(t, err, "the drain died")
	require.Zero(t, b.count(t, "SELECT count(*) FROM receipts"), "its receipts died with it")
	b.drainUntilEmpty(t, e)
	require.Equal(t, len(payments), b.count(t, "SELECT count(*) FROM receipts"))
	require.Empty(t, b.riverJobs(t))

	mailer := &recordingMailer{}
	for range 2 {
		runSender(t, stagedjobs.NewReceiptSender(stagedjobs.SenderConfig{Pool: b.pool, Mailer: mailer, Concurrency: 7}))
	}
	require.Eventually(t, func() bool {
		return b.count(t, "SELECT count(*) FROM receipts WHERE sent_at IS NOT NULL") == len(payments)
	}, 20*time.Second, 20*time.Millisecond)
	ids := mailer.messageIDs()
	require.Len(t, ids, len(payments))
	for id, n := range ids {
		require.Equal(t, 1, n, id)
	}
}

// A sender that died mid-send (its claim made, no outcome recorded) leaves
// the receipt reserved until its lease lapses: no other sender sends it
// meanwhile, and one does after.
func TestReceiptSender_aReceiptWhoseSenderDiedIsSentWhenItsLeaseLapses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.stageReceipts(t, "pay_orphan")
	require.NoError(t, stagedjobs.NewEnqueuer(stagedjobs.EnqueuerConfig{Pool: b.pool, River: b.river}).DrainAll(context.Background()))
	// The dead sender's claim, with a lease of a second and a half.
	dead, err := dbsqlc.New().ClaimDueReceipts(context.Background(), b.pool, dbsqlc.ClaimDueReceiptsParams{LeaseMs: 1500, BatchSize: 10})
	require.NoError(t, err)
	require.Len(t, dead, 1)
	claimed := time.Now()

	mailer := &recordingMailer{}
	runSender(t, stagedjobs.NewReceiptSender(stagedjobs.SenderConfig{Pool: b.pool, Mailer: mailer, PollInterval: 50 * time.Millisecond}))
	require.Eventually(t, func() bool { return b.receiptSent(t, "pay_orphan") }, 10*time.Second, 20*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(claimed), 1400*time.Millisecond, "not before the lease lapsed")
	require.Equal(t, 1, mailer.count())
	require.Equal(t, 2, b.count(t, "SELECT attempts FROM receipts WHERE payment_id = 'pay_orphan'"))
}

// The claim leases a receipt in sending_until, a column no index names, and
// leaves next_attempt_at (which receipts_due_idx names) as it was, so it is
// a HOT update (migration 000027); the lease alone keeps other claims off
// the receipt until it lapses.
func TestClaimDueReceipts_aClaimIsAHOTUpdateAndItsLeaseHoldsUntilItLapses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.stageReceipts(t, "pay_lease")
	require.NoError(t, stagedjobs.NewEnqueuer(stagedjobs.EnqueuerConfig{Pool: b.pool, River: b.river}).DrainAll(context.Background()))
	ctx := context.Background()
	var due time.Time
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT next_attempt_at FROM receipts WHERE payment_id = 'pay_lease'").Scan(&due))

	const lease = 1500 * time.Millisecond
	claim := func(conn dbsqlc.DBTX) []dbsqlc.ClaimDueReceiptsRow {
		t.Helper()
		rows, err := dbsqlc.New().ClaimDueReceipts(ctx, conn, dbsqlc.ClaimDueReceiptsParams{LeaseMs: lease.Milliseconds(), BatchSize: 10})
		require.NoError(t, err)
		return rows
	}
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	first := claim(tx)
	require.Len(t, first, 1)
	claimedAt := time.Now()
	updates, hot := dbtest.UpdatesInTx(t, tx, "receipts")
	require.Equal(t, [2]int64{1, 1}, [2]int64{updates, hot}, "the claim is one HOT update")
	require.NoError(t, tx.Commit(ctx))

	var next time.Time
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT next_attempt_at FROM receipts WHERE payment_id = 'pay_lease'").Scan(&next))
	require.True(t, next.Equal(due), "the claim leaves next_attempt_at as it was")
	require.Empty(t, claim(b.pool), "not claimed again while its lease holds")

	var again []dbsqlc.ClaimDueReceiptsRow
	require.Eventually(t, func() bool { again = claim(b.pool); return len(again) == 1 }, 10*time.Second, 50*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(claimedAt), lease-100*time.Millisecond, "claimed again once the lease lapsed")
	require.Equal(t, int32(2), again[0].Attempts)
	require.True(t, again[0].SendingUntil.Time.After(first[0].SendingUntil.Time), "under a lease of its own")
}

// Shutdown while the mail server has a receipt: the send is left to finish
// (here the server accepts it after Run's context ended), and Run returns
// only once it is recorded as sent.
func TestReceiptSender_shutdownRecordsASendThatEndsAfterIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.stageReceipts(t, "pay_slow")
	require.NoError(t, stagedjobs.NewEnqueuer(stagedjobs.EnqueuerConfig{Pool: b.pool, River: b.river}).DrainAll(context.Background()))
	srv := startSMTP(t, smtptest.Config{Behaviour: smtptest.Behaviour{Mode: smtptest.Accept, Delay: 700 * time.Millisecond}})

	stop := runSender(t, stagedjobs.NewReceiptSender(stagedjobs.SenderConfig{Pool: b.pool, Mailer: smtpMailer(t, srv),
		ShutdownTimeout: 10 * time.Second}))
	require.Eventually(t, func() bool { return srv.Connections() == 1 }, 5*time.Second, 10*time.Millisecond)
	stop()
	require.Len(t, srv.Accepted(), 1)
	require.True(t, b.receiptSent(t, "pay_slow"), "recorded before Run returned")
}

// A send still running at the shutdown timeout is cancelled, and its
// reservation given back before Run returns: due again, not sent.
func TestReceiptSender_shutdownCancelsASendPastItsTimeoutAndGivesItBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.stageReceipts(t, "pay_hung")
	require.NoError(t, stagedjobs.NewEnqueuer(stagedjobs.EnqueuerConfig{Pool: b.pool, River: b.river}).DrainAll(context.Background()))
	srv := startSMTP(t, smtptest.Config{Behaviour: smtptest.Behaviour{Mode: smtptest.HangOnData}})

	stop := runSender(t, stagedjobs.NewReceiptSender(stagedjobs.SenderConfig{Pool: b.pool, Mailer: smtpMailer(t, srv),
		ShutdownTimeout: 300 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}))
	require.Eventually(t, func() bool { return srv.Connections() == 1 }, 5*time.Second, 10*time.Millisecond)
	began := time.Now()
	stop()
	require.Less(t, time.Since(began), 5*time.Second)
	require.Empty(t, srv.Accepted())
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM receipts WHERE payment_id = 'pay_hung'
		AND sent_at IS NULL AND sending_until IS NULL AND next_attempt_at IS NOT NULL AND last_error <> ''`))
}

// A refused send is due again after the retry delay and then sent; a
// receipt no attempt can send is given up at once; a receipt that fails
// MaxAttempts times is given up.
func TestReceiptSender_retriesARefusedSendAndGivesUpAnUnsendableOne(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.stageReceipts(t, "pay_refused_once", "pay_bad", "pay_always")
	require.NoError(t, stagedjobs.NewEnqueuer(stagedjobs.EnqueuerConfig{Pool: b.pool, River: b.river}).DrainAll(context.Background()))
	mailer := &scriptedMailer{fail: map[string]int{"receipt.payment.pay_refused_once": 1, "receipt.payment.pay_always": 1000},
		bad: "receipt.payment.pay_bad"}
	var delays atomic.Int32
	runSender(t, stagedjobs.NewReceiptSender(stagedjobs.SenderConfig{Pool: b.pool, Mailer: mailer, MaxAttempts: 3,
		PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		RetryDelay: func(int) time.Duration { delays.Add(1); return 100 * time.Millisecond }}))

	require.Eventually(t, func() bool {
		return b.count(t, "SELECT count(*) FROM receipts WHERE next_attempt_at IS NULL") == 3
	}, 10*time.Second, 20*time.Millisecond)
	require.True(t, b.receiptSent(t, "pay_refused_once"))
	require.Equal(t, 2, b.count(t, "SELECT attempts FROM receipts WHERE payment_id = 'pay_refused_once'"))
	require.False(t, b.receiptSent(t, "pay_bad"))
	require.Equal(t, 1, b.count(t, "SELECT attempts FROM receipts WHERE payment_id = 'pay_bad'"), "not retried")
	require.False(t, b.receiptSent(t, "pay_always"))
	require.Equal(t, 3, b.count(t, "SELECT attempts FROM receipts WHERE payment_id = 'pay_always'"), "MaxAttempts")
	require.Equal(t, map[string]int{"receipt.payment.pay_refused_once": 2, "receipt.payment.pay_bad": 1, "receipt.payment.pay_always": 3},
		mailer.tries())
	require.Equal(t, int32(3), delays.Load(), "one delay per retry")
}

// Wake makes a sender that polls rarely claim at once: the drain wakes it
// after its commit.
func TestReceiptSender_theDrainWakesItToClaimAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mailer := &recordingMailer{}
	s := stagedjobs.NewReceiptSender(stagedjobs.SenderConfig{Pool: b.pool, Mailer: mailer, PollInterval: time.Minute})
	var woken atomic.Int32
	e := stagedjobs.NewEnqueuer(stagedjobs.EnqueuerConfig{Pool: b.pool, River: b.river,
		OnWritten: func() { woken.Add(1); s.Wake() }})
	b.stageReceipts(t, "pay_first")
	require.NoError(t, e.DrainAll(context.Background()))
	runSender(t, s)
	// Its first claim took the first receipt; its next poll is a minute away.
	require.Eventually(t, func() bool { return b.receiptSent(t, "pay_first") }, 5*time.Second, 10*time.Millisecond)

	_, err := b.pool.Exec(context.Background(), `INSERT INTO payments (id, user_id, amount, currency, status, amount_captured, payment_method)
		SELECT 'pay_woken', user_id, 2000, 'usd', 'succeeded', 2000, 'pm_card_visa' FROM payments WHERE id = 'pay_first'`)
	require.NoError(t, err)
	b.stageTx(t, stagedjobs.Job{Kind: stagedjobs.ReceiptEmail, Args: stagedjobs.ReceiptArgs{
		UserID: int64(b.count(t, "SELECT user_id FROM payments WHERE id = 'pay_first'")), Payment: "pay_woken",
		Amount: 500, Currency: "usd", Reason: "payment"}})
	require.NoError(t, e.DrainAll(context.Background()))
	require.Equal(t, int32(2), woken.Load(), "each drain that wrote a receipt woke the sender")
	require.Eventually(t, func() bool { return b.receiptSent(t, "pay_woken") }, 5*time.Second, 10*time.Millisecond,
		"sent long before the sender's next poll, a minute away")
	require.Equal(t, 2, mailer.count())
}

// scriptedMailer fails some messages a number of times, refuses one as
// unsendable, and accepts the rest.
type scriptedMailer struct {
	mu    sync.Mutex
	fail  map[string]int
	bad   string
	tried map[string]int
}

func (m *scriptedMailer) Send(_ context.Context, msg stagedjobs.Message) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tried == nil {
		m.tried = map[string]int{}
	}
	m.tried[msg.MessageID]++
	if msg.MessageID == m.bad {
		return fmt.Errorf("no such address: %w", stagedjobs.ErrBadMessage)
	}
	if m.fail[msg.MessageID] > 0 {
		m.fail[msg.MessageID]--
		return fmt.Errorf("451 try again later")
	}
	return nil
}

func (m *scriptedMailer) tries() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for k, v := range m.tried {
		out[k] = v
	}
	return out
}

// A sender given no mailer logs its receipts, as the service does without
// SMTP_URL (NewMailer's LogMailer), rather than crashing its process.
func TestReceiptSender_withoutAMailerLogsTheReceipt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.stageReceipts(t, "pay_logged")
	require.NoError(t, stagedjobs.NewEnqueuer(stagedjobs.EnqueuerConfig{Pool: b.pool, River: b.river}).DrainAll(context.Background()))
	runSender(t, stagedjobs.NewReceiptSender(stagedjobs.SenderConfig{Pool: b.pool}))
	require.Eventually(t, func() bool { return b.receiptSent(t, "pay_logged") }, 10*time.Second, 20*time.Millisecond)
}

// gatedMailer accepts each message once its gate is opened.
type gatedMailer struct {
	recordingMailer
	entered chan struct{}
	gate    chan struct{}
}

func (m *gatedMailer) Send(ctx context.Context, msg stagedjobs.Message) error {
	m.entered <- struct{}{}
	<-m.gate
	return m.recordingMailer.Send(ctx, msg)
}

// A receipt the mail server accepted while the database could not take
// writes (a failover: here, a primary that turned read-only, 25006) is
// recorded once the database takes them again, within its lease, not left
// leased and then sent a second time when the lease lapses.
func TestReceiptSender_recordsAnAcceptedReceiptOnceTheDatabaseIsBack(t *testing.T) {
	t.Parallel()
	cluster := dbtest.NewCluster(t)
	pool, err := db.Open(context.Background(), cluster.URL(), db.PoolConfig{MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	b := &testBundle{pool: pool, river: client}
	b.stageReceipts(t, "pay_outage")
	require.NoError(t, stagedjobs.NewEnqueuer(stagedjobs.EnqueuerConfig{Pool: b.pool, River: b.river}).DrainAll(context.Background()))

	mailer := &gatedMailer{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	runSender(t, stagedjobs.NewReceiptSender(stagedjobs.SenderConfig{Pool: b.pool, Mailer: mailer, PollInterval: 50 * time.Millisecond}))
	<-mailer.entered // claimed and sending
	cluster.Exec("ALTER SYSTEM SET default_transaction_read_only = on")
	cluster.Exec("SELECT pg_reload_conf()")
	waitUntilEveryConnectionSees(t, pool, "default_transaction_read_only", "on")
	close(mailer.gate) // the mail server accepts it; its record fails
	time.Sleep(500 * time.Millisecond)
	require.False(t, b.receiptSent(t, "pay_outage"), "recorded while the database was read-only")

	cluster.Exec("ALTER SYSTEM RESET default_transaction_read_only")
	cluster.Exec("SELECT pg_reload_conf()")
	back := time.Now()
	require.Eventually(t, func() bool { return b.receiptSent(t, "pay_outage") }, 10*time.Second, 20*time.Millisecond)
	t.Logf("recorded %v after the database took writes again", time.Since(back).Round(time.Millisecond))
	require.Less(t, time.Since(back), 5*time.Second, "recorded within the retries' second, not at the lease's end")
	require.Equal(t, 1, mailer.count(), "sent once")
}

// waitUntilEveryConnectionSees waits until each of pool's connections shows
// setting's value. pg_reload_conf only signals the postmaster, which signals
// each backend in turn; a backend applies the new file before its next
// command only once that signal has reached it, so a write sent at once can
// still pass (CI saw it: "recorded while the database was read-only").
func waitUntilEveryConnectionSees(t *testing.T, pool *pgxpool.Pool, setting, value string) {
	t.Helper()
	require.Eventually(t, func() bool {
		conns := pool.AcquireAllIdle(context.Background())
		seen := 0
		for _, c := range conns {
			var v string
			if err := c.QueryRow(context.Background(), "SELECT current_setting($1)", setting).Scan(&v); err == nil && v == value {
				seen++
			}
			c.Release()
		}
		return seen == len(conns) && int32(seen) == pool.Stat().TotalConns()
	}, 10*time.Second, 10*time.Millisecond, "every connection sees %s = %s", setting, value)
}
