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

-- name: GetRefundByID :one
-- Any user's refund: for Stripe's webhooks, which name refunds by our id in
-- their metadata.
SELECT * FROM refunds WHERE id = @id;

-- name: GetRefundByStripeRefund :one
SELECT * FROM refunds WHERE stripe_refund = @stripe_refund;

-- name: LockRefund :one
-- The refund under a row lock. Its payment is locked first, always: the
-- order every refund change takes them in.
SELECT * FROM refunds WHERE id = @id FOR UPDATE;

-- name: MoveRefund :one
-- A refund's new status, with what Stripe said (its id, once known, never
-- changes). Only moveRefundTx calls it, with the refund locked, after
-- checking the move is allowed (or to record Stripe's id without a move).
UPDATE refunds
SET status = @status, stripe_refund = coalesce(stripe_refund, @stripe_refund), failure_reason = @failure_reason,
    updated_at = now()
WHERE id = @id
RETURNING *;

-- name: SyncAmountRefunded :exec
-- The payment's amount_refunded is the sum of its succeeded refunds: our
-- refunds are its source of truth, so it rises when one succeeds and drops
-- when one fails after succeeding. Run under the payment's row lock after
-- every refund move.
UPDATE payments
SET amount_refunded = (SELECT coalesce(sum(r.amount), 0) FROM refunds r
                       WHERE r.payment_id = payments.id AND r.status = 'succeeded'),
    updated_at = now()
WHERE payments.id = @id;

-- name: ListStalePendingRefunds :many
-- Refunds Stripe made and reported pending, unchanged for at least
-- @pending_for_seconds by the database's clock (the one clock their
-- updated_at was written with): the reconciler asks Stripe about them,
-- oldest first, in case their charge.refund.updated was lost. Refunds Stripe never answered
-- for (no stripe_refund) are their flow's, and the completer's.
SELECT * FROM refunds
WHERE status = 'pending' AND stripe_refund IS NOT NULL AND updated_at < now() - make_interval(secs => @pending_for_seconds::float8)
ORDER BY updated_at
LIMIT @row_limit;

-- name: TouchRefund :exec
-- Stripe still says pending: the refund goes to the back of the
-- reconciler's queue.
UPDATE refunds SET updated_at = now() WHERE id = @id;
