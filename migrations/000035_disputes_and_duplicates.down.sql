DROP INDEX payments_duplicate_charges_idx;
DROP INDEX refunds_duplicate_idx;
DELETE FROM refunds WHERE origin = 'duplicate';
ALTER TABLE refunds DROP CONSTRAINT refunds_origin_check;
ALTER TABLE refunds ADD CONSTRAINT refunds_origin_check CHECK (origin IN ('api', 'external'));
ALTER TABLE payments DROP COLUMN duplicate_charges;
ALTER TABLE payments DROP COLUMN dispute_event_at;
ALTER TABLE payments DROP COLUMN dispute;
