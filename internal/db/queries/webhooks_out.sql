-- Webhooks to merchants: endpoints, deliveries and their attempts.

-- name: LockEndpointsOfUser :exec
-- An endpoint gets every event created after it, and none created before
-- it (docs/API.md section 7). "Created" is the database's clock for both
-- (migration 000020), and the per-user lock below makes "created before
-- the event" and "visible to whoever writes the event's deliveries" agree:
--
--   - a transaction creating an endpoint of the user takes the lock
--     (exclusive) first, then stamps the endpoint's created_at with
--     clock_timestamp(), and holds the lock until it commits;
--   - a transaction writing events' deliveries (the drain's
--     WriteStagedEvents, the event worker's InsertWebhookDeliveries) takes
--     it (shared) for each user of its events, in a statement before the
--     one that reads the endpoints, so that statement's snapshot is taken
--     after the lock is held.
--
-- An event's created is taken before its change commits, so before any
-- drain of it starts. An endpoint older than the event took the lock
-- before that, so the drain waits for its commit and then sees it; an
-- endpoint that takes the lock after the drain has it is stamped later
-- than the drain's start, so later than the event. Drains share the lock
-- with each other; they wait only for endpoint creations of their users,
-- which are rare and short. The lock is an advisory one, in a namespace
-- of its own (the two-int4 form, 2003133032 = "webh"), keyed by the user
-- id modulo 2^31-1: two users sharing a key only wait for each other.
--
-- This one is taken by the transaction that creates an endpoint, before
-- its row.
SELECT pg_advisory_xact_lock(2003133032, mod(@user_id::bigint, 2147483647)::int4);

-- name: LockEndpointsOfUserShared :exec
-- Taken by the event worker before it writes an event's deliveries.
SELECT pg_advisory_xact_lock_shared(2003133032, mod(@user_id::bigint, 2147483647)::int4);

-- name: LockEndpointsOfStagedEvents :exec
-- Taken by the drain before WriteStagedEvents, for the users of the staged
-- events staged_ids, in the keys' order (no two drains wait on each other,
-- and an endpoint's creation holds one key only, so no cycle can form).
SELECT count(pg_advisory_xact_lock_shared(2003133032, k.key))
FROM (
    SELECT DISTINCT mod((s.args->>'user_id')::bigint, 2147483647)::int4 AS key
    FROM staged_jobs s
    WHERE s.id = ANY(@staged_ids::bigint[]) AND s.kind = 'merchant_event'
    ORDER BY 1
) k;

-- name: InsertWebhookEndpoint :one
-- Run after LockEndpointsOfUser, in its transaction: created_at is the
-- database's clock once the lock is held, not the transaction's start.
INSERT INTO webhook_endpoints (id, user_id, url, enabled_events, description, secret, idempotency_key_id, created_at)
VALUES (@id, @user_id, @url, @enabled_events::text[], sqlc.narg('description'), @secret, @idempotency_key_id, clock_timestamp())
RETURNING *;

-- name: GetWebhookEndpoint :one
SELECT * FROM webhook_endpoints WHERE id = @id AND user_id = @user_id AND deleted_at IS NULL;

-- name: ListWebhookEndpoints :many
-- Newest first, keyset-paginated like payments.
SELECT * FROM webhook_endpoints
WHERE user_id = @user_id AND deleted_at IS NULL
  AND (created_at, id) < (@before_created::timestamptz, @before_id::text)
ORDER BY created_at DESC, id DESC
LIMIT @row_limit;

-- name: DeleteWebhookEndpoint :execrows
UPDATE webhook_endpoints SET deleted_at = now()
WHERE id = @id AND user_id = @user_id AND deleted_at IS NULL;

