-- name: ReserveReceipt :one
-- Creates the receipt's row on first sight and reserves it for one attempt
-- at sending, until lease_ms from now; or, for a row that exists, reserves
-- it unless it was sent or another attempt's reservation still holds. No
-- row: sent, or reserved by another attempt (GetReceipt says which). The
-- recipient is the row's: a retry writes to the address the first attempt
-- chose, read from the user's row in this same statement (one round trip
-- fewer per receipt than a read before it).
INSERT INTO receipts (payment_id, kind, recipient, sending_until)
SELECT @payment_id, @kind, u.email, now() + make_interval(secs => sqlc.arg(lease_ms)::bigint / 1000.0)
FROM users u WHERE u.id = @user_id
ON CONFLICT (payment_id, kind) DO UPDATE SET sending_until = excluded.sending_until
    WHERE receipts.sent_at IS NULL AND (receipts.sending_until IS NULL OR receipts.sending_until <= now())
RETURNING recipient, sending_until;

-- name: GetReceipt :one
SELECT * FROM receipts WHERE payment_id = @payment_id AND kind = @kind;

-- name: MarkReceiptSent :exec
-- Records that the mail server accepted the receipt; the first record wins.
UPDATE receipts SET sent_at = coalesce(sent_at, now()), sending_until = NULL
WHERE payment_id = @payment_id AND kind = @kind;

-- name: ReleaseReceipt :exec
-- Ends a failed attempt's reservation, so the retry need not wait for it
-- to lapse; only the attempt's own (fenced by its sending_until).
UPDATE receipts SET sending_until = NULL
WHERE payment_id = @payment_id AND kind = @kind AND sent_at IS NULL AND sending_until = @sending_until;
