-- name: GetPayment :one
-- A payment of one user: another user's payment is simply not found.
SELECT * FROM payments
WHERE id = @id AND user_id = @user_id;

-- name: ListPayments :many
-- Newest first, keyset-paginated: pass the created time and id of the last
-- payment of the previous page; the first page passes a time after every payment.
SELECT * FROM payments
WHERE user_id = @user_id
  AND (created_at, id) < (@before_created::timestamptz, @before_id::text)
ORDER BY created_at DESC, id DESC
LIMIT @row_limit;

-- name: InsertPayment :exec
-- Nothing is returned: the create flow chose every value, the time
-- included, and knows the row as written, so the insert can be queued
-- (db.Tx.Queued).
INSERT INTO payments (id, user_id, amount, currency, status, capture, payment_method, description, metadata, idempotency_key_id,
                      created_at, updated_at)
VALUES (@id, @user_id, @amount, @currency, 'processing', @capture, @payment_method, @description, @metadata, @idempotency_key_id,
        @created_at, @created_at);

-- name: GetPaymentByIdempotencyKey :one
-- The payment a create request made, found again after a crash.
SELECT * FROM payments WHERE idempotency_key_id = @idempotency_key_id;

-- name: LockPaymentByIdempotencyKey :one
-- The same, under a row lock, for the transaction that records Stripe's answer.
SELECT * FROM payments WHERE idempotency_key_id = @idempotency_key_id FOR UPDATE;

-- name: GetPaymentForUpdate :one
-- The payment under a row lock, for a flow about to change it.
SELECT * FROM payments WHERE id = @id AND user_id = @user_id FOR UPDATE;

-- name: GetPaymentByIDForUpdate :one
-- Any user's payment, locked: for Stripe's webhooks, which name payments by
-- their PaymentIntent's metadata.
SELECT * FROM payments WHERE id = @id FOR UPDATE;

-- name: GetPaymentByIntent :one
-- Any user's payment, by its PaymentIntent: for Stripe's refund events,
-- which name the PaymentIntent. Found through payment_intents (migration
-- 000024: no index of payments names a column a move changes).
SELECT * FROM payments
WHERE id = (SELECT i.payment_id FROM payment_intents i WHERE i.stripe_payment_intent = sqlc.narg('stripe_payment_intent')::text);

-- name: GetPaymentByIntentForUpdate :one
SELECT * FROM payments
WHERE id = (SELECT i.payment_id FROM payment_intents i WHERE i.stripe_payment_intent = sqlc.narg('stripe_payment_intent')::text)
FOR UPDATE;

