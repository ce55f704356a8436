CREATE INDEX refunds_pending_since_idx ON refunds (updated_at)
    WHERE status = 'pending' AND stripe_refund IS NOT NULL;
DROP INDEX payments_next_check_idx;
ALTER TABLE payments DROP COLUMN reconcile_checks;
ALTER TABLE payments DROP COLUMN next_check_at;
ALTER TABLE refunds DROP COLUMN origin;
