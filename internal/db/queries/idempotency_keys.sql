-- Every time in these queries comes from one clock: the injected @now when
-- tests pass one, else the database's now().
--
-- A key's lock is live while lock_expires_at is ahead of that clock. Its
-- holder sets it, at every claim, heartbeat and move, to now plus the
-- holder's own lock timeout (@lock_lifetime_seconds); every other process
-- only reads it, so processes with different lock timeouts never take over
-- each other's live requests.
--
-- The same statements record, at no extra statement, when each attempt of
-- the key's external call could have reached the remote side (migration
-- 000046, recovery.CallWindow): the insert and every move stamp
-- point_reached_at and empty earlier_attempts, every claim of an existing
-- key adds the previous attempt's window to earlier_attempts
-- (with_previous_attempt) and clears unlocked_at, every unlock stamps
-- unlocked_at.

-- name: ClaimLookup :one
-- The claim reads the row under a row lock, so two claims of one key queue
-- up instead of failing to serialize, and judges the lock (by the lifetime
-- its holder gave it) and the expiry with the one clock. For a live lock,
-- also how long it has left and whether its holder is overdue (its last
-- renewal older than half the lifetime, where a live holder renews it every
-- third): the 409's Retry-After (recovery.KeyInUseError).
SELECT sqlc.embed(idempotency_keys),
    coalesce(lock_expires_at > coalesce(sqlc.narg('now')::timestamptz, now()), false)::bool AS lock_live,
    coalesce(extract(epoch FROM lock_expires_at - coalesce(sqlc.narg('now')::timestamptz, now())), 0)::float8 AS lock_remaining_seconds,
    coalesce(coalesce(sqlc.narg('now')::timestamptz, now()) - locked_at > (lock_expires_at - locked_at) / 2, false)::bool AS lock_overdue,
    coalesce(expires_at <= coalesce(sqlc.narg('now')::timestamptz, now()), false)::bool AS expired,
    (created_at < coalesce(sqlc.narg('now')::timestamptz, now()) - make_interval(secs => @external_window_seconds::float8)
    )::bool AS past_external_window
FROM idempotency_keys
WHERE user_id = @user_id AND idempotency_key = @idempotency_key
FOR UPDATE;

-- name: FindFinishedKey :one
-- The stored answer of a finished key still within its TTL, read without a
-- lock: a finished key's row never changes until the reaper deletes it, so
-- a retry of a finished request is answered without a transaction.
SELECT request_fingerprint, response_code, response_body
FROM idempotency_keys
WHERE user_id = @user_id AND idempotency_key = @idempotency_key
  AND recovery_point = 'finished' AND expires_at > coalesce(sqlc.narg('now')::timestamptz, now());

-- name: InsertIdempotencyKey :exec
-- A new key, locked (lock token 1, for the caller's lock lifetime) by the
-- request that creates it, at started, or at the recovery point that the
-- claim's transaction moves it to: the claim makes the insert only when
-- the transaction sends it (db.Tx.QueueLater), so a move in the same
-- transaction needs no update of the row (it would write every index of
-- the table again, read the primary key's page by the id, and take a
-- statement more). The claim sends it ahead of
-- the first phase's statements, in the same round trip: a key that exists
-- already fails it on the unique index, which aborts the transaction before
-- any of the phase's work runs, and the claim takes the careful path.
-- The caller chooses the id and knows every column, so nothing is returned
-- and the insert can be queued (db.Tx.Queued). trace_parent is the W3C
-- traceparent of the request, when it is traced: a later attempt by the
-- completer links its own trace to it.
INSERT INTO idempotency_keys (
    id, user_id, idempotency_key, flow, request_method, request_path, request_params, request_fingerprint,
    recovery_point, locked_at, lock_expires_at, lock_token, last_run_at, created_at, trace_parent, point_reached_at
) VALUES (
    @id, @user_id, @idempotency_key, @flow, @request_method, @request_path, @request_params, @request_fingerprint,
    @recovery_point, coalesce(sqlc.narg('now')::timestamptz, now()),
    coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @lock_lifetime_seconds::float8),
    1, coalesce(sqlc.narg('now')::timestamptz, now()), coalesce(sqlc.narg('now')::timestamptz, now()),
    sqlc.narg('trace_parent'), coalesce(sqlc.narg('now')::timestamptz, now())
);

