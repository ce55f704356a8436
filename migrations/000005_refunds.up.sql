-- Refunds as the API shows them. A refund row is inserted (pending) under the
-- payment's row lock before Stripe is asked, so its amount is reserved: two
-- refunds racing for what is left of a payment can never both get it.
CREATE TABLE refunds (
    id                 text        PRIMARY KEY CHECK (id ~ '^re_[0-9a-f]{24}$'),
    user_id            bigint      NOT NULL REFERENCES users (id),
    payment_id         text        NOT NULL REFERENCES payments (id),
    amount             bigint      NOT NULL CHECK (amount > 0),
    status             text        NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
    stripe_refund      text        UNIQUE,
    -- What the client said (duplicate, fraudulent, requested_by_customer).
    -- Not constrained: Stripe has reasons of its own for refunds it reports.
    reason             text,
    -- Why Stripe refused or failed the refund, for people.
    failure_reason     text,
    -- The request that made the refund, so a resumed flow finds it again.
    idempotency_key_id uuid        UNIQUE REFERENCES idempotency_keys (id) ON DELETE SET NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);

-- What is left to refund is summed over a payment's refunds.
CREATE INDEX refunds_payment_id_idx ON refunds (payment_id);
