-- A new key's row is written once, at the end of the transaction that
-- claims it, where that transaction leaves it (at payment_created, say):
-- one insert instead of an insert and an update. The rows the same
-- transaction writes before it (the payment, its audit record, staged
-- jobs) reference the key, so those references are checked at commit.
ALTER TABLE payments ALTER CONSTRAINT payments_idempotency_key_id_fkey DEFERRABLE INITIALLY DEFERRED;
ALTER TABLE refunds ALTER CONSTRAINT refunds_idempotency_key_id_fkey DEFERRABLE INITIALLY DEFERRED;
ALTER TABLE audit_records ALTER CONSTRAINT audit_records_idempotency_key_id_fkey DEFERRABLE INITIALLY DEFERRED;
ALTER TABLE staged_jobs ALTER CONSTRAINT staged_jobs_idempotency_key_id_fkey DEFERRABLE INITIALLY DEFERRED;
