-- A key's finish no longer takes its row out of idempotency_keys_unfinished
-- (migration 000026); the completer sweeps the rows of finished keys out,
-- in batches, at the start of each of its runs (SweepUnfinishedKeys, in
-- internal/db/queries/idempotency_keys.sql). So the table holds every key
-- that is not finished, and, until the next sweep, some that finished. Every
-- statement that reads it joins the key and reads its recovery_point, as
-- they did already.
--
-- Why: the finish's trigger cost more than the rest of the finish. It was
-- an AFTER UPDATE trigger, a PL/pgSQL call with its own settings, and a
-- delete that read the table's primary key inside the request's
-- SERIALIZABLE transaction. Measured (paymentsbench -scenarios B -clients
-- 16, back to back, two runs each, on top of migration 000028): PostgreSQL's
-- CPU per new payment 1.49 and 1.72 ms with the three triggers, 1.44 and
-- 1.24 with the insert's alone, 1.24 and 1.17 with none.
--
-- The insert's trigger stays: whatever statement inserts a key that is not
-- finished (the engine's claim, an operator, a test) puts it in the table,
-- and the completer can find it. It only inserts, so it reads nothing and
-- needs none of 000026's settings. A key never goes from finished back to
-- unfinished; one deleted unfinished (by hand: the reaper deletes only
-- finished keys) leaves a row that the sweep takes out.
DROP TRIGGER idempotency_keys_unfinished_on_finish ON idempotency_keys;
DROP TRIGGER idempotency_keys_unfinished_on_delete ON idempotency_keys;
DROP TRIGGER idempotency_keys_unfinished_on_insert ON idempotency_keys;
DROP FUNCTION idempotency_keys_track_unfinished();

CREATE FUNCTION idempotency_keys_note_unfinished() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO idempotency_keys_unfinished (id) VALUES (NEW.id);
    RETURN NULL;
END $$;

CREATE TRIGGER idempotency_keys_unfinished_on_insert
    AFTER INSERT ON idempotency_keys
    FOR EACH ROW WHEN (NEW.recovery_point <> 'finished')
    EXECUTE FUNCTION idempotency_keys_note_unfinished();