-- name: TransitionPayment :exec
-- Moves a payment to a new status with what Stripe said about it. Only
-- applyMove calls it, with the payment locked, after checking the move is
-- allowed and computing the payment after it: nothing is returned, so the
-- update can be queued (db.Tx.Queued). A PaymentIntent new to the payment
-- goes into payment_intents in the same statement (one already recorded for
-- another payment fails it on that table's primary key); the update itself
-- changes no indexed column, so it is a HOT update (migration 000024).
WITH intent AS (
    INSERT INTO payment_intents (stripe_payment_intent, payment_id)
    SELECT sqlc.narg('stripe_payment_intent')::text, p.id FROM payments p
    WHERE p.id = @id::text AND sqlc.narg('stripe_payment_intent')::text IS NOT NULL
      AND p.stripe_payment_intent IS DISTINCT FROM sqlc.narg('stripe_payment_intent')::text
)
UPDATE payments
SET status = @status, stripe_payment_intent = sqlc.narg('stripe_payment_intent')::text, amount_captured = @amount_captured,
    failure_code = @failure_code, failure_message = @failure_message, updated_at = now()
WHERE id = @id::text;

-- name: TransitionPaymentIfUnchanged :exec
-- TransitionPayment for a payment the caller did not read in this
-- transaction (the unread move, applyMoveUnread: the create flow's payment
-- as its claim inserted it): it moves the payment only if every column a
-- move or a refund changes is still as the caller knows it (the others
-- never change), and else raises a serialization failure
-- (assert_unchanged, migration 000009), so that the transaction runs
-- again, and this time reads the payment under a lock. Nothing is
-- returned: it can be queued. A PaymentIntent new to the payment goes into
-- payment_intents, as TransitionPayment's does; the update is HOT.
WITH moved AS (
    UPDATE payments
    SET status = @status, stripe_payment_intent = sqlc.narg('stripe_payment_intent')::text, amount_captured = @amount_captured,
        failure_code = @failure_code, failure_message = @failure_message, updated_at = now()
    WHERE id = @id::text
      AND status = @was_status
      AND stripe_payment_intent IS NOT DISTINCT FROM sqlc.narg('was_stripe_payment_intent')::text
      AND amount_captured = @was_amount_captured
      AND amount_refunded = @was_amount_refunded
      AND failure_code IS NOT DISTINCT FROM @was_failure_code
      AND failure_message IS NOT DISTINCT FROM @was_failure_message
    RETURNING 1
), intent AS (
    INSERT INTO payment_intents (stripe_payment_intent, payment_id)
    SELECT sqlc.narg('stripe_payment_intent')::text, @id::text FROM moved
    WHERE sqlc.narg('stripe_payment_intent')::text IS NOT NULL
      AND sqlc.narg('stripe_payment_intent')::text IS DISTINCT FROM sqlc.narg('was_stripe_payment_intent')::text
)
SELECT assert_unchanged(count(*), 'the payment') FROM moved;

-- name: NoteStripeEvent :exec
-- The payment's staleness mark: only PaymentIntent events that the payment's
-- state reflects set it (ApplyIntentEventTx).
UPDATE payments SET stripe_event_at = greatest(stripe_event_at, @occurred_at::timestamptz) WHERE id = @id;

-- name: ClaimPaymentsToReconcile :many
-- The reconciler's claim (internal/payments/reconcile.go): up to @row_limit
-- payments that Stripe could still change and that are due a check, taken
-- with SKIP LOCKED and given their next check in the same statement, so
-- that two reconcilers running at once never ask Stripe about one payment
-- twice in a round. Due: @after_seconds after next_check_at before the
-- first check (next_check_at is then when the payment was made), at
-- next_check_at after it. Stripe could still change:
--   processing with a PaymentIntent (without one it is the completer's);
--   requires_capture until Stripe's authorisation expiry (@authorisation_seconds);
--   succeeded with money left to refund, for @watch_seconds (a refund made
--     in Stripe's dashboard);
--   any with a pending refund, or a succeeded one younger than @watch_seconds
--     (a refund that fails later).
-- The next check is @after_seconds doubled per earlier check, at most
-- @backoff_cap_seconds.
-- The clock is NOT MATERIALIZED: used twice, PostgreSQL would otherwise
-- compute it once apart, and "next_check_at <= clock.now" would be a join
-- filter over the whole index of next_check_at, retired payments (the
-- year 9999) included, instead of the bound of its scan: 0.4 s a claim at
-- 100,000 payments (TestClaimPaymentsToReconcile_readsNoPaymentItIsDoneWith).
WITH clock AS NOT MATERIALIZED (
    SELECT coalesce(sqlc.narg('now')::timestamptz, now()) AS now,
           make_interval(secs => @after_seconds::float8) AS after,
           make_interval(secs => @watch_seconds::float8) AS watch,
           make_interval(secs => @authorisation_seconds::float8) AS authorisation,
           make_interval(secs => @backoff_cap_seconds::float8) AS backoff_cap
), due AS (
    SELECT p.id FROM clock, payments p
    WHERE p.next_check_at <= clock.now
      AND (p.reconcile_checks > 0 OR p.next_check_at <= clock.now - clock.after)
      AND p.stripe_payment_intent IS NOT NULL
      AND (p.status = 'processing'
        OR (p.status = 'requires_capture' AND p.created_at > clock.now - clock.authorisation)
        OR (p.status = 'succeeded' AND p.amount_refunded < p.amount_captured AND p.created_at > clock.now - clock.watch)
        OR (p.status = 'succeeded' AND EXISTS (SELECT 1 FROM refunds r WHERE r.payment_id = p.id
                   AND (r.status = 'pending' OR (r.status = 'succeeded' AND r.created_at > clock.now - clock.watch)))))
    ORDER BY p.next_check_at
    LIMIT @row_limit
    FOR UPDATE OF p SKIP LOCKED
)
UPDATE payments
SET next_check_at = clock.now + least(clock.after * power(2, least(payments.reconcile_checks, 30)), clock.backoff_cap),
    reconcile_checks = payments.reconcile_checks + 1
FROM due, clock
WHERE payments.id = due.id
RETURNING payments.*;

-- name: RetireUnwatchedPayments :execrows
-- Payments due a check that Stripe can no longer change (failed, canceled,
-- an authorisation past its expiry, a payment fully refunded or past the
-- watch with no refund that may still move: the negation of
-- ClaimPaymentsToReconcile's watch) are put out of the reconciler's reach
-- for good, next_check_at in the year 9999, where the index range of its
-- claims never reaches, so that they do not pile up in front of every
-- claim. A new refund (InsertRefund) or a charge.refunded webhook
-- (ReconcileSoon) brings one back.
WITH clock AS (
    SELECT coalesce(sqlc.narg('now')::timestamptz, now()) AS now,
           make_interval(secs => @watch_seconds::float8) AS watch,
           make_interval(secs => @authorisation_seconds::float8) AS authorisation
), unwatched AS (
    SELECT p.id FROM clock, payments p
    WHERE p.next_check_at <= clock.now
      AND NOT (p.status = 'processing' -- with no PaymentIntent yet: the completer may still give it one
        OR (p.stripe_payment_intent IS NOT NULL AND p.status = 'requires_capture' AND p.created_at > clock.now - clock.authorisation)
        OR (p.stripe_payment_intent IS NOT NULL AND p.status = 'succeeded' AND p.amount_refunded < p.amount_captured
            AND p.created_at > clock.now - clock.watch)
        OR (p.stripe_payment_intent IS NOT NULL AND p.status = 'succeeded' AND EXISTS (SELECT 1 FROM refunds r WHERE r.payment_id = p.id
                   AND (r.status = 'pending' OR (r.status = 'succeeded' AND r.created_at > clock.now - clock.watch)))))
    ORDER BY p.next_check_at
    LIMIT @row_limit
    FOR UPDATE OF p SKIP LOCKED
)
UPDATE payments SET next_check_at = '9999-12-31 00:00:00+00'
FROM unwatched
WHERE payments.id = unwatched.id;

-- name: ReleaseReconcileClaim :exec
-- A claimed payment the reconciler did not get to ask about (Stripe
-- answered 429, say): due again at @next_check_at, its back-off as it was.
UPDATE payments SET reconcile_checks = greatest(reconcile_checks - 1, 0), next_check_at = @next_check_at
WHERE id = @id;

-- name: ReconcileSoon :exec
-- Stripe said something about the payment that names nothing of ours to
-- change (charge.refunded: the charge does not list its refunds): the
-- reconciler asks Stripe at its next pass.
UPDATE payments SET next_check_at = coalesce(sqlc.narg('now')::timestamptz, now()), reconcile_checks = greatest(reconcile_checks, 1)
WHERE id = @id;

-- name: SetPaymentDispute :exec
-- The payment's dispute as Stripe last reported it, and when that report
-- happened (ApplyDisputeEventTx, under the payment's row lock). No index
-- names either column: the update is HOT. Queued.
UPDATE payments
SET dispute = @dispute, dispute_event_at = @dispute_event_at, updated_at = now()
WHERE id = @id;

-- name: SetDuplicateCharges :exec
-- The payment's duplicate charges (the PaymentIntents Stripe made for it
-- beyond the one recorded), under the payment's row lock. HOT. Queued.
UPDATE payments
SET duplicate_charges = @duplicate_charges, updated_at = now()
WHERE id = @id;

-- name: CountStripeDuplicates :one
-- What payments_stripe_duplicates_total counts: the refunds of origin
-- duplicate, and the duplicate charges, as committed. Each through its
-- partial index (migration 000035), which holds only those rows.
SELECT
    (SELECT count(*) FROM refunds WHERE origin = 'duplicate')::bigint AS refunds,
    (SELECT coalesce(sum(jsonb_array_length(duplicate_charges)), 0) FROM payments
     WHERE duplicate_charges IS NOT NULL)::bigint AS payment_intents;
