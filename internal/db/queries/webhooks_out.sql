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
INSERT INTO webhook_deliveries (event_id, endpoint_id, user_id, trace_parent)
SELECT @event_id, e.id, e.user_id, sqlc.narg('trace_parent')::text
FROM webhook_endpoints e
WHERE e.user_id = @user_id AND e.deleted_at IS NULL AND e.status = 'enabled'
  AND e.created_at <= @event_created::timestamptz
  AND e.enabled_events && @patterns::text[]
ON CONFLICT (event_id, endpoint_id) DO NOTHING
RETURNING endpoint_id, cycle;

-- name: RestartWebhookDeliveries :many
-- A redelivery: every delivery of the event whose endpoint still exists,
-- is enabled and subscribes to it starts a new cycle of attempts, due now,
-- whatever the lease of an attempt of the earlier cycle still in flight
-- (its record finds another cycle and only logs it).
UPDATE webhook_deliveries d
SET status = 'pending', cycle = d.cycle + 1, cycle_attempts = 0, next_attempt_at = now(), leased_until = NULL,
    pending_since = now(), updated_at = now(), idempotency_key_id = @idempotency_key_id,
    trace_parent = sqlc.narg('trace_parent')::text
FROM webhook_endpoints e
WHERE d.event_id = @event_id AND d.user_id = @user_id
  AND e.id = d.endpoint_id AND e.deleted_at IS NULL AND e.status = 'enabled'
  AND e.enabled_events && @patterns::text[]
RETURNING d.*;

-- name: ListWebhookDeliveries :many
SELECT * FROM webhook_deliveries
WHERE event_id = @event_id AND user_id = @user_id
ORDER BY created_at, endpoint_id;

-- name: ClaimDueDeliveries :many
-- The webhook dispatcher's claim (merchanthooks.Dispatcher): up to
-- batch_size pending deliveries that are due, oldest due first, with what
-- their attempts need (the endpoint and the event), so that no endpoint has
-- more than per_endpoint attempts in flight from this dispatcher: the
-- endpoints in inflight_endpoints have inflight_counts already (those at
-- per_endpoint are left out of the scan). Each is leased: leased_until is
-- set lease_seconds ahead, so no other dispatcher claims it while its
-- attempt runs, and a dispatcher that dies mid-attempt leaves it due again
-- when the lease lapses. The lease is a column no index names, so the claim
-- is a HOT update (migration 000027); next_attempt_at stays where it was,
-- and the scan reads past the rows whose lease is live (at most the
-- attempts in flight). cycle_attempts counts the claim: it is the attempt's
-- number in its cycle, the retry schedule's position. SKIP LOCKED lets
-- dispatchers claim side by side.
WITH due AS (
    SELECT r.event_id, r.endpoint_id
    FROM (
        SELECT c.event_id, c.endpoint_id, c.next_attempt_at,
               row_number() OVER (PARTITION BY c.endpoint_id ORDER BY c.next_attempt_at) AS nth
        FROM (
            SELECT d.event_id, d.endpoint_id, d.next_attempt_at
            FROM webhook_deliveries d
            WHERE d.status = 'pending' AND d.next_attempt_at <= now()
              AND (d.leased_until IS NULL OR d.leased_until <= now())
              AND NOT (d.endpoint_id = ANY(@busy::text[]))
            ORDER BY d.next_attempt_at
            LIMIT @scan_size
        ) c
    ) r
    LEFT JOIN (
        SELECT unnest(@inflight_endpoints::text[]) AS endpoint_id, unnest(@inflight_counts::int[]) AS n
    ) f ON f.endpoint_id = r.endpoint_id
    WHERE r.nth + coalesce(f.n, 0) <= @per_endpoint::int
    ORDER BY r.next_attempt_at
    LIMIT @batch_size
), claimed AS (
    -- Each chosen row by its key (LATERAL: a lookup each, never a scan of
    -- every due row, however long the backlog), locked unless another
    -- dispatcher has it, and still due and unleased once locked. "Not
    -- succeeded and not failed" is "pending" (the column's CHECK), written
    -- so that no partial index (WHERE status = 'pending') can serve the
    -- lookup: once the table had statistics, the planner chose to scan all
    -- of webhook_deliveries_due_idx for each row instead of one probe of
    -- the primary key, a read of every due row per row claimed.
    SELECT l.event_id, l.endpoint_id
    FROM due, LATERAL (
        SELECT d.event_id, d.endpoint_id
        FROM webhook_deliveries d
        WHERE d.event_id = due.event_id AND d.endpoint_id = due.endpoint_id
          AND d.status NOT IN ('succeeded', 'failed') AND d.next_attempt_at <= now()
          AND (d.leased_until IS NULL OR d.leased_until <= now())
        FOR UPDATE SKIP LOCKED
    ) l
)
UPDATE webhook_deliveries d
SET leased_until = now() + make_interval(0, 0, 0, 0, 0, 0, @lease_seconds::float8), cycle_attempts = d.cycle_attempts + 1
FROM claimed c, webhook_endpoints e, events ev
WHERE d.event_id = c.event_id AND d.endpoint_id = c.endpoint_id
  AND e.id = d.endpoint_id AND ev.id = d.event_id
