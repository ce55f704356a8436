-- The inbox of Stripe's webhook events. Stripe delivers each event at
-- least once and in any order; an event's id is recorded in the same
-- transaction as its effect, so a repeat finds it and changes nothing.
CREATE TABLE stripe_events (
    id          text        PRIMARY KEY,
    type        text        NOT NULL,
    -- When Stripe says the change happened (the event's "created").
    occurred_at timestamptz NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    -- What the event did: applied, stale (older than what we know),
    -- no_change, unmatched (no payment of ours) or ignored (a type we do not apply).
    outcome     text        NOT NULL
);

-- When the last Stripe event applied to a payment happened: an event older
-- than that is stale and must not overwrite newer state.
ALTER TABLE payments ADD COLUMN stripe_event_at timestamptz;
