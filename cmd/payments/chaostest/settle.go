package chaostest

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// backlog is the work still under way after the clients finished.
type backlog struct {
	unfinishedKeys int // idempotency keys not finished (the completer's work)
	stagedJobs     int // jobs not yet moved into River (the enqueuer's)
	pendingJobs    int // River jobs of the staged kinds not yet finalized (the workers'), and receipts not yet sent
	pendingRefunds int // refunds Stripe has not decided yet (it does within seconds)
	authorised     int // payments still authorised: each is captured, canceled or expires (and then changes)
	deliveries     int // webhook deliveries to merchants still pending
	webhooks       int // 1 while the simulator may still have events to deliver
	lateRequests   int // requests a late_500 answered that the simulator has not executed yet
	// unreconciled is 1 until the reconciler finished a reading of
	// Stripe's event log after Stripe's last later change (see
	// reconcileBound): with webhooks lost, only its reading brings the
	// records to Stripe's state.
	unreconciled int
}

func (b backlog) empty() bool { return b == backlog{} }

func (b backlog) size() int {
	return b.unfinishedKeys + b.stagedJobs + b.pendingJobs + b.pendingRefunds + b.authorised + b.deliveries + b.webhooks +
		b.unreconciled + b.lateRequests
}

func (b backlog) String() string {
	return fmt.Sprintf("%d unfinished keys, %d staged jobs, %d River jobs not finalized or receipts unsent, %d refunds pending, "+
		"%d payments still authorised, %d deliveries to merchants pending, webhooks drained: %v, event log not read since: %d, "+
		"%d late 500s Stripe has still to execute",
		b.unfinishedKeys, b.stagedJobs, b.pendingJobs, b.pendingRefunds, b.authorised, b.deliveries, b.webhooks == 0, b.unreconciled,
		b.lateRequests)
}

const backlogQuery = `SELECT
	(SELECT count(*) FROM idempotency_keys WHERE recovery_point <> 'finished' AND needs_attention_at IS NULL),
	(SELECT count(*) FROM staged_jobs),
	(SELECT count(*) FROM river_job WHERE kind IN ('merchant_event', 'receipt_email', 'webhook_delivery')
		AND state NOT IN ('completed', 'discarded', 'cancelled'))
		+ (SELECT count(*) FROM receipts WHERE next_attempt_at IS NOT NULL),
	(SELECT count(*) FROM refunds WHERE status = 'pending'),
	(SELECT count(*) FROM payments WHERE status = 'requires_capture'),
	(SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'),
	(SELECT CASE WHEN coalesce(c.read_at, 'epoch') < $1::timestamptz + $2::interval THEN 1 ELSE 0 END
		FROM stripe_event_cursor c WHERE c.name = 'events')`

// reconcileBound is how long after the clients finished the reconciler's
// reading is sure to show Stripe's final state: Stripe's later outcomes
// (refunds that settle or fail) come 2 s after the request, and the last
// authorisation left to expire lapses within the simulator's lifetime,
// which settle waits out anyway (authorised). A complete reading of the
// event log that ended this long after the clients finished listed them.
const reconcileBound = "6 seconds"

// retryReceiptsNow makes the receipts waiting for a retry (the mail server
// misbehaved) due at once, as an operator would once the server is well
// again (the back-off, attempt⁴ seconds, would outlast the run): the
// mail server is healthy while the run settles. The receipt sender's
// (stagedjobs.ReceiptSender) that no attempt holds, and River's receipt
// jobs (an earlier version's, or the drain's fallback).
const retryReceiptsNow = `WITH sender AS (
	UPDATE receipts SET next_attempt_at = now()
	WHERE next_attempt_at > now() AND sent_at IS NULL AND (sending_until IS NULL OR sending_until <= now()))
UPDATE river_job SET scheduled_at = now()
	WHERE kind = 'receipt_email' AND state = 'retryable' AND scheduled_at > now()`

// webhookQuiet is how long the relay must have been idle after a failed
// delivery before the simulator has surely given up on it (after about 13 s
// of failures).
const webhookQuiet = 15 * time.Second

// settle waits until the background work is done: every key finished (or
// marked for attention), every staged job moved into River and run, every
// authorisation captured, canceled or expired (an expiry writes an event,
// and so deliveries: the world must stand still before it is read), every
// delivery to a merchant made, and
// every webhook delivered or abandoned, twice in a row. A big backlog may
// take long to drain, so the wait fails only when the backlog has not
// shrunk for stall, or after 20 stalls in all. It returns how long the wait
// took, or the backlog left.
func settle(ctx context.Context, pool *pgxpool.Pool, relay *webhookRelay, simURL string, stall time.Duration,
	logf func(string, ...any)) (time.Duration, error) {
	start := time.Now()
	var since time.Time // the database's clock, as the event cursor's read_at
	if err := pool.QueryRow(ctx, "SELECT now()").Scan(&since); err != nil {
		return 0, fmt.Errorf("chaos: reading the database's clock: %w", err)
	}
	lastLog, lastProgress := start, start
	best := -1
	calm := 0
	for {
		if _, err := pool.Exec(ctx, retryReceiptsNow); err != nil {
			return time.Since(start), fmt.Errorf("chaos: retrying receipts: %w", err)
		}
		b, err := measureBacklog(ctx, pool, relay, simURL, since)
		if err != nil {
			return time.Since(start), err
		}
		if b.lateRequests > 0 {
			// Stripe has work of a late 500 still to do: the reading of
			// its event log that counts is one after that work, so the
			// clock the reading is held to moves on while it waits.
			if err := pool.QueryRow(ctx, "SELECT now()").Scan(&since); err != nil {
				return time.Since(start), fmt.Errorf("chaos: reading the database's clock: %w", err)
			}
		}
		if b.empty() {
			calm++
		} else {
			calm = 0
		}
		if calm >= 2 {
			return time.Since(start), nil
		}
		if size := b.size(); best < 0 || size < best {
			best, lastProgress = size, time.Now()
		}
		switch {
		case time.Since(lastProgress) > stall:
			return time.Since(start), fmt.Errorf("did not settle: no progress for %v: %s", stall, b)
		case time.Since(start) > 20*stall:
			return time.Since(start), fmt.Errorf("did not settle within %v: %s", 20*stall, b)
		}
		if time.Since(lastLog) >= 10*time.Second {
			logf("chaos: settling: %s", b)
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func measureBacklog(ctx context.Context, pool *pgxpool.Pool, relay *webhookRelay, simURL string, since time.Time) (backlog, error) {
	var b backlog
	if err := pool.QueryRow(ctx, backlogQuery, since, reconcileBound).Scan(&b.unfinishedKeys, &b.stagedJobs, &b.pendingJobs,
		&b.pendingRefunds, &b.authorised, &b.deliveries, &b.unreconciled); err != nil {
		return b, fmt.Errorf("chaos: measuring the backlog: %w", err)
	}
	if !relay.drained() {
		b.webhooks = 1
	}
	// A late_500 whose work Stripe has not done yet will still make its
	// PaymentIntent or refund (a second one, when it lands past the
	// service's grace), and its events.
	var late struct {
		LateRequests int `json:"late_requests"`
	}
	if err := simGet(ctx, simURL+"/_sim/late_requests", &late); err != nil {
		return b, err
	}
	b.lateRequests = late.LateRequests
	return b, nil
}
