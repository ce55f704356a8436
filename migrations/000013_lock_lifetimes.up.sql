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
