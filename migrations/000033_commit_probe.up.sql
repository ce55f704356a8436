-- The one row that readiness checks write to prove that a commit is
-- possible (db.ProbeCommit, behind /readyz of serve and of worker). A ping
-- proves only that a server answers: a standby answers, an old primary
-- whose synchronous standby is gone answers, and neither can commit. This
-- write takes a transaction id and writes a commit record, so its COMMIT
-- waits for the synchronous standby as every payment's does, and it fails
-- with 25006 (read-only transaction) where writes are refused. One row, for
-- every process: a probe is a few per process a minute, and each is one
-- heap-only update of a row no index covers but its key.
CREATE TABLE commit_probe (
    id        boolean     PRIMARY KEY DEFAULT true CHECK (id),
    probed_at timestamptz NOT NULL
);
