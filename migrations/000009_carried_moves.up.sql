-- A move of a row that a request carried from its previous transaction
-- instead of reading it again under a lock (the create flow's payment,
-- between its claim and the record of Stripe's answer): the UPDATE matches
-- the row only if it is still as carried, and when it matched none this
-- raises a serialization failure (40001). The transaction is then run again
-- like any other that lost a race, and this time reads the row under a lock.
CREATE FUNCTION assert_unchanged(moved bigint, what text) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF moved = 0 THEN
        RAISE EXCEPTION 'could not serialize access: % changed since this request last read it', what
            USING ERRCODE = 'serialization_failure';
    END IF;
    RETURN moved;
END
$$;
