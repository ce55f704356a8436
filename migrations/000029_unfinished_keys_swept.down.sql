-- Back to migration 000026's triggers, which keep idempotency_keys_unfinished
-- exact: the rows of finished or deleted keys are swept first.
DROP TRIGGER idempotency_keys_unfinished_on_insert ON idempotency_keys;
DROP FUNCTION idempotency_keys_note_unfinished();

DELETE FROM idempotency_keys_unfinished u
WHERE NOT EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.id = u.id AND k.recovery_point <> 'finished');

CREATE FUNCTION idempotency_keys_track_unfinished() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.recovery_point <> 'finished' THEN
        DELETE FROM idempotency_keys_unfinished WHERE id = OLD.id;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.recovery_point <> 'finished' THEN
        INSERT INTO idempotency_keys_unfinished (id) VALUES (NEW.id);
    END IF;
    RETURN NULL;
END $$;
ALTER FUNCTION idempotency_keys_track_unfinished() SET enable_seqscan = off;
ALTER FUNCTION idempotency_keys_track_unfinished() SET enable_bitmapscan = off;

CREATE TRIGGER idempotency_keys_unfinished_on_insert
    AFTER INSERT ON idempotency_keys
    FOR EACH ROW WHEN (NEW.recovery_point <> 'finished')
    EXECUTE FUNCTION idempotency_keys_track_unfinished();
CREATE TRIGGER idempotency_keys_unfinished_on_finish
    AFTER UPDATE OF recovery_point ON idempotency_keys
    FOR EACH ROW WHEN ((OLD.recovery_point = 'finished') IS DISTINCT FROM (NEW.recovery_point = 'finished'))
    EXECUTE FUNCTION idempotency_keys_track_unfinished();
CREATE TRIGGER idempotency_keys_unfinished_on_delete
    AFTER DELETE ON idempotency_keys
    FOR EACH ROW WHEN (OLD.recovery_point <> 'finished')
    EXECUTE FUNCTION idempotency_keys_track_unfinished();
