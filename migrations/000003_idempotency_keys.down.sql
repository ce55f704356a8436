DROP TABLE staged_jobs;
DROP TABLE audit_records;
ALTER TABLE payments DROP COLUMN idempotency_key_id;
DROP TABLE idempotency_keys;
