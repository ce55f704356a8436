-- name: InsertStripeEvent :execrows
-- Records an event in the inbox; 0 rows means it was seen before. An event
-- seen before whose outcome was deferred (a refund of a payment that did
-- not show its capture yet) is taken again, to be applied now.
INSERT INTO stripe_events (id, type, occurred_at, outcome)
VALUES (@id, @type, @occurred_at, 'received')
ON CONFLICT (id) DO UPDATE SET outcome = 'received' WHERE stripe_events.outcome = 'deferred';

-- name: SetStripeEventOutcome :exec
UPDATE stripe_events SET outcome = @outcome WHERE id = @id;


-- name: InsertUnprocessableStripeEvent :execrows
-- Keeps a signed event the service could not decode or apply aside, with
-- why; 0 rows means the same body was kept before.
INSERT INTO stripe_events_unprocessable (event_id, event_type, reason, payload, payload_sha256)
VALUES (sqlc.narg('event_id'), sqlc.narg('event_type'), @reason, @payload, sha256(@payload))
ON CONFLICT (payload_sha256) DO NOTHING;

-- name: ListUnprocessableStripeEvents :many
-- The events kept aside as unprocessable, newest first.
SELECT id, event_id, event_type, reason, payload, received_at
FROM stripe_events_unprocessable
ORDER BY id DESC
LIMIT @max_rows;