-- name: IdempotencyKeyExists :one
-- Whether the user's key has a row, finished or not: after a claim that
-- took the key filter's "new" failed, it tells whether the key is another
-- request's, to be answered by the careful claim.
SELECT EXISTS (
    SELECT 1 FROM idempotency_keys WHERE user_id = @user_id AND idempotency_key = @idempotency_key
)::bool;

-- name: DeleteExpiredIdempotencyKey :exec
-- An expired, finished key makes way for a new request with the same key.
-- The rows its request wrote stay, and let go of it, as ReapExpiredKeys's
-- do: the trigger of migration 000045 applies key_references to the keys
-- any statement deletes.
DELETE FROM idempotency_keys d
WHERE d.id = @id AND d.recovery_point = 'finished';

-- name: LockIdempotencyKey :one
-- Takes the lock of an existing key for the caller's lock lifetime: a new
-- token fences off any earlier holder. The previous attempt's call window
-- joins the earlier ones.
UPDATE idempotency_keys
SET locked_at = coalesce(sqlc.narg('now')::timestamptz, now()),
    lock_expires_at = coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @lock_lifetime_seconds::float8),
    last_run_at = coalesce(sqlc.narg('now')::timestamptz, now()),
    lock_token = lock_token + 1,
    earlier_attempts = with_previous_attempt(earlier_attempts, lock_token, last_run_at, point_reached_at, created_at,
        unlocked_at, lock_expires_at, coalesce(sqlc.narg('now')::timestamptz, now()), @call_window_tail_seconds::float8),
    unlocked_at = NULL
WHERE id = @id
RETURNING *;

-- name: SetRecoveryPoint :exec
-- Moves a key forward, only while the caller still holds its lock: else it
-- raises PK001 (assert_lock_held) and the transaction fails. The move
-- renews the lock for the caller's lock lifetime. The new recovery point's
-- external call, if it has one, is possible from this commit on: its call
-- windows start here.
WITH moved AS (
    UPDATE idempotency_keys
    SET recovery_point = @recovery_point, locked_at = coalesce(sqlc.narg('now')::timestamptz, now()),
        lock_expires_at = coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @lock_lifetime_seconds::float8),
        point_reached_at = coalesce(sqlc.narg('now')::timestamptz, now()), earlier_attempts = NULL
    WHERE id = @id AND lock_token = @lock_token
    RETURNING 1
)
SELECT assert_lock_held(count(*)) FROM moved;

-- name: FinishIdempotencyKey :exec
-- Stores the final response and releases the lock, only for the lock
-- holder: else it raises PK001 (assert_lock_held) and the transaction fails.
-- The key expires a TTL from now, however long ago it was first claimed.
WITH moved AS (
    UPDATE idempotency_keys
    SET recovery_point = 'finished', response_code = @response_code, response_body = @response_body,
        locked_at = NULL, lock_expires_at = NULL,
        expires_at = coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @ttl_seconds::float8),
        point_reached_at = NULL, unlocked_at = NULL, earlier_attempts = NULL
    WHERE id = @id AND lock_token = @lock_token
    RETURNING 1
)
SELECT assert_lock_held(count(*)) FROM moved;

-- name: HeartbeatIdempotencyKey :execrows
-- Keeps the lock alive while an external call runs: one more lock lifetime
-- of the holder's from now.
UPDATE idempotency_keys
SET locked_at = coalesce(sqlc.narg('now')::timestamptz, now()),
    lock_expires_at = coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @lock_lifetime_seconds::float8)
