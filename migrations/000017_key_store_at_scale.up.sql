-- The key store at scale (issue 19, measured by make bench-scale).

-- A key's deletion (the reaper's) sets webhook_deliveries.idempotency_key_id
-- to NULL where it points at the key: PostgreSQL looks those rows up once
-- per deleted key, and without an index that is a scan of every delivery
-- ever made, so the reaper fell further behind the more deliveries there
-- were (make bench-scale's churn, run before this migration). Only
-- redeliveries set the column, so the index holds those rows alone.
CREATE INDEX webhook_deliveries_idempotency_key_idx ON webhook_deliveries (idempotency_key_id)
    WHERE idempotency_key_id IS NOT NULL;
