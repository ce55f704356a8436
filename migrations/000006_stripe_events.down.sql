ALTER TABLE payments DROP COLUMN stripe_event_at;
DROP TABLE stripe_events;
