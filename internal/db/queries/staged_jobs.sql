-- name: InsertStagedJob :exec
INSERT INTO staged_jobs (kind, args, idempotency_key_id)
VALUES (@kind, @args, @idempotency_key_id);
