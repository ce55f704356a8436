ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_expires_when_finished;
UPDATE idempotency_keys SET expires_at = created_at + interval '24 hours' WHERE expires_at IS NULL;
ALTER TABLE idempotency_keys ALTER COLUMN expires_at SET NOT NULL;
