-- Webhooks to merchants: endpoints, deliveries and their attempts.

-- name: InsertWebhookEndpoint :one
INSERT INTO webhook_endpoints (id, user_id, url, enabled_events, description, secret, idempotency_key_id)
VALUES (@id, @user_id, @url, @enabled_events::text[], sqlc.narg('description'), @secret, @idempotency_key_id)
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
-- One delivery per enabled endpoint of the user that existed when the
-- event was created (API.md: an endpoint never gets events older than
-- itself, even one the event worker writes after it was made), still
-- exists, and subscribes to the event: its enabled_events hold one of
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
