-- The operator's console (internal/console, docs/API.md section 10): what
-- it reads besides the keys (operator.sql). Every user's rows: the console
-- is the operator's.

-- name: ConsoleListPayments :many
-- Newest first, keyset-paged; one user's only when user_id is set.
SELECT p.*, u.email FROM payments p
JOIN users u ON u.id = p.user_id
WHERE (sqlc.narg('user_id')::bigint IS NULL OR p.user_id = sqlc.narg('user_id'))
  AND (p.created_at, p.id) < (@before_created::timestamptz, @before_id::text)
ORDER BY p.created_at DESC, p.id DESC
LIMIT @row_limit;

-- name: ConsoleGetPayment :one
SELECT p.*, u.email FROM payments p
JOIN users u ON u.id = p.user_id
WHERE p.id = @id;

-- name: ConsoleListRefundsOfPayment :many
SELECT * FROM refunds WHERE payment_id = @payment_id ORDER BY created_at, id;

-- name: ConsoleListEventsOfPayment :many
-- The events about a payment or about one of its refunds (an event's data
-- is the object it is about: the payment, whose id is the payment's, or the
-- refund, whose payment is), through events_payment_idx (migration 000031).
SELECT * FROM events
WHERE coalesce(data->>'payment', data->>'id') = @payment_id::text AND user_id = @user_id
ORDER BY created_at, id;

-- name: ConsoleListReceiptsOfPayment :many
SELECT * FROM receipts WHERE payment_id = @payment_id ORDER BY created_at, kind;

-- name: ConsoleListUnprocessableForIntent :many
-- The Stripe events kept aside as unprocessable that name the payment's
-- PaymentIntent anywhere in their payload, newest first.
SELECT id, event_id, event_type, reason, received_at
FROM stripe_events_unprocessable
WHERE @intent::text <> '' AND position(@intent::text IN convert_from(payload, 'UTF8')) > 0
ORDER BY id DESC
LIMIT 20;

-- name: ConsoleListEndpoints :many
-- Newest first, with each one's deliveries pending and failed, counted
-- through the indexes of the pending deliveries and of the failed ones
-- (migration 000032).
SELECT e.*, u.email,
    (SELECT count(*) FROM webhook_deliveries d WHERE d.endpoint_id = e.id AND d.status = 'pending')::bigint AS pending,
    (SELECT count(*) FROM webhook_deliveries d WHERE d.endpoint_id = e.id AND d.status = 'failed')::bigint AS failed
FROM webhook_endpoints e
JOIN users u ON u.id = e.user_id
WHERE (sqlc.narg('user_id')::bigint IS NULL OR e.user_id = sqlc.narg('user_id'))
ORDER BY e.created_at DESC, e.id DESC
LIMIT @row_limit;

-- name: ConsoleGetEndpoint :one
SELECT e.*, u.email FROM webhook_endpoints e
JOIN users u ON u.id = e.user_id
WHERE e.id = @id;

-- name: ConsoleListDeliveriesOfEndpoint :many
-- An endpoint's deliveries, newest first, with the event's type, through
-- webhook_deliveries_endpoint_idx (migration 000032).
SELECT d.*, ev.type AS event_type
FROM webhook_deliveries d
JOIN events ev ON ev.id = d.event_id
WHERE d.endpoint_id = @endpoint_id
ORDER BY d.created_at DESC, d.event_id DESC
LIMIT @row_limit;

-- name: ConsoleListReceipts :many
-- Receipts, those not sent (pending, or given up) first, then the sent
-- ones, each newest first. Each part is read from its index in its order
-- (migration 000031), at most a page of each, so a view reads two pages of
-- rows however many receipts were sent.
SELECT r.*, p.user_id FROM (
    (SELECT * FROM receipts WHERE sent_at IS NULL ORDER BY created_at DESC LIMIT @row_limit)
    UNION ALL
    (SELECT * FROM receipts WHERE sent_at IS NOT NULL ORDER BY created_at DESC LIMIT @row_limit)
) r
JOIN payments p ON p.id = r.payment_id
ORDER BY (r.sent_at IS NULL) DESC, r.created_at DESC
LIMIT @row_limit;

-- name: ConsoleCountUnprocessable :one
SELECT count(*)::bigint FROM stripe_events_unprocessable;
