-- A key expires a TTL after its final answer was stored, not after it was
-- first claimed: a request resumed long after it began (an outage, the
-- completer's reconcile a day later) must still be replayed for a whole TTL
-- once it finishes, or its next retry would run it, and charge, again. An
-- unfinished key never expires: its work may include a charge that still
-- needs recording. So expires_at is set when, and only when, the key finishes.
ALTER TABLE idempotency_keys ALTER COLUMN expires_at DROP NOT NULL;

-- An unfinished key of an earlier version kept its claim-time expiry; it now
-- has none. Finished keys keep theirs (their finish time was not recorded).
UPDATE idempotency_keys SET expires_at = NULL WHERE recovery_point <> 'finished';

ALTER TABLE idempotency_keys
    ADD CONSTRAINT idempotency_keys_expires_when_finished
    CHECK ((recovery_point = 'finished') = (expires_at IS NOT NULL));

