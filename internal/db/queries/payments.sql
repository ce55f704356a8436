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
