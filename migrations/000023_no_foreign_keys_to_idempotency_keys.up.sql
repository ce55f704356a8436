-- Nothing references idempotency_keys (id) by a foreign key any more (issue
-- 29, docs/failure-scenarios.md "A young database"). Under SERIALIZABLE a
-- foreign-key check is a read of the key table's primary key, and predicate
-- locks on b-trees are page-level: on a young database, where that index is
-- a page or two, every payment's and audit record's check read the very page
-- every other claim inserts its key into, and concurrent requests with
-- different keys failed to serialize. The columns and their UNIQUE indexes
-- stay: a flow still finds its earlier work by its key, and at most one
-- payment, refund or endpoint, and one audit record per action, is made by
-- a key.
--
-- What ON DELETE SET NULL and ON DELETE CASCADE did is done by the two
-- statements that delete keys (ReapExpiredKeys and
-- DeleteExpiredIdempotencyKey, in internal/db/queries/idempotency_keys.sql),
-- in the statement that deletes them. Only the request holding a key's lock
-- writes rows that reference it, and only finished keys are deleted, so no
-- reference to a deleted key can be written afterwards.
ALTER TABLE payments DROP CONSTRAINT payments_idempotency_key_id_fkey;
ALTER TABLE audit_records DROP CONSTRAINT audit_records_idempotency_key_id_fkey;
ALTER TABLE staged_jobs DROP CONSTRAINT staged_jobs_idempotency_key_id_fkey;
ALTER TABLE refunds DROP CONSTRAINT refunds_idempotency_key_id_fkey;
ALTER TABLE child_key_generations DROP CONSTRAINT child_key_generations_idempotency_key_id_fkey;
ALTER TABLE webhook_endpoints DROP CONSTRAINT webhook_endpoints_idempotency_key_id_fkey;
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_idempotency_key_id_fkey;