RETURNING d.event_id, d.endpoint_id, d.cycle, d.cycle_attempts, d.trace_parent,
          e.url, e.secret, e.deleted_at AS endpoint_deleted_at,
          ev.type AS event_type, ev.data AS event_data, ev.created_at AS event_created_at;

-- name: RecordWebhookAttempts :execrows
-- Records a batch of attempts (the arrays are parallel, one entry per
-- attempt): each in the log, and its outcome on its delivery, unless a
-- redelivery started another cycle meanwhile (then only the log keeps it).
-- A status_code of 0 is none (no answer), an empty error none (success);
-- next_attempt_at counts only for a delivery left pending. The attempt's
-- lease ends with its record: a failed attempt's delivery is due at its
-- next_attempt_at, not once the lease lapses.
-- "Not succeeded and not failed" is "pending", written so that no partial
-- index (WHERE status = 'pending') can serve the join, as in
-- ClaimDueDeliveries: with status = 'pending' the planner hashed the batch
-- and read every pending delivery through webhook_deliveries_due_idx, each
-- batch's cost growing with the backlog (make bench F: 6 ms a call, the
-- background's costliest statement), instead of a probe of the primary key
-- per attempt (TestRecordWebhookAttempts_readsEachDeliveryByItsKey).
WITH outcome AS (
    SELECT unnest(@event_ids::text[]) AS event_id, unnest(@endpoint_ids::text[]) AS endpoint_id,
           unnest(@cycles::int[]) AS cycle, unnest(@statuses::text[]) AS status,
           unnest(@attempt_times::timestamptz[]) AS attempted_at, unnest(@duration_ms::int[]) AS duration_ms,
           unnest(@status_codes::int[]) AS status_code, unnest(@errors::text[]) AS error,
           unnest(@next_attempts::timestamptz[]) AS next_attempt_at
), attempt AS (
    INSERT INTO webhook_attempts (event_id, endpoint_id, cycle, attempted_at, duration_ms, status_code, error, succeeded)
    SELECT o.event_id, o.endpoint_id, o.cycle, o.attempted_at, o.duration_ms, nullif(o.status_code, 0), nullif(o.error, ''),
           o.status = 'succeeded'
    FROM outcome o
    ORDER BY o.attempted_at
)
UPDATE webhook_deliveries d
SET attempts = d.attempts + 1, status = o.status, last_status_code = nullif(o.status_code, 0),
    last_error = nullif(o.error, ''), updated_at = now(),
    next_attempt_at = CASE WHEN o.status = 'pending' THEN o.next_attempt_at END, leased_until = NULL
FROM outcome o
WHERE d.event_id = o.event_id AND d.endpoint_id = o.endpoint_id AND d.cycle = o.cycle
  AND d.status NOT IN ('succeeded', 'failed');

-- name: FailDeliveryOfDeletedEndpoint :exec
-- The endpoint was deleted before the attempt: nothing is sent, and the
-- delivery stops.
UPDATE webhook_deliveries
SET status = 'failed', last_error = 'endpoint deleted', next_attempt_at = NULL, leased_until = NULL, updated_at = now()
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
