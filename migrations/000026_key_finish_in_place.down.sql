ALTER TABLE idempotency_keys RESET (fillfactor);
DROP TRIGGER idempotency_keys_unfinished_on_delete ON idempotency_keys;
DROP TRIGGER idempotency_keys_unfinished_on_finish ON idempotency_keys;
DROP TRIGGER idempotency_keys_unfinished_on_insert ON idempotency_keys;
DROP FUNCTION idempotency_keys_track_unfinished();
DROP TABLE idempotency_keys_unfinished;
DROP INDEX idempotency_keys_created_idx;
CREATE INDEX idempotency_keys_unfinished_idx ON idempotency_keys (last_run_at)
    WHERE recovery_point <> 'finished';
CREATE INDEX idempotency_keys_expiry_idx ON idempotency_keys (expires_at)
    WHERE recovery_point = 'finished';
