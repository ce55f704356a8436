-- Pending deliveries have no River job once this is undone: a redelivery
-- (POST /v1/events/{id}/redeliver) queues them again.
DROP INDEX webhook_deliveries_due_idx;
ALTER TABLE events DROP COLUMN trace_parent;
ALTER TABLE webhook_deliveries DROP COLUMN trace_parent;
ALTER TABLE webhook_deliveries DROP COLUMN cycle_attempts;
ALTER TABLE webhook_deliveries ALTER COLUMN next_attempt_at DROP DEFAULT;
