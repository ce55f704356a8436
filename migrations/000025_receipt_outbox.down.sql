-- A receipt left due here has no River job: it is never sent after this.
DROP INDEX receipts_due_idx;
ALTER TABLE receipts
    DROP COLUMN next_attempt_at,
    DROP COLUMN attempts,
    DROP COLUMN amount,
    DROP COLUMN currency,
    DROP COLUMN last_error,
    DROP COLUMN trace_parent;
