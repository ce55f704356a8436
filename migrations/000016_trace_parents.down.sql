ALTER TABLE staged_jobs DROP COLUMN trace_parent;
ALTER TABLE idempotency_keys DROP COLUMN trace_parent;
