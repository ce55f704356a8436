-- name: InsertStagedJob :exec
INSERT INTO staged_jobs (kind, args, idempotency_key_id)
VALUES (@kind, @args, @idempotency_key_id);

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