WHERE id = @id AND lock_token = @lock_token AND locked_at IS NOT NULL;

-- name: UnlockIdempotencyKey :execrows
-- Releases the lock without finishing: the next attempt resumes where this
-- one stopped. The unlock is the attempt's recorded end: its call window
-- closes here.
UPDATE idempotency_keys
SET locked_at = NULL, lock_expires_at = NULL, unlocked_at = coalesce(sqlc.narg('now')::timestamptz, now())
WHERE id = @id AND lock_token = @lock_token;

-- name: UnlockClaimedIdempotencyKey :execrows
-- Releases the lock of a claim of an existing key whose COMMIT's outcome is
-- unknown (the connection was lost, or the commit outlived its deadline
-- waiting for a synchronous standby), only while the row holds that very
-- claim's lock: its token, and the time the claim took it (its
-- transaction's now(), written with the lock and by the claim's own moves
-- in the same transaction). The token alone would not do: a claim that
-- never committed took the same token (the old one plus one) that the next
-- claim takes.
UPDATE idempotency_keys
SET locked_at = NULL, lock_expires_at = NULL, unlocked_at = coalesce(sqlc.narg('now')::timestamptz, now())
WHERE id = @id AND lock_token = @lock_token AND locked_at = @locked_at;

-- name: GetIdempotencyKeyState :one
-- A key as its owner may inspect it. A finished key past its TTL is gone;
-- an unfinished one (no expiry) stays visible, since a retry would still
-- resume it.
SELECT sqlc.embed(idempotency_keys),
    coalesce(lock_expires_at > coalesce(sqlc.narg('now')::timestamptz, now()), false)::bool AS lock_live
FROM idempotency_keys
WHERE user_id = @user_id AND idempotency_key = @idempotency_key
  AND (expires_at IS NULL OR expires_at > coalesce(sqlc.narg('now')::timestamptz, now()));

-- name: ClaimAbandonedKeys :many
-- The completer's next keys (it takes one at a time): unfinished keys nobody holds (or whose holder's
-- lock lapsed, by the lifetime that holder gave it) and nobody has run for a while, backing off per key: a key
-- the completer already tried n times waits grace times 2 to the n (at most
-- max_backoff) since its last run. Claiming takes the lock with a new token
-- for the completer's lock lifetime, as a retry by the client would. SKIP
-- LOCKED leaves keys claimed elsewhere.
UPDATE idempotency_keys
SET locked_at = coalesce(sqlc.narg('now')::timestamptz, now()),
    lock_expires_at = coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @lock_lifetime_seconds::float8),
    last_run_at = coalesce(sqlc.narg('now')::timestamptz, now()),
    lock_token = lock_token + 1,
    completer_attempts = completer_attempts + 1,
    earlier_attempts = with_previous_attempt(earlier_attempts, lock_token, last_run_at, point_reached_at, created_at,
        unlocked_at, lock_expires_at, coalesce(sqlc.narg('now')::timestamptz, now()), @call_window_tail_seconds::float8),
    unlocked_at = NULL
