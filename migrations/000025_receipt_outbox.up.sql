-- Receipts become an outbox of their own, as webhook deliveries did
-- (migration 000021): the drain writes a receipt's row in the transaction
-- that deletes its staged job (no River job per receipt), due at once, and
-- the receipt sender (internal/stagedjobs/sender.go) claims due rows in
-- batches, FOR UPDATE SKIP LOCKED, sends each with nothing held, and
-- records the outcomes in one statement.
--
-- next_attempt_at: when the receipt is due; the claim moves it (and
-- sending_until, the reservation of migration 000014) a lease ahead, a
-- failed send to its retry, a sent or given-up receipt to NULL. NULL, too,
-- on the rows of receipts River's receipt jobs own (an earlier version's,
-- or the drain's fallback), which the sender never claims.
-- attempts: the sends tried, for the back-off and the last one.
-- amount, currency: what the receipt says (the staged job's arguments).
-- last_error: the last failed send's error, for the console.
-- trace_parent: the staging request's traceparent, so the send is a span
-- in its trace (internal/stagedjobs/trace.go).
ALTER TABLE receipts
    ADD COLUMN next_attempt_at timestamptz,
    ADD COLUMN attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN amount bigint,
    ADD COLUMN currency text,
    ADD COLUMN last_error text,
    ADD COLUMN trace_parent text;

-- The sender's claim, and the count of unsent receipts, read only this
-- index: a sent receipt leaves it.
CREATE INDEX receipts_due_idx ON receipts (next_attempt_at) WHERE next_attempt_at IS NOT NULL;
