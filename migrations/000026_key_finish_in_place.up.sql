-- A key's finish is a HOT update (issue 29, docs/failure-scenarios.md "A
-- young database"): no index of idempotency_keys names a column that the
-- finish changes (recovery_point, expires_at, the lock, the response), so
-- PostgreSQL writes the finished row as a new version on the same heap page
-- and no new entry into any of the table's indexes.
--
-- Before, the finish wrote an entry into the primary key, the unique index
-- of (user_id, idempotency_key) and the expiry index, because two partial
-- indexes named recovery_point in their predicates. On a young database,
-- where each of those is a page or two, those entries went into the pages
-- that every concurrent request's finish had just read (SERIALIZABLE's
-- b-tree predicate locks are page-level), and concurrent requests with
-- different keys failed to serialize: 0.11 retries per request at 16
-- clients, 0.10 at 64 (make bench, B-young); with this migration's indexes
-- dropped, 0.005 and 0.013 (the commit gives the run).
--
-- What the two indexes did is done by:
--
--   - idempotency_keys_unfinished, a table of the ids of the keys that are
--     not finished, for the completer, the key filter's rebuild and the
--     metrics. The triggers below keep it, so that it is right whatever
--     statement writes a key (the engine's, an operator's, a test's): a key
--     is in it from its insert until the update that finishes it. It holds
--     the requests in flight and the ones waiting for the completer, a few
--     rows however many keys there are.
--   - idempotency_keys_created_idx, on a column written once, for the reaper
--     and the key filter's rebuild: a key expires a TTL after it finished,
--     so one that expired was created more than a TTL ago, and the reaper
--     looks only at those (ReapExpiredKeys).

DROP INDEX idempotency_keys_unfinished_idx;
DROP INDEX idempotency_keys_expiry_idx;

CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at, id);

CREATE TABLE idempotency_keys_unfinished (
    id uuid PRIMARY KEY
);
INSERT INTO idempotency_keys_unfinished (id)
SELECT id FROM idempotency_keys WHERE recovery_point <> 'finished';

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

-- The function finds a key's row of idempotency_keys_unfinished through
-- its primary key, never by a scan of the table: it runs inside the
-- request's SERIALIZABLE transaction, where a sequential scan takes a
-- predicate lock on the whole table, which every other request's finish
-- then writes into. With the planner free to choose (the table is a page
-- or two, so once analysed a scan looks cheapest), B on 100,000 preloaded
-- keys made 1.3 serialization retries per request at 16 clients and 4.3 at
-- 64 (paymentsbench -scenarios B -rounds 2); an index scan locks one page
-- of the index, which only the claims' inserts write, and claims read
-- nothing of it.
ALTER FUNCTION idempotency_keys_track_unfinished() SET enable_seqscan = off;
ALTER FUNCTION idempotency_keys_track_unfinished() SET enable_bitmapscan = off;

-- Only a change of whether the key is finished calls the function (the
-- WHEN clauses): a move between unfinished recovery points, a lock, a
-- heartbeat cost nothing here.
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

-- Room on each heap page for the finished version of each key: a HOT
-- update needs free space on the page of the version it replaces, and the
-- finished row is the larger (it carries the response). Pruning frees the
-- old version once no snapshot can see it.
ALTER TABLE idempotency_keys SET (fillfactor = 70);
