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
UPDATE receipts SET sent_at = coalesce(sent_at, now()), sending_until = NULL, next_attempt_at = NULL
WHERE payment_id = @payment_id AND kind = @kind;

-- name: ReleaseReceipt :exec
-- Ends a failed attempt's reservation, so the retry need not wait for it
-- to lapse; only the attempt's own (fenced by its sending_until).
UPDATE receipts SET sending_until = NULL
WHERE payment_id = @payment_id AND kind = @kind AND sent_at IS NULL AND sending_until = @sending_until;

-- name: ClaimDueReceipts :many
-- The receipt sender's claim (stagedjobs.ReceiptSender): up to batch_size
-- due receipts, FOR UPDATE SKIP LOCKED, each reserved for one attempt for
-- lease_ms (sending_until, as ReserveReceipt's reservation, so a River
-- receipt job of the same receipt waits for it). The reservation is the
-- lease: the claim skips a receipt while it holds, and finds it again once
-- it lapses if the sender died mid-attempt. next_attempt_at stays where it
-- was: receipts_due_idx names it, and sending_until no index names, so the
-- claim is a HOT update (migration 000027). Its attempts count the one
-- about to be made. A receipt River's job reserved is left to it until its
-- reservation lapses.
--
-- It names no column but next_attempt_at and sending_until: a receipt with
-- a next attempt is unsent (every statement that sets sent_at sets
-- next_attempt_at NULL), and a condition on sent_at let the planner AND
-- receipts_due_idx with the console's receipts_unsent_created_idx in a
-- bitmap scan. A bitmap scan never marks an index entry dead, so every
-- claim read again each entry that the receipts sent since the table's last
-- vacuum left in both indexes, and their heap pages: 250 pages and 0.7 ms
-- for no row after 7,000 receipts (make bench's G), growing with the table
-- (autovacuum comes at a fifth of it dead). Read in order from
-- receipts_due_idx alone, the scan stops at batch_size and marks the dead
-- entries it passes, so the next claim skips them.
WITH due AS (
    SELECT r.payment_id, r.kind FROM receipts r
    WHERE r.next_attempt_at <= now()
      AND (r.sending_until IS NULL OR r.sending_until <= now())
    ORDER BY r.next_attempt_at
    LIMIT @batch_size
    FOR UPDATE SKIP LOCKED
)
UPDATE receipts r
SET sending_until = now() + make_interval(secs => sqlc.arg(lease_ms)::bigint / 1000.0),
    attempts = r.attempts + 1
FROM due
WHERE r.payment_id = due.payment_id AND r.kind = due.kind
RETURNING r.payment_id, r.kind, r.recipient, coalesce(r.amount, 0)::bigint AS amount,
    coalesce(r.currency, '')::text AS currency, r.attempts, r.sending_until, r.trace_parent;

-- name: RecordReceiptOutcomes :execrows
-- Records a batch of the sender's attempts (parallel arrays, one entry per
-- attempt). A sent receipt is final, whatever its reservation (the first
-- record wins, as MarkReceiptSent). A failed one is recorded only while its
-- attempt's reservation (fence) still holds: due again at next_attempt, or,
-- when given_up, never again (next_attempt_at NULL, sent_at NULL).
WITH outcome AS (
    SELECT unnest(@payment_ids::text[]) AS payment_id, unnest(@kinds::text[]) AS kind,
           unnest(@fences::timestamptz[]) AS fence, unnest(@sent::bool[]) AS sent,
           unnest(@given_up::bool[]) AS given_up, unnest(@next_attempts::timestamptz[]) AS next_attempt,
           unnest(@errors::text[]) AS error
)
UPDATE receipts r
SET sent_at = CASE WHEN o.sent THEN coalesce(r.sent_at, now()) ELSE r.sent_at END,
    sending_until = NULL,
    next_attempt_at = CASE WHEN o.sent OR o.given_up THEN NULL ELSE o.next_attempt END,
    last_error = CASE WHEN o.sent THEN NULL ELSE o.error END
FROM outcome o
WHERE r.payment_id = o.payment_id AND r.kind = o.kind
  AND (o.sent OR (r.sent_at IS NULL AND r.sending_until = o.fence));

-- name: CountUnsentReceipts :one
-- Receipts the sender has yet to send (due, or claimed and not recorded).
SELECT count(*) FROM receipts WHERE next_attempt_at IS NOT NULL;
