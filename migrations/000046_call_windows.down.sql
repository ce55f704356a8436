DROP FUNCTION with_previous_attempt(tstzmultirange, bigint, timestamptz, timestamptz, timestamptz, timestamptz, timestamptz, timestamptz);
DROP FUNCTION call_window(timestamptz, timestamptz, timestamptz, timestamptz, float8);
ALTER TABLE idempotency_keys
    DROP COLUMN earlier_attempts,
    DROP COLUMN unlocked_at,
    DROP COLUMN point_reached_at;
