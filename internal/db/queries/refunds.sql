-- name: InsertRefund :one
-- A new refund, pending until Stripe answers. Its amount is reserved from
-- now on (see ReservedRefundAmount).
INSERT INTO refunds (id, user_id, payment_id, amount, status, reason, idempotency_key_id)
VALUES (@id, @user_id, @payment_id, @amount, 'pending', @reason, @idempotency_key_id)
RETURNING *;

-- name: GetRefund :one
-- A refund of one user: another user's refund is simply not found.
SELECT * FROM refunds
WHERE id = @id AND user_id = @user_id;

-- name: GetRefundByIdempotencyKey :one
-- The refund a refund request made, found again after a crash.
SELECT * FROM refunds WHERE idempotency_key_id = @idempotency_key_id;

-- name: ReservedRefundAmount :one
-- What a payment's refunds hold: the succeeded ones, and the pending ones,
-- which may still succeed. Read under the payment's row lock.
SELECT coalesce(sum(amount), 0)::bigint FROM refunds
WHERE payment_id = @payment_id AND status IN ('pending', 'succeeded');

-- name: RecordStripeRefund :one
-- Stripe made the refund: its id and its status (succeeded, pending, or failed).
UPDATE refunds
SET status = @status, stripe_refund = @stripe_refund, failure_reason = @failure_reason, updated_at = now()
WHERE id = @id
RETURNING *;

-- name: RecordRefundRefusal :one
-- Stripe refused the refund: it is failed, and its amount is free again.
UPDATE refunds
SET status = 'failed', failure_reason = @failure_reason, updated_at = now()
WHERE id = @id
RETURNING *;

-- name: CatchUpAmountRefunded :one
-- The payment's amount_refunded catches up with its succeeded refunds. It
-- never goes down and is never added to blindly: a Stripe webhook may
-- already have raised it for the same refund.
UPDATE payments
SET amount_refunded = greatest(amount_refunded,
        (SELECT coalesce(sum(r.amount), 0) FROM refunds r WHERE r.payment_id = payments.id AND r.status = 'succeeded')),
    updated_at = now()
WHERE payments.id = @id
RETURNING *;
