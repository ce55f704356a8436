-- Payments as the API shows them. The id is the public one (pay_ followed by
-- random characters), so inserts spread over the primary key's b-tree instead
-- of all landing on its right-most page.
CREATE TABLE payments (
    id                    text        PRIMARY KEY CHECK (id LIKE 'pay\_%'),
    user_id               bigint      NOT NULL REFERENCES users (id),
    amount                bigint      NOT NULL CHECK (amount BETWEEN 1 AND 99999999),
    currency              text        NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    status                text        NOT NULL CHECK (status IN ('processing', 'requires_capture', 'succeeded', 'failed', 'canceled')),
    capture               boolean     NOT NULL DEFAULT true,
    amount_captured       bigint      NOT NULL DEFAULT 0 CHECK (amount_captured BETWEEN 0 AND amount),
    amount_refunded       bigint      NOT NULL DEFAULT 0 CHECK (amount_refunded BETWEEN 0 AND amount_captured),
    payment_method        text        NOT NULL,
    stripe_payment_intent text        UNIQUE,
    failure_code          text,
    failure_message       text,
    description           text,
    metadata              jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now()
);

-- Listing a user's payments newest first, with keyset pagination.
CREATE INDEX payments_user_created_idx ON payments (user_id, created_at DESC, id DESC);