WHERE id IN (
    -- The unfinished keys are few (idempotency_keys_unfinished, migrations
    -- 000026 and 000029): the requests in flight, those waiting for this,
    -- and the keys finished since the run's sweep. Each is looked up by its
    -- id (LATERAL, OFFSET 0: a subquery the planner cannot merge into a
    -- join): as a join, with statistics saying that almost every key is
    -- finished, the planner read the whole key table instead (make bench's
    -- F: 13,270 pages, 38 to 165 ms a claim at 100,000 keys, growing with
    -- every key kept; TestClaimAbandonedKeys_readsOnlyTheUnfinishedKeys).
    -- The chosen ones are then locked one by one, SKIP LOCKED, and checked
    -- again once locked, as ClaimDueDeliveries does: a lock in the first
    -- subquery would lock every candidate, not the batch.
    SELECT l.id
    FROM (
        SELECT c.id, c.last_run_at
        FROM idempotency_keys_unfinished u,
        LATERAL (
            SELECT k.id, k.last_run_at FROM idempotency_keys k
            WHERE k.id = u.id
              AND k.recovery_point <> 'finished'
              AND k.needs_attention_at IS NULL
              AND (k.lock_expires_at IS NULL OR k.lock_expires_at <= coalesce(sqlc.narg('now')::timestamptz, now()))
              AND k.last_run_at < coalesce(sqlc.narg('now')::timestamptz, now())
                  - make_interval(secs => least(sqlc.arg('grace_seconds')::float8 * power(2, least(k.completer_attempts, 20)), sqlc.arg('max_backoff_seconds')::float8))
            OFFSET 0
        ) c
        ORDER BY c.last_run_at
        LIMIT @batch_size
    ) due,
    LATERAL (
        SELECT k.id FROM idempotency_keys k
        WHERE k.id = due.id
          AND k.recovery_point <> 'finished'
          AND k.needs_attention_at IS NULL
          AND (k.lock_expires_at IS NULL OR k.lock_expires_at <= coalesce(sqlc.narg('now')::timestamptz, now()))
          AND k.last_run_at < coalesce(sqlc.narg('now')::timestamptz, now())
              - make_interval(secs => least(sqlc.arg('grace_seconds')::float8 * power(2, least(k.completer_attempts, 20)), sqlc.arg('max_backoff_seconds')::float8))
        FOR UPDATE SKIP LOCKED
    ) l
)
RETURNING sqlc.embed(idempotency_keys),
    (created_at < coalesce(sqlc.narg('now')::timestamptz, now()) - make_interval(secs => @external_window_seconds::float8)
    )::bool AS past_external_window;

-- name: SweepUnfinishedKeys :one
-- Takes out of idempotency_keys_unfinished the rows of keys that finished,
-- or are gone, since the last sweep: a key's finish leaves its row there
-- (migration 000029). One page of the table's primary key at a time, after
-- after_id; it says how many rows the page read, how many it took out, and
-- the page's last id, where the next page starts. The completer runs it in
-- READ COMMITTED: it sees only committed keys, so a key whose request is
-- still running keeps its row, and it takes no predicate lock that a
-- request's SERIALIZABLE transaction could conflict with.
WITH page AS (
    SELECT u.id FROM idempotency_keys_unfinished u
    WHERE u.id > @after_id::uuid
    ORDER BY u.id
    LIMIT @page_size
), swept AS (
    DELETE FROM idempotency_keys_unfinished u
    WHERE u.id IN (SELECT id FROM page)
      AND NOT EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.id = u.id AND k.recovery_point <> 'finished')
    RETURNING 1
)
SELECT (SELECT count(*) FROM page)::bigint AS page_rows,
    (SELECT count(*) FROM swept)::bigint AS swept,
    coalesce((SELECT id FROM page ORDER BY id DESC LIMIT 1), @after_id::uuid)::uuid AS last_id;

-- name: MarkNeedsAttention :execrows
-- Gives up on a key for good: its Stripe step is past Stripe's idempotency
-- window and Stripe has no trace of it. A person decides; nothing is re-sent.
UPDATE idempotency_keys
SET needs_attention_at = coalesce(sqlc.narg('now')::timestamptz, now()), locked_at = NULL, lock_expires_at = NULL,
    unlocked_at = coalesce(sqlc.narg('now')::timestamptz, now())
WHERE id = @id AND lock_token = @lock_token;

