-- The tables the requests and the worker write no longer reference
-- users (id) by a foreign key (issue 29). A foreign key's check on insert
-- locks the referenced row FOR KEY SHARE: every new key, payment, audit
-- record, refund, event, endpoint and delivery locked its user's row, in
-- the request's transaction. A user's concurrent requests lock the same
-- row, so its lock becomes a MultiXact (an entry in pg_multixact, kept and
-- read by every later lock of the row), and each lock writes a WAL record
-- for the row. Measured (paymentsbench -scenarios B -clients 16, back to
-- back with the commit before, two runs each): PostgreSQL's CPU per new
-- payment 1.72 and 1.78 ms with the foreign keys, 1.55 and 1.47 without.
-- The naive floor (A-naive) has no foreign key to its users.
--
-- What the foreign keys held, that no row names a user who does not
-- exist, still holds: every row is written with the id of the user that
-- the request authenticated as (or, for the worker's rows, copied from a
-- payment's), and a user is never deleted. The service has no way to
-- delete one, and the trigger below refuses it to anyone else, as the
-- foreign keys did for a user with rows. api_keys keeps its foreign key
-- (ON DELETE CASCADE): an API key is written once, when it is made.
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_user_id_fkey;
ALTER TABLE payments DROP CONSTRAINT payments_user_id_fkey;
ALTER TABLE audit_records DROP CONSTRAINT audit_records_user_id_fkey;
ALTER TABLE refunds DROP CONSTRAINT refunds_user_id_fkey;
ALTER TABLE events DROP CONSTRAINT events_user_id_fkey;
ALTER TABLE webhook_endpoints DROP CONSTRAINT webhook_endpoints_user_id_fkey;
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_user_id_fkey;

CREATE FUNCTION users_are_never_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'users are never deleted: their keys, payments and events name them'
        USING ERRCODE = 'restrict_violation';
END $$;

CREATE TRIGGER users_are_never_deleted
    BEFORE DELETE OR TRUNCATE ON users
    FOR EACH STATEMENT EXECUTE FUNCTION users_are_never_deleted();
