-- name: ClaimReceipt :one
-- The receipt's row, created on first sight and locked while it is sent.
INSERT INTO receipts (payment_id, kind, recipient)
VALUES (@payment_id, @kind, @recipient)
ON CONFLICT (payment_id, kind) DO UPDATE SET kind = excluded.kind
RETURNING *;

-- name: MarkReceiptSent :exec
UPDATE receipts SET sent_at = now() WHERE payment_id = @payment_id AND kind = @kind;

-- name: GetUserEmail :one
SELECT email FROM users WHERE id = @id;
