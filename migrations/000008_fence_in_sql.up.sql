-- The fence, checked by the database: a move of a key that matched no row
-- (another attempt took the key over and its lock_token moved on) raises,
-- so the transaction fails on its own. The engine can then send the move
-- with its COMMIT, in one round trip, instead of reading the row count
-- first and deciding whether to commit.
CREATE FUNCTION assert_lock_held(moved bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF moved = 0 THEN
        RAISE EXCEPTION 'the idempotency key''s lock was taken over by another attempt'
            USING ERRCODE = 'PK001';
    END IF;
    RETURN moved;
END
$$;
