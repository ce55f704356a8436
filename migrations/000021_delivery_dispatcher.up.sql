-- Webhook deliveries are dispatched from their own table (package
-- merchanthooks, Dispatcher) instead of a River job each: a pending
-- delivery is due at next_attempt_at, and a dispatcher claims due ones in
-- batches (FOR UPDATE SKIP LOCKED), moving next_attempt_at past its
-- attempt (a lease: a dispatcher that dies mid-attempt leaves the delivery
-- due again when the lease lapses). A new delivery is due at once.
ALTER TABLE webhook_deliveries ALTER COLUMN next_attempt_at SET DEFAULT now();
UPDATE webhook_deliveries SET next_attempt_at = now() WHERE status = 'pending' AND next_attempt_at IS NULL;

-- The attempts claimed in the delivery's current cycle: the retry
-- schedule's position (a redelivery starts the next cycle at 0). An
-- attempt counts when it is claimed, so one cut off by a crash counts too.
ALTER TABLE webhook_deliveries ADD COLUMN cycle_attempts integer NOT NULL DEFAULT 0;

-- The traceparent of the request whose event (or redelivery) this is: the
-- attempts carry on its trace, as the delivery's River job did. The event
-- keeps its request's too (the drain copies it from the event's staged
-- row to the event, and from the event to its deliveries).
ALTER TABLE webhook_deliveries ADD COLUMN trace_parent text;
ALTER TABLE events ADD COLUMN trace_parent text;

CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
