-- name: ListChildKeyGenerations :many
-- The generations of a request's child keys; a step not listed is at 0.
SELECT step, generation FROM child_key_generations
WHERE idempotency_key_id = @idempotency_key_id;

-- name: MarkChildKeySpent :one
-- Records that the child key of a step, at the given generation, was found
-- spent: the first time it was, which later findings keep. Fenced like every
-- write of a holder: nothing is written, and no row returned, unless
-- lock_token still holds the key, nor when the step is no longer at that
-- generation (another holder moved it on). Returns how long is left of the
-- grace that follows the key's first finding (negative once it is over).
WITH held AS (
    SELECT id FROM idempotency_keys
    WHERE id = @idempotency_key_id AND lock_token = @lock_token AND locked_at IS NOT NULL
)
INSERT INTO child_key_generations (idempotency_key_id, step, generation, spent_at)
SELECT held.id, @step, @generation, coalesce(sqlc.narg('now')::timestamptz, now()) FROM held
ON CONFLICT (idempotency_key_id, step) DO UPDATE
SET spent_at = coalesce(child_key_generations.spent_at, excluded.spent_at)
WHERE child_key_generations.generation = excluded.generation
RETURNING extract(epoch FROM spent_at + make_interval(secs => @grace_seconds::float8)
    - coalesce(sqlc.narg('now')::timestamptz, now()))::float8 AS grace_left_seconds;

-- name: RenewChildKey :execrows
-- Moves a step on to the next generation of its child key: its current one
-- was found spent and made nothing at Stripe. Fenced like MarkChildKeySpent,
-- and only from the generation the caller found spent, so that of two
-- holders deciding at once (one presumed dead) only one moves it.
UPDATE child_key_generations g
SET generation = g.generation + 1, spent_at = NULL
FROM idempotency_keys k
WHERE g.idempotency_key_id = @idempotency_key_id AND g.step = @step AND g.generation = @generation
  AND g.spent_at IS NOT NULL
  AND k.id = g.idempotency_key_id AND k.lock_token = @lock_token AND k.locked_at IS NOT NULL;
