-- Which tables reference idempotency keys is declared once, here, and every
-- statement that deletes keys follows the declaration (issue 41). No foreign
-- key points at idempotency_keys (migration 000023), so what ON DELETE SET
-- NULL and ON DELETE CASCADE did was written out by hand, one CTE per table,
-- in the two statements that delete keys: a team adding a table with an
-- idempotency_key_id column had to know to add it there, and only
-- docs/architecture.md said so.
--
-- Now a table that carries the key that produced its rows declares it with
-- one row of key_references, in the migration that creates the table:
--
--   INSERT INTO key_references (table_name, on_key_deleted) VALUES ('payouts', 'let_go');
--
-- 'let_go' sets the column to NULL (the row is the request's work, and
-- stays); 'delete' deletes the row (it is the key's alone, as a child key's
-- generations are). A trigger on idempotency_keys, run once per statement
-- that deletes keys, whichever statement it is, applies the declaration to
-- the keys that statement deleted, through each table's index led by the
-- column. TestKeyReferences_everyTableWithTheColumnIsDeclared holds every
-- table with the column to a row here.
CREATE TABLE key_references (
    table_name     text PRIMARY KEY,
    column_name    text NOT NULL DEFAULT 'idempotency_key_id',
    on_key_deleted text NOT NULL CHECK (on_key_deleted IN ('let_go', 'delete'))
);

INSERT INTO key_references (table_name, on_key_deleted) VALUES
    ('payments', 'let_go'),
    ('audit_records', 'let_go'),
    ('staged_jobs', 'let_go'),
    ('refunds', 'let_go'),
    ('webhook_endpoints', 'let_go'),
    ('webhook_deliveries', 'let_go'),
    ('child_key_generations', 'delete');

-- let_go_of_deleted_keys runs after each statement that deleted keys, with
-- the deleted rows as its transition table. Dynamic SQL, built from the
-- declaration only (identifiers quoted by format's %I), never from input.
CREATE FUNCTION let_go_of_deleted_keys() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ids uuid[];
    ref record;
BEGIN
    SELECT array_agg(id) INTO ids FROM deleted_keys;
    IF ids IS NULL THEN
        RETURN NULL;
    END IF;
    FOR ref IN SELECT table_name, column_name, on_key_deleted FROM key_references ORDER BY table_name LOOP
        IF ref.on_key_deleted = 'delete' THEN
            EXECUTE format('DELETE FROM %I WHERE %I = ANY ($1)', ref.table_name, ref.column_name) USING ids;
        ELSE
            EXECUTE format('UPDATE %I SET %I = NULL WHERE %I = ANY ($1)', ref.table_name, ref.column_name, ref.column_name) USING ids;
        END IF;
    END LOOP;
    RETURN NULL;
END $$;

CREATE TRIGGER idempotency_keys_let_go_on_delete
    AFTER DELETE ON idempotency_keys
    REFERENCING OLD TABLE AS deleted_keys
    FOR EACH STATEMENT EXECUTE FUNCTION let_go_of_deleted_keys();