-- name: InsertWebhookDeliveries :many
-- Run after LockEndpointsOfUserShared, in its transaction. One delivery
-- per enabled endpoint of the user that existed when the event was created
-- (docs/API.md section 7: an endpoint never gets events older than itself,
-- even one the event worker writes after it was made), still exists, and
-- subscribes to the event: its enabled_events hold one of
-- patterns (the type, its prefix "refund.*", "*").
INSERT INTO webhook_deliveries (event_id, endpoint_id, user_id)
SELECT @event_id, e.id, e.user_id
FROM webhook_endpoints e
WHERE e.user_id = @user_id AND e.deleted_at IS NULL AND e.status = 'enabled'
  AND e.created_at <= @event_created::timestamptz
  AND e.enabled_events && @patterns::text[]
ON CONFLICT (event_id, endpoint_id) DO NOTHING
RETURNING endpoint_id, cycle;

-- name: RestartWebhookDeliveries :many
-- A redelivery: every delivery of the event whose endpoint still exists,
-- is enabled and subscribes to it starts a new cycle of attempts, due now.
UPDATE webhook_deliveries d
SET status = 'pending', cycle = d.cycle + 1, next_attempt_at = now(), pending_since = now(),
    updated_at = now(), idempotency_key_id = @idempotency_key_id
FROM webhook_endpoints e
WHERE d.event_id = @event_id AND d.user_id = @user_id
  AND e.id = d.endpoint_id AND e.deleted_at IS NULL AND e.status = 'enabled'
  AND e.enabled_events && @patterns::text[]
RETURNING d.*;

-- name: ListWebhookDeliveries :many
SELECT * FROM webhook_deliveries
WHERE event_id = @event_id AND user_id = @user_id
ORDER BY created_at, endpoint_id;

-- name: GetDeliveryToSend :one
-- What a delivery job needs, in one short read: the delivery, its
-- endpoint and its event.
SELECT d.status, d.cycle, e.url, e.secret, e.deleted_at AS endpoint_deleted_at,
       ev.id AS event_id, ev.type AS event_type, ev.data AS event_data, ev.created_at AS event_created_at
FROM webhook_deliveries d
JOIN webhook_endpoints e ON e.id = d.endpoint_id
JOIN events ev ON ev.id = d.event_id
WHERE d.event_id = @event_id AND d.endpoint_id = @endpoint_id;

-- name: RecordWebhookAttempt :execrows
-- Records one attempt of the delivery's cycle: the attempt in the log, and
-- its outcome on the delivery, unless a redelivery started another cycle
-- meanwhile (then only the log keeps it).
WITH attempt AS (
    INSERT INTO webhook_attempts (event_id, endpoint_id, cycle, attempted_at, duration_ms, status_code, error, succeeded)
    VALUES (@event_id, @endpoint_id, @cycle, @attempted_at, @duration_ms, sqlc.narg('status_code'), sqlc.narg('error'), @status = 'succeeded')
)
UPDATE webhook_deliveries d
SET attempts = d.attempts + 1, status = @status, last_status_code = sqlc.narg('status_code'),
    last_error = sqlc.narg('error'), next_attempt_at = sqlc.narg('next_attempt_at'), updated_at = now()
WHERE d.event_id = @event_id AND d.endpoint_id = @endpoint_id AND d.cycle = @cycle AND d.status = 'pending';

-- name: FailDeliveryOfDeletedEndpoint :exec
-- The endpoint was deleted before the attempt: nothing is sent, and the
-- delivery stops.
UPDATE webhook_deliveries
SET status = 'failed', last_error = 'endpoint deleted', next_attempt_at = NULL, updated_at = now()
WHERE event_id = @event_id AND endpoint_id = @endpoint_id AND cycle = @cycle AND status = 'pending';

-- name: OldestPendingDeliveryAge :one
-- Seconds since the oldest pending delivery became pending; 0 when none is.
SELECT coalesce(extract(epoch FROM now() - min(d.pending_since)), 0)::float8 AS age_seconds
FROM webhook_deliveries d
JOIN webhook_endpoints e ON e.id = d.endpoint_id AND e.deleted_at IS NULL
WHERE d.status = 'pending';

-- name: ListWebhookAttempts :many
SELECT * FROM webhook_attempts
WHERE event_id = @event_id AND endpoint_id = @endpoint_id
ORDER BY id;
