-- name: LockStripeEventCursor :many
-- The reading of Stripe's event log, taken for one pass: the cursor row
-- under a row lock, SKIP LOCKED, so that a second reader (another
-- instance's worker) gets no row and skips its pass instead of waiting.
SELECT created, event_id, read_at FROM stripe_event_cursor WHERE name = 'events'
FOR UPDATE SKIP LOCKED;

-- name: AdvanceStripeEventCursor :exec
-- A complete pass read the log up to the event @event_id, created at
-- @created (never moved back).
UPDATE stripe_event_cursor
SET created = greatest(created, sqlc.narg('created')::timestamptz),
    event_id = CASE WHEN created IS NULL OR sqlc.narg('created')::timestamptz >= created
                    THEN coalesce(sqlc.narg('event_id')::text, event_id) ELSE event_id END,
    read_at = coalesce(sqlc.narg('now')::timestamptz, now()), updated_at = now()
WHERE name = 'events';

-- name: GetStripeEventCursor :one
SELECT created, event_id, read_at FROM stripe_event_cursor WHERE name = 'events';

-- name: KnownStripeEvents :many
-- Which of the events a page of the log lists are in the inbox already
-- (applied by their webhook, or by an earlier pass): one probe of its
-- primary key per event, and those are not applied again; a deferred one
-- is (InsertStripeEvent takes it again).
-- The LATERAL ... LIMIT 1 keeps it a probe per id whatever the table's
-- statistics: as "id = ANY(...)" the planner chose, now and then, to scan
-- the whole inbox (docs/BENCHMARKS-reconcile.md: 11 million rows read over
-- 4,320 passes).
SELECT u.id::text AS id FROM unnest(@ids::text[]) AS u(id),
LATERAL (SELECT 1 FROM stripe_events e WHERE e.id = u.id AND e.outcome <> 'deferred' LIMIT 1) AS known;

-- name: AwaitStripe :exec
-- Stripe answered a status the service does not act on ("processing"):
-- the payment, still processing, keeps the PaymentIntent (and
-- payment_intents finds it by it, for the webhooks and the log), and is
-- one the service is unsure of until it moves. The caller holds it locked.
WITH intent AS (
    INSERT INTO payment_intents (stripe_payment_intent, payment_id)
    VALUES (@stripe_payment_intent, @payment_id)
    ON CONFLICT (stripe_payment_intent) DO NOTHING
), unsure AS (
    INSERT INTO payments_awaiting_stripe (payment_id, stripe_payment_intent, next_check_at)
    VALUES (@payment_id, @stripe_payment_intent, now())
    ON CONFLICT (payment_id) DO NOTHING
)
UPDATE payments SET stripe_payment_intent = @stripe_payment_intent, updated_at = now()
WHERE id = @payment_id AND stripe_payment_intent IS NULL;

-- name: ClaimAwaitingStripe :many
-- Up to @row_limit payments the service is unsure of whose check is due,
-- each given its next check in the same statement (the back-off doubling
-- from @after_seconds to @backoff_cap_seconds), SKIP LOCKED so that two
-- reconcilers take different ones. Due: @after_seconds after it became
-- unsure (next_check_at is then that moment) before the first check, at
-- next_check_at after it. Read by the index of next_check_at up to now:
-- rows whose check lies ahead are not read.
WITH clock AS NOT MATERIALIZED (
    SELECT coalesce(sqlc.narg('now')::timestamptz, now()) AS now,
           make_interval(secs => @after_seconds::float8) AS after
), due AS (
    SELECT a.payment_id FROM clock, payments_awaiting_stripe a
    WHERE a.next_check_at <= clock.now
      AND (a.checks > 0 OR a.next_check_at <= clock.now - clock.after)
    ORDER BY a.next_check_at
    LIMIT @row_limit
    FOR UPDATE OF a SKIP LOCKED
)
UPDATE payments_awaiting_stripe a
SET next_check_at = clock.now + least(clock.after * power(2, least(a.checks, 30)),
                                      make_interval(secs => @backoff_cap_seconds::float8)),
    checks = a.checks + 1
FROM due, clock
WHERE a.payment_id = due.payment_id
RETURNING a.payment_id, a.stripe_payment_intent, a.checks;

-- name: ForgetAwaitingStripe :exec
-- The payment is no longer one the service is unsure of.
DELETE FROM payments_awaiting_stripe WHERE payment_id = @payment_id;

-- name: PaymentStatus :one
-- An unsure payment's status, read without a lock: one that is no longer
-- processing is settled, and a payment never moves back to processing.
SELECT status FROM payments WHERE id = @id;
