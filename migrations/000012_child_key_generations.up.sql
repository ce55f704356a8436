-- A child key (the idempotency key the service sends Stripe for one step of
-- a request, recovery.Key.ChildKey) can be spent: Stripe stored a 5xx under
-- it and replays that 5xx to every later request with the key. The request
-- then moves on to a new generation of the child key, once it has made sure
-- that the spent one made nothing at Stripe. The generation is recorded
-- here, so that every process derives the same key; a step without a row is
-- at generation 0, the key it always had. Rows are few (only the steps whose
-- key was ever found spent) and go with their idempotency key.
CREATE TABLE child_key_generations (
    idempotency_key_id uuid        NOT NULL REFERENCES idempotency_keys (id) ON DELETE CASCADE,
    step               text        NOT NULL,
    generation         integer     NOT NULL CHECK (generation >= 0),
    -- When the current generation's key was first found spent; NULL while
    -- it is not known to be. A search at Stripe that finds nothing is
    -- trusted only once Stripe's search lag has passed since then.
    spent_at           timestamptz,
    PRIMARY KEY (idempotency_key_id, step)
);
