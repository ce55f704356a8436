-- A lock's lifetime is its holder's to give. Each process judged a lock's
-- age by its own PAYMENTS_LOCK_TIMEOUT (locked_at older than that was a
-- dead holder's), so a process configured with a shorter timeout than the
-- holder's took over the holder's live requests: its heartbeat comes every
-- third of its own, longer, timeout. The holder now writes when its lock
-- ends, at every claim, heartbeat and move (now + its own lock timeout),
-- and every process reads that: the lock is live while lock_expires_at is
-- ahead of the one clock. locked_at stays: when the lock was last taken or
-- refreshed, for people.
ALTER TABLE idempotency_keys ADD COLUMN lock_expires_at timestamptz;

-- The locks held when this runs were given the default lifetime, 90 s.
UPDATE idempotency_keys SET lock_expires_at = locked_at + interval '90 seconds' WHERE locked_at IS NOT NULL;

ALTER TABLE idempotency_keys
    ADD CONSTRAINT idempotency_keys_lock_has_lifetime
    CHECK ((locked_at IS NULL) = (lock_expires_at IS NULL));

-- A new key's row is now written first in the transaction that claims it,
-- ahead of the first phase's work, so that the unique index decides before
-- any of that work runs (a key another instance finished gets its replay,
-- not what the work ran into). The rows that reference the key (the
-- payment, the refund, audit records, staged jobs) therefore always come
-- after it, and their references no longer need checking at commit, as
-- migration 000007 made them: a missing key is reported by the statement
-- that referred to it.
ALTER TABLE payments ALTER CONSTRAINT payments_idempotency_key_id_fkey NOT DEFERRABLE;
ALTER TABLE refunds ALTER CONSTRAINT refunds_idempotency_key_id_fkey NOT DEFERRABLE;
ALTER TABLE audit_records ALTER CONSTRAINT audit_records_idempotency_key_id_fkey NOT DEFERRABLE;
ALTER TABLE staged_jobs ALTER CONSTRAINT staged_jobs_idempotency_key_id_fkey NOT DEFERRABLE;
