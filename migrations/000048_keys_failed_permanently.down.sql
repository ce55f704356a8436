ALTER TABLE idempotency_keys DROP COLUMN attention_error;
