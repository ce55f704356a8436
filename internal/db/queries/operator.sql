-- The operator's view of idempotency keys (payments keys list | show |
-- retry, package keyadmin). Read-only but for ClaimKeyNow. Ages are
-- measured on the database's clock, the one that wrote the times.

-- name: GetUserIDByEmail :one
SELECT id FROM users WHERE email = @email;

-- name: ListKeysForOperator :many
-- Keys in one state, oldest first: 'unfinished' (every key not finished),
-- 'needs_attention' (given up on by the completer), 'locked' (a live lock:
-- some process is executing the request now). Optionally one user's only.
-- Every state is one of unfinished keys, so the keys are read through the
-- table of unfinished keys (migrations 000026 and 000029): however many
-- keys are finished, it reads only the unfinished and the few finished
-- since the completer's last sweep.
-- spent_steps are the Stripe steps whose current child key Stripe replays
-- a stored failure for (child_key_generations).
SELECT sqlc.embed(k), u.email,
    extract(epoch FROM now() - k.created_at)::float8 AS age_seconds,
    coalesce(k.lock_expires_at > now(), false)::bool AS lock_live,
    -- A live lock its holder has not renewed for half its lifetime (a live
    -- holder renews it every third): the holder may have died.
    coalesce(k.lock_expires_at > now() AND now() - k.locked_at > (k.lock_expires_at - k.locked_at) / 2, false)::bool AS lock_overdue,
    coalesce((SELECT array_agg(g.step ORDER BY g.step) FROM child_key_generations g
              WHERE g.idempotency_key_id = k.id AND g.spent_at IS NOT NULL), '{}')::text[] AS spent_steps
FROM idempotency_keys_unfinished uf
JOIN idempotency_keys k ON k.id = uf.id
JOIN users u ON u.id = k.user_id
WHERE k.recovery_point <> 'finished'
  AND (sqlc.narg('user_id')::bigint IS NULL OR k.user_id = sqlc.narg('user_id'))
  AND CASE @state::text
      WHEN 'unfinished' THEN true
      WHEN 'needs_attention' THEN k.needs_attention_at IS NOT NULL
      WHEN 'locked' THEN coalesce(k.lock_expires_at > now(), false)
      ELSE false
  END
ORDER BY k.created_at, k.id
LIMIT @row_limit;

-- name: GetKeyForOperator :one
-- One key, finished or not, expired or not (the reaper has not deleted it yet).
SELECT sqlc.embed(k), u.email,
    extract(epoch FROM now() - k.created_at)::float8 AS age_seconds,
    coalesce(k.lock_expires_at > now(), false)::bool AS lock_live,
    coalesce(k.lock_expires_at > now() AND now() - k.locked_at > (k.lock_expires_at - k.locked_at) / 2, false)::bool AS lock_overdue
FROM idempotency_keys k
JOIN users u ON u.id = k.user_id
WHERE k.user_id = @user_id AND k.idempotency_key = @idempotency_key;

-- name: ListAuditRecordsForKey :many
-- What a request committed, in order: every phase that did work writes an
-- audit record in the transaction that moves the key.
SELECT * FROM audit_records
WHERE idempotency_key_id = @idempotency_key_id
ORDER BY id;

-- name: ListChildKeyStates :many
-- The recorded generations of a request's child keys, and since when the
-- current one is known to be spent; a step not listed is at generation 0.
SELECT step, generation, spent_at FROM child_key_generations
WHERE idempotency_key_id = @idempotency_key_id;

-- name: ClaimKeyNow :one
-- An operator's retry (recovery.Completer.RetryNow) takes one unfinished
-- key's lock at once, as the completer's claim does, but without waiting
-- for its grace or backoff, and for a key that needs attention too: the
-- operator says its cause is fixed, so the mark, and the error of a key
-- that failed (attention_error), are cleared. A key whose lock is live
-- (someone is executing it) or that is finished is not taken.
UPDATE idempotency_keys
SET locked_at = coalesce(sqlc.narg('now')::timestamptz, now()),
    lock_expires_at = coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @lock_lifetime_seconds::float8),
    last_run_at = coalesce(sqlc.narg('now')::timestamptz, now()),
    lock_token = lock_token + 1,
    needs_attention_at = NULL, attention_error = NULL,
    earlier_attempts = with_previous_attempt(earlier_attempts, lock_token, last_run_at, point_reached_at, created_at,
        unlocked_at, lock_expires_at, coalesce(sqlc.narg('now')::timestamptz, now()), @call_window_tail_seconds::float8),
    unlocked_at = NULL
WHERE id = @id
  AND recovery_point <> 'finished'
  AND (lock_expires_at IS NULL OR lock_expires_at <= coalesce(sqlc.narg('now')::timestamptz, now()))
RETURNING sqlc.embed(idempotency_keys),
    (created_at < coalesce(sqlc.narg('now')::timestamptz, now()) - make_interval(secs => @external_window_seconds::float8)
    )::bool AS past_external_window;

-- name: UnfinishedKeyStats :one
-- For the metrics an operator alerts on, read on scrape through the table
-- of unfinished keys (migration 000026): how many keys need a person, and
-- how long the oldest request the completer should still finish has waited
-- for its final answer (0 when none has).
SELECT
    count(*) FILTER (WHERE k.needs_attention_at IS NOT NULL)::bigint AS needing_attention,
    coalesce(extract(epoch FROM now() - min(k.created_at) FILTER (WHERE k.needs_attention_at IS NULL)), 0)::float8 AS oldest_unfinished_age_seconds
