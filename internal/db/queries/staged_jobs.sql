-- name: InsertStagedJobs :exec
-- Stages jobs, one row each (kinds[i] with args[i]), in one statement.
INSERT INTO staged_jobs (kind, args, idempotency_key_id)
SELECT unnest(@kinds::text[]), unnest(@args::text[])::jsonb, sqlc.narg('idempotency_key_id')::uuid;

-- name: ClaimStagedJobs :many
-- A batch to move to the job queue. SKIP LOCKED lets several enqueuers work
-- side by side, each on its own rows.
SELECT * FROM staged_jobs
ORDER BY id
LIMIT @batch_size
FOR UPDATE SKIP LOCKED;

-- name: DeleteStagedJobs :exec
DELETE FROM staged_jobs WHERE id = ANY(@ids::bigint[]);

-- name: CountStagedJobs :one
SELECT count(*) FROM staged_jobs;
