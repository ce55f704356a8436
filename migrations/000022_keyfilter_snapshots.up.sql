-- The key filter's snapshot (internal/keyfilter, issue 29): its bits, written
-- now and then and at shutdown by a serving instance, read at start-up by
-- any instance, so that a new one loads them and reads only the keys made
-- since, instead of every live key. One row: every instance's filter is
-- built from the same table, so any instance's snapshot will do for any
-- other (of the same filter configuration; LoadSnapshot refuses another).
-- In the database rather than a file, so that a fresh container finds it.
CREATE TABLE keyfilter_snapshots (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),
    -- Every key live from before this time (the database's clock) is in
    -- the bits; the bits hold it too, under their checksum.
    covers timestamptz NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now(),
    bits bytea NOT NULL
);
-- The bits are random: compressing them would only cost time.
ALTER TABLE keyfilter_snapshots ALTER COLUMN bits SET STORAGE EXTERNAL;
