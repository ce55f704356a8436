CREATE INDEX refunds_pending_since_idx ON refunds (updated_at)
    WHERE status = 'pending' AND stripe_refund IS NOT NULL;
DROP INDEX payments_reconcile_next_idx;
DROP INDEX payments_reconcile_unchecked_idx;
ALTER TABLE payments DROP COLUMN reconcile_checks;
ALTER TABLE payments DROP COLUMN next_check_at;
ALTER TABLE refunds DROP COLUMN origin;
