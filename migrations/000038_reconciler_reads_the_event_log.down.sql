ALTER TABLE payments ADD COLUMN next_check_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE payments ADD COLUMN reconcile_checks integer NOT NULL DEFAULT 0;
CREATE INDEX payments_next_check_idx ON payments (next_check_at);
DROP TABLE payments_awaiting_stripe;
DROP TABLE stripe_event_cursor;
