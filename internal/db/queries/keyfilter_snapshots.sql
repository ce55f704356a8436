-- name: PutKeyFilterSnapshot :execrows
-- Replaces the key filter's snapshot with a newer one; an older one (from an
-- instance that took longer to write it) leaves the newer in place.
INSERT INTO keyfilter_snapshots (id, covers, bits)
VALUES (true, @covers, @bits)
ON CONFLICT (id) DO UPDATE SET covers = excluded.covers, bits = excluded.bits, written_at = now()
WHERE keyfilter_snapshots.covers < excluded.covers;

-- name: KeyFilterClock :one
-- The database's clock, by which finished keys get their expiry (the
-- transaction's start, now()): the time a key filter snapshot covers.
SELECT coalesce(sqlc.narg('now')::timestamptz, now())::timestamptz AS clock;

-- name: GetKeyFilterSnapshotSize :one
-- The stored snapshot's time and size, for reading it in parts.
SELECT covers, length(bits)::int AS size FROM keyfilter_snapshots WHERE id;

-- name: GetKeyFilterSnapshotPart :one
-- Bytes of the stored snapshot from @start (1-based) on, at most @length: the
-- column is stored uncompressed (EXTERNAL), so PostgreSQL reads only the
-- chunks that hold them, and parts read on several connections at once.
SELECT substring(bits FROM @start::int FOR @length::int)::bytea AS part
FROM keyfilter_snapshots WHERE id AND covers = @covers;
