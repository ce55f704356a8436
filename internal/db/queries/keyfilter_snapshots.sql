-- name: PutKeyFilterSnapshot :execrows
-- Replaces the key filter's snapshot with a newer one; an older one (from an
-- instance that took longer to write it) leaves the newer in place.
INSERT INTO keyfilter_snapshots (id, covers, bits)
VALUES (true, @covers, @bits)
ON CONFLICT (id) DO UPDATE SET covers = excluded.covers, bits = excluded.bits, written_at = now()
WHERE keyfilter_snapshots.covers < excluded.covers;

-- name: GetKeyFilterSnapshot :one
SELECT covers, bits FROM keyfilter_snapshots WHERE id;

-- name: KeyFilterClock :one
-- The database's clock, by which finished keys get their expiry (the
-- transaction's start, now()): the time a key filter snapshot covers.
SELECT coalesce(sqlc.narg('now')::timestamptz, now())::timestamptz AS clock;
