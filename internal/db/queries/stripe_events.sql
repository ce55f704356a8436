-- name: InsertStripeEvent :execrows
-- Records an event in the inbox; 0 rows means it was seen before.
INSERT INTO stripe_events (id, type, occurred_at, outcome)
VALUES (@id, @type, @occurred_at, 'received')
ON CONFLICT (id) DO NOTHING;

-- name: SetStripeEventOutcome :exec
UPDATE stripe_events SET outcome = @outcome WHERE id = @id;

