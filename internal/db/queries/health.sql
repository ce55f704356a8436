-- name: InRecovery :one
-- Whether the server is a standby (in recovery): it then takes no writes.
SELECT pg_is_in_recovery()::bool;

-- name: ProbeCommit :exec
-- A write that must commit (migration 000033): see db.ProbeCommit.
INSERT INTO commit_probe (id, probed_at) VALUES (true, now())
ON CONFLICT (id) DO UPDATE SET probed_at = excluded.probed_at;
