-- Before this migration a claim's lease was next_attempt_at itself: a lease
-- still running is carried back into it, so that the earlier version's
-- claim does not take a delivery or a receipt whose attempt is in flight.
UPDATE webhook_deliveries SET next_attempt_at = leased_until
WHERE status = 'pending' AND leased_until > next_attempt_at;
ALTER TABLE webhook_deliveries DROP COLUMN leased_until;
UPDATE receipts SET next_attempt_at = sending_until
WHERE next_attempt_at IS NOT NULL AND sending_until > next_attempt_at;

ALTER TABLE webhook_deliveries RESET (fillfactor);
ALTER TABLE receipts RESET (fillfactor);
