-- Stripe events that were signed by Stripe but that the service cannot
-- decode or apply: another API version's shape, an id that is no string,
-- text with NUL, invalid UTF-8. They are answered 200 (a 5xx would have
-- Stripe retry them for days) and kept here, with the reason, for an
-- operator (`payments stripe-events list --unprocessable`).
--
-- The body is kept as it came, as bytea: it is exactly what could not be
-- stored as text. event_id and event_type are what could be read of them,
-- NULL when they were not clean text. A delivery of the same body again
-- (Stripe delivers at least once) is recorded once: payload_sha256.
CREATE TABLE stripe_events_unprocessable (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id       text,
    event_type     text,
    reason         text        NOT NULL,
    payload        bytea       NOT NULL,
    payload_sha256 bytea       NOT NULL UNIQUE CHECK (length(payload_sha256) = 32),
    received_at    timestamptz NOT NULL DEFAULT now()
);
