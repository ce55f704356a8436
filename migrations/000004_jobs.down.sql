DROP INDEX idempotency_keys_expiry_idx;
DROP INDEX idempotency_keys_unfinished_idx;
ALTER TABLE idempotency_keys DROP COLUMN needs_attention_at, DROP COLUMN completer_attempts;
DROP TABLE receipts;
DROP TABLE events;
