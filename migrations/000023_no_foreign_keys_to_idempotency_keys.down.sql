-- Back to foreign keys. A reference to a key that is gone (none should be:
-- the deleting statements clear them) is cleared first, as the constraint's
-- ON DELETE action would have, so that the constraints can be added.
UPDATE payments SET idempotency_key_id = NULL
WHERE idempotency_key_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.id = payments.idempotency_key_id);
UPDATE audit_records SET idempotency_key_id = NULL
WHERE idempotency_key_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.id = audit_records.idempotency_key_id);
UPDATE staged_jobs SET idempotency_key_id = NULL
WHERE idempotency_key_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.id = staged_jobs.idempotency_key_id);
UPDATE refunds SET idempotency_key_id = NULL
WHERE idempotency_key_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.id = refunds.idempotency_key_id);
DELETE FROM child_key_generations
WHERE NOT EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.id = child_key_generations.idempotency_key_id);
UPDATE webhook_endpoints SET idempotency_key_id = NULL
WHERE idempotency_key_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.id = webhook_endpoints.idempotency_key_id);
UPDATE webhook_deliveries SET idempotency_key_id = NULL
WHERE idempotency_key_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.id = webhook_deliveries.idempotency_key_id);

ALTER TABLE payments ADD CONSTRAINT payments_idempotency_key_id_fkey
    FOREIGN KEY (idempotency_key_id) REFERENCES idempotency_keys (id) ON DELETE SET NULL;
ALTER TABLE audit_records ADD CONSTRAINT audit_records_idempotency_key_id_fkey
    FOREIGN KEY (idempotency_key_id) REFERENCES idempotency_keys (id) ON DELETE SET NULL;
ALTER TABLE staged_jobs ADD CONSTRAINT staged_jobs_idempotency_key_id_fkey
    FOREIGN KEY (idempotency_key_id) REFERENCES idempotency_keys (id) ON DELETE SET NULL;
ALTER TABLE refunds ADD CONSTRAINT refunds_idempotency_key_id_fkey
    FOREIGN KEY (idempotency_key_id) REFERENCES idempotency_keys (id) ON DELETE SET NULL;
ALTER TABLE child_key_generations ADD CONSTRAINT child_key_generations_idempotency_key_id_fkey
    FOREIGN KEY (idempotency_key_id) REFERENCES idempotency_keys (id) ON DELETE CASCADE;
ALTER TABLE webhook_endpoints ADD CONSTRAINT webhook_endpoints_idempotency_key_id_fkey
    FOREIGN KEY (idempotency_key_id) REFERENCES idempotency_keys (id) ON DELETE SET NULL;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_idempotency_key_id_fkey
    FOREIGN KEY (idempotency_key_id) REFERENCES idempotency_keys (id) ON DELETE SET NULL;
