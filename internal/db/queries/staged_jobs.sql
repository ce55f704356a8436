-- name: InsertStagedJobs :exec
-- Stages jobs, one row each (kinds[i] with args[i]), in one statement,
-- with the traceparent of the request that staged them, when it is traced.
INSERT INTO staged_jobs (kind, args, idempotency_key_id, trace_parent)
SELECT unnest(@kinds::text[]), unnest(@args::text[])::jsonb, sqlc.narg('idempotency_key_id')::uuid,
    sqlc.narg('trace_parent')::text;

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

-- name: WriteStagedEvents :execrows
-- Writes the events of the staged merchant_event jobs staged_ids (their
-- arguments are stagedjobs.EventArgs, read here field by field), and in the
-- same statement one delivery per enabled endpoint of the event's user that
-- existed when the event was created (docs/API.md: an endpoint never gets
-- events older than itself), still exists, and subscribes to its type, the
-- type's prefix ("refund.*") or "*". An event already written (a drain
-- that ran twice) writes nothing, deliveries included. A delivery is due
-- at once (next_attempt_at's default): the webhook dispatcher
-- (merchanthooks.Dispatcher) finds it there, with its event's traceparent
-- (kept on the event too: the statement reads the staged rows once, and
-- a join back to them, on an expression of their arguments, cost a
-- comparison per pair of event and delivery).
-- Returns how many deliveries it wrote. An event's created is its staged
-- row's created_at: the database's clock in the transaction of its change,
-- the clock endpoints are stamped with. Run after
-- LockEndpointsOfStagedEvents (webhooks_out.sql), in its transaction.
WITH written AS (
    INSERT INTO events (id, user_id, type, data, created_at, trace_parent)
    SELECT s.args->>'event_id', (s.args->>'user_id')::bigint, s.args->>'type', s.args->'object',
           s.created_at, s.trace_parent
    FROM staged_jobs s
    WHERE s.id = ANY(@staged_ids::bigint[]) AND s.kind = 'merchant_event'
    ORDER BY s.id
    ON CONFLICT (id) DO NOTHING
    RETURNING id, user_id, type, created_at, trace_parent
)
INSERT INTO webhook_deliveries (event_id, endpoint_id, user_id, trace_parent)
SELECT w.id, e.id, e.user_id, w.trace_parent
FROM written w
JOIN webhook_endpoints e ON e.user_id = w.user_id
WHERE e.deleted_at IS NULL AND e.status = 'enabled'
  AND e.created_at <= w.created_at
  AND e.enabled_events && ARRAY['*', w.type, split_part(w.type, '.', 1) || '.*']
ON CONFLICT (event_id, endpoint_id) DO NOTHING;

-- name: WriteStagedReceipts :execrows
-- Writes the receipts of the staged receipt_email jobs staged_ids (their
-- arguments are stagedjobs.ReceiptArgs, read here field by field), each due
-- at once for the receipt sender (stagedjobs.ReceiptSender), to its user's
-- address as it is now. Its kind is stagedjobs' receiptKind: "payment", or
-- "refund:<refund id>". A receipt already written (a drain that ran twice,
-- or a River receipt job of an earlier version) is left as it is. Arguments
-- that name no user or no payment fail the statement (NOT NULL, the
-- payment's foreign key): the drain then hands the batch to River.
INSERT INTO receipts (payment_id, kind, recipient, amount, currency, next_attempt_at, trace_parent)
SELECT s.args->>'payment',
       CASE WHEN coalesce(s.args->>'refund', '') <> '' THEN (s.args->>'reason') || ':' || (s.args->>'refund')
            ELSE s.args->>'reason' END,
       u.email, (s.args->>'amount')::bigint, s.args->>'currency', now(), s.trace_parent
FROM staged_jobs s
LEFT JOIN users u ON u.id = (s.args->>'user_id')::bigint
WHERE s.id = ANY(@staged_ids::bigint[]) AND s.kind = 'receipt_email'
ORDER BY s.id
ON CONFLICT (payment_id, kind) DO NOTHING;
