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

-- name: InsertPayment :one
INSERT INTO payments (id, user_id, amount, currency, status, capture, payment_method, description, metadata, idempotency_key_id)
VALUES (@id, @user_id, @amount, @currency, 'processing', @capture, @payment_method, @description, @metadata, @idempotency_key_id)
RETURNING *;

-- name: GetPaymentByIdempotencyKey :one
-- The payment a create request made, found again after a crash.
SELECT * FROM payments WHERE idempotency_key_id = @idempotency_key_id;

-- name: GetPaymentForUpdate :one
-- The payment under a row lock, for a flow about to change it.
SELECT * FROM payments WHERE id = @id AND user_id = @user_id FOR UPDATE;

-- name: RecordPaymentIntent :one
-- Stripe accepted the payment: authorised (requires_capture) or captured (succeeded).
UPDATE payments
SET stripe_payment_intent = @stripe_payment_intent, status = @status, amount_captured = @amount_captured, updated_at = now()
WHERE id = @id
RETURNING *;

-- name: RecordPaymentFailure :one
UPDATE payments
SET status = 'failed', stripe_payment_intent = coalesce(sqlc.narg('stripe_payment_intent'), stripe_payment_intent),
    failure_code = @failure_code, failure_message = @failure_message, updated_at = now()
WHERE id = @id
RETURNING *;

-- name: RecordCapture :one
UPDATE payments
SET status = 'succeeded', amount_captured = @amount_captured, updated_at = now()
WHERE id = @id
RETURNING *;

-- name: RecordCancel :one
UPDATE payments
SET status = 'canceled', updated_at = now()
WHERE id = @id
RETURNING *;
