-- One clock for an event's created and an endpoint's created: the
-- database's, read when the row is written (clock_timestamp()), not at the
-- start of its transaction (now()). An endpoint gets an event if and only
-- if it was created before the event (docs/API.md section 7); with now(),
-- an endpoint whose transaction began before an event but committed after
-- the event's deliveries were written claimed to be older than an event it
-- never got. The per-user lock that makes "created before" and "visible
-- to the drain" agree is in internal/db/queries/webhooks_out.sql
-- (LockEndpointsOfUser).
--
-- A staged job's created_at is its event's created (WriteStagedEvents);
-- clock_timestamp() also gives the events of one transaction distinct,
-- increasing times, in the order they were staged.
ALTER TABLE staged_jobs ALTER COLUMN created_at SET DEFAULT clock_timestamp();
ALTER TABLE webhook_endpoints ALTER COLUMN created_at SET DEFAULT clock_timestamp();