FROM idempotency_keys_unfinished u
JOIN idempotency_keys k ON k.id = u.id
WHERE k.recovery_point <> 'finished';

-- name: ListKeysPageForOperator :many
-- The console's key list (docs/API.md section 10): the finished keys
-- ('finished') or every key (''), optionally one user's and one flow's, at
-- least min_age_seconds old, newest first, keyset-paged before
-- (before_created, before_id), through the index of creation times. The
-- unfinished states have a query of their own, below.
SELECT sqlc.embed(k), u.email,
    extract(epoch FROM now() - k.created_at)::float8 AS age_seconds,
    coalesce(k.lock_expires_at > now(), false)::bool AS lock_live,
    coalesce(k.lock_expires_at > now() AND now() - k.locked_at > (k.lock_expires_at - k.locked_at) / 2, false)::bool AS lock_overdue,
    coalesce((SELECT array_agg(g.step ORDER BY g.step) FROM child_key_generations g
              WHERE g.idempotency_key_id = k.id AND g.spent_at IS NOT NULL), '{}')::text[] AS spent_steps
FROM idempotency_keys k
JOIN users u ON u.id = k.user_id
WHERE (sqlc.narg('user_id')::bigint IS NULL OR k.user_id = sqlc.narg('user_id'))
  AND (sqlc.narg('flow')::text IS NULL OR k.flow = sqlc.narg('flow'))
  AND (@min_age_seconds::float8 <= 0 OR k.created_at <= now() - make_interval(secs => @min_age_seconds::float8))
  AND (k.created_at, k.id) < (@before_created::timestamptz, @before_id::uuid)
  AND CASE @state::text
      WHEN 'finished' THEN k.recovery_point = 'finished'
      WHEN '' THEN true
      ELSE false
  END
ORDER BY k.created_at DESC, k.id DESC
LIMIT @row_limit;

-- name: ListUnfinishedKeysPageForOperator :many
-- ListKeysPageForOperator for the states that are sets of unfinished keys
-- ('unfinished', 'needs_attention', 'locked'), read through the table of
-- unfinished keys, as ListKeysForOperator is: the console's dashboard asks
-- for the newest unfinished keys every two seconds, and through the index
-- of creation times that walked every finished key when none was
-- unfinished (a quarter of a second at a million keys).
SELECT sqlc.embed(k), u.email,
    extract(epoch FROM now() - k.created_at)::float8 AS age_seconds,
    coalesce(k.lock_expires_at > now(), false)::bool AS lock_live,
    coalesce(k.lock_expires_at > now() AND now() - k.locked_at > (k.lock_expires_at - k.locked_at) / 2, false)::bool AS lock_overdue,
    coalesce((SELECT array_agg(g.step ORDER BY g.step) FROM child_key_generations g
              WHERE g.idempotency_key_id = k.id AND g.spent_at IS NOT NULL), '{}')::text[] AS spent_steps
FROM idempotency_keys_unfinished uf
JOIN idempotency_keys k ON k.id = uf.id
JOIN users u ON u.id = k.user_id
WHERE k.recovery_point <> 'finished'
  AND (sqlc.narg('user_id')::bigint IS NULL OR k.user_id = sqlc.narg('user_id'))
  AND (sqlc.narg('flow')::text IS NULL OR k.flow = sqlc.narg('flow'))
  AND (@min_age_seconds::float8 <= 0 OR k.created_at <= now() - make_interval(secs => @min_age_seconds::float8))
  AND (k.created_at, k.id) < (@before_created::timestamptz, @before_id::uuid)
  AND CASE @state::text
      WHEN 'unfinished' THEN true
      WHEN 'needs_attention' THEN k.needs_attention_at IS NOT NULL
      WHEN 'locked' THEN coalesce(k.lock_expires_at > now(), false)
      ELSE false
  END
ORDER BY k.created_at DESC, k.id DESC
LIMIT @row_limit;

-- name: CountUnfinishedKeysByFlowAndPoint :many
-- The console's live counts of unfinished keys: those of each flow at each
-- recovery point, and of those how many are locked now and how many need
-- attention, through the table of unfinished keys.
SELECT k.flow, k.recovery_point,
    count(*)::bigint AS keys,
    count(*) FILTER (WHERE coalesce(k.lock_expires_at > now(), false))::bigint AS locked,
    count(*) FILTER (WHERE k.needs_attention_at IS NOT NULL)::bigint AS needing_attention
FROM idempotency_keys_unfinished uf
JOIN idempotency_keys k ON k.id = uf.id
WHERE k.recovery_point <> 'finished'
GROUP BY k.flow, k.recovery_point
ORDER BY k.flow, k.recovery_point;

-- name: KeyTableBytes :one
-- The size of the key table's heap: the console counts its finished keys
-- one by one only while it is small (keyadmin.Admin.Counts).
SELECT pg_relation_size('idempotency_keys')::bigint;

-- name: CountFinishedKeysByFlow :many
-- The finished keys of each flow, counted: it reads the whole key table.
SELECT flow, count(*)::bigint AS keys
FROM idempotency_keys
WHERE recovery_point = 'finished'
GROUP BY flow
ORDER BY flow;

-- name: EstimateKeysByFlow :many
-- How many keys of each flow the table holds, by PostgreSQL's statistics
-- (migration 000030): no row at all when it has none yet.
SELECT flow::text AS flow, keys::bigint AS keys FROM idempotency_keys_estimated_by_flow()
ORDER BY flow;
