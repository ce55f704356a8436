-- name: InsertRefund :one
-- A new refund, pending until Stripe answers. Its amount is reserved from
-- now on (see ReservedRefundAmount). Where it ends up at Stripe comes in
-- Stripe's events, by webhook or from the event log the reconciler reads.
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

-- name: InsertStripeRefund :one
-- A refund Stripe reports that the service did not make: origin
-- 'external' (made in Stripe's dashboard, say), or 'duplicate' (a second
-- refund Stripe made for one of ours), inserted pending under the
-- payment's row lock; the caller then makes the move Stripe reports, with
-- its event (moveRefundTx). stripe_refund is unique: a webhook and the
-- reconciler that both learn of it find one row.
INSERT INTO refunds (id, user_id, payment_id, amount, status, stripe_refund, reason, origin)
VALUES (@id, @user_id, @payment_id, @amount, 'pending', @stripe_refund, @reason, @origin)
RETURNING *;
