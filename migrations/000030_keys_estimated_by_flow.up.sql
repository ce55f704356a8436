-- How many keys of each flow the key table holds, by PostgreSQL's own
-- statistics, for the operator's console (keyadmin.Admin.Counts): counting
-- the finished keys reads the whole table (0.4 s at a million keys, on
-- three cores), and the console's dashboard asks every two seconds while
-- it is open. The unfinished keys are counted exactly, through
-- idempotency_keys_unfinished; past a size, the finished are estimated
-- from this.
--
-- The estimate is the rows the planner expects the table to hold now (the
-- rows per page that the last VACUUM or ANALYZE saw, times the pages it has
-- now, as the planner scales reltuples), shared out by the frequencies of
-- the flow column's most common values, which autovacuum's ANALYZE keeps.
-- A flow too rare for ANALYZE's sample is not listed; no row at all means
-- the table has no statistics yet. A function, so that the queries, which
-- sqlc compiles against this schema, need not name the system catalogs.
CREATE FUNCTION idempotency_keys_estimated_by_flow()
RETURNS TABLE (flow text, keys bigint)
LANGUAGE sql STABLE AS $$
    SELECT ((s.most_common_vals::text)::text[])[i],
        round(c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::float8)
              * s.most_common_freqs[i])::bigint
    FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_stats s ON s.schemaname = n.nspname AND s.tablename = c.relname AND s.attname = 'flow'
    CROSS JOIN LATERAL generate_series(1, cardinality(s.most_common_freqs)) AS i
    WHERE c.oid = 'idempotency_keys'::regclass AND c.relpages > 0 AND c.reltuples >= 0
$$;