-- name: MarkKeyFailed :execrows
-- Gives up on a key whose phase failed with an error no retry can cure (a
-- constraint its own write violates, a bug's error), and records the error
-- (migration 000048): a person decides. Only while lock_token is the
-- caller's: the lock this attempt holds, or, after a claim whose
-- transaction rolled back, the token the key had before it (nobody has
-- claimed the key since, or the token would have grown).
UPDATE idempotency_keys
SET needs_attention_at = coalesce(sqlc.narg('now')::timestamptz, now()), attention_error = @attention_error,
    locked_at = NULL, lock_expires_at = NULL
WHERE id = @id AND lock_token = @lock_token;

-- name: InsertFailedIdempotencyKey :execrows
-- A new key whose first phase, in the claim's transaction, failed with an
-- error no retry can cure: the claim rolled back, so the key's row is made
-- here, unlocked at started, needing attention with the error, so that a
-- retry gets the same answer without running the phase again, and an
-- operator can re-drive it (MarkKeyFailed says the rest). No row when the
-- key exists by now: another request made it, and a retry gets its answer.
INSERT INTO idempotency_keys (
    id, user_id, idempotency_key, flow, request_method, request_path, request_params, request_fingerprint,
    recovery_point, lock_token, last_run_at, created_at, trace_parent, needs_attention_at, attention_error
) VALUES (
    @id, @user_id, @idempotency_key, @flow, @request_method, @request_path, @request_params, @request_fingerprint,
    'started', 1, coalesce(sqlc.narg('now')::timestamptz, now()), coalesce(sqlc.narg('now')::timestamptz, now()),
    sqlc.narg('trace_parent'), coalesce(sqlc.narg('now')::timestamptz, now()), @attention_error
)
ON CONFLICT (user_id, idempotency_key) DO NOTHING;


-- name: ReapExpiredKeys :one
-- A small batch of finished keys past their TTL, and how many. Unfinished
-- keys are never reaped: their work may include a charge that still needs
-- recording.
--
-- A key expires a TTL after it finished, so an expired one was created
-- more than a TTL ago: the batch is found through the index of creation
-- times (migration 000026), oldest first, among the keys created before
-- now less ttl_seconds. No index names expires_at or recovery_point, so
-- that a key's finish is a HOT update; the keys at the head of that index
-- that are not to be reaped (unfinished ones, and ones that finished long
-- after they were created) are few, and each batch steps over them. A key
-- that finished under a longer TTL than ttl_seconds is reaped when it
-- expires; one that finished under a shorter TTL is answered as new by the
-- claim once it expired (ClaimLookup's expired), and reaped a TTL after its
-- creation.
--
-- The work a key produced stays, and lets go of the key in the same
-- statement: no foreign key points at idempotency_keys (migration 000023:
-- its checks read the page of the key table's primary key that every new
-- key goes into, and on a young database made concurrent requests fail to
-- serialize), so what ON DELETE SET NULL (and, for the child key
-- generations, which are the key's alone, ON DELETE CASCADE) did is done by
-- the trigger of migration 000045, after the statement, for every table
-- declared in key_references, each found through an index led by its
-- column. Only a key's lock holder writes rows that reference it, and a
-- finished key has none, so none is written after its key is gone.
WITH deleted AS (
    DELETE FROM idempotency_keys d
    WHERE d.id IN (
        SELECT k.id FROM idempotency_keys k
        WHERE k.created_at < coalesce(sqlc.narg('now')::timestamptz, now()) - make_interval(secs => @ttl_seconds::float8)
          AND k.recovery_point = 'finished' AND k.expires_at < coalesce(sqlc.narg('now')::timestamptz, now())
        ORDER BY k.created_at, k.id
        LIMIT @batch_size
        FOR UPDATE SKIP LOCKED
    )
    RETURNING d.id AS key_id
)
SELECT count(*) FROM deleted;

-- name: ListUnfinishedKeys :many
-- A page of the unfinished keys (they live until they finish, and then a
-- TTL more), for rebuilding the key filter at start-up: keyset-paginated
-- by id through the table of unfinished keys (migration 000026), so a page
-- reads only its own rows however big the key table is. Each lives one
-- more TTL from now (live_from), by the one clock.
SELECT k.id, k.user_id, k.idempotency_key,
    coalesce(sqlc.narg('now')::timestamptz, now())::timestamptz AS live_from
FROM idempotency_keys_unfinished u
JOIN idempotency_keys k ON k.id = u.id
WHERE u.id > @after_id::uuid AND k.recovery_point <> 'finished'
ORDER BY u.id
LIMIT @page_size;

-- name: ListLiveFinishedKeys :many
-- A page of the finished keys a claim can still find, for rebuilding the
-- key filter at start-up, in the order they were created: keyset-paginated
-- by (created_at, id) through the index of creation times (migration
-- 000026), from created_from on. Rows are written in about that order, so
-- it is nearly the heap's: a page reads its rows from a few neighbouring
-- heap pages, where paging by id (a random UUID) read one random page per
-- row, at ten million keys most of them from outside shared_buffers. The
-- table holds little besides live keys (the reaper deletes the expired
-- ones), so reading from the first key costs about what reading the live
-- ones does. Each comes with the time from which it lives one more TTL
-- (live_from): its finish.
SELECT id, user_id, idempotency_key, created_at,
    (expires_at - make_interval(secs => @ttl_seconds::float8))::timestamptz AS live_from
FROM idempotency_keys
WHERE created_at >= coalesce(sqlc.narg('created_from')::timestamptz, '-infinity')
  AND (created_at, id) > (coalesce(sqlc.narg('created_from')::timestamptz, '-infinity'), @after_id::uuid)
  AND recovery_point = 'finished'
  AND expires_at > coalesce(sqlc.narg('now')::timestamptz, now())
ORDER BY created_at, id
LIMIT @page_size;

-- name: GetLockToken :one
SELECT lock_token FROM idempotency_keys WHERE id = @id;

-- name: CountUnfinishedKeysByFlow :many
-- The unfinished keys of each flow, read at start-up through the table of
-- unfinished keys: a flow this build does not declare cannot finish its
-- keys (an older build after a rollback, say).
SELECT k.flow, count(*)::bigint AS keys
FROM idempotency_keys_unfinished u
JOIN idempotency_keys k ON k.id = u.id
WHERE k.recovery_point <> 'finished'
GROUP BY k.flow
ORDER BY k.flow;

-- name: InsertUnheldKey :exec
-- A key the service makes for work of its own (the refund of a duplicate
-- charge, internal/payments/duplicate.go), inside the transaction that
-- finds the work: at started, held by nobody, and never run, so that the
-- completer takes it at its next run (last_run_at a day past: longer than
-- any completer's grace for a key it never tried). Its insert
-- trigger puts it in idempotency_keys_unfinished. A key of that name
-- already there (the same work found before) is left as it is.
INSERT INTO idempotency_keys (
    id, user_id, idempotency_key, flow, request_method, request_path, request_params, request_fingerprint,
    recovery_point, lock_token, last_run_at, created_at
) VALUES (
    @id, @user_id, @idempotency_key, @flow, @request_method, @request_path, @request_params, @request_fingerprint,
    'started', 0, now() - interval '1 day', now()
)
ON CONFLICT (user_id, idempotency_key) DO NOTHING;

-- name: ListCallWindows :many
-- The call windows of the key's attempts at its recovery point, oldest
-- first, read by the holder of its lock before a reconcile: the earlier
-- attempts' and the holder's own, from its claim or the key's move, to
-- now, kept open call_window_tail_seconds longer as the earlier ones are.
-- Overlapping windows are one (a multirange's union).
SELECT lower(w)::timestamptz AS opened_at, upper(w)::timestamptz AS ended_at
FROM idempotency_keys k,
    unnest(coalesce(k.earlier_attempts, '{}'::tstzmultirange)
        + tstzmultirange(call_window(k.last_run_at, k.point_reached_at, k.created_at,
            coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @call_window_tail_seconds::float8)))) AS w
WHERE k.id = @id AND k.lock_token = @lock_token
ORDER BY 1;
