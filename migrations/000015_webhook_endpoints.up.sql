-- Webhooks to merchants (API.md section 7). A user's endpoints, and one
-- delivery row per (event, endpoint) the event is sent to, staged in the
-- same transaction that writes the event: a delivery exists if and only if
-- its event does.

-- An endpoint is deleted softly (deleted_at): its deliveries keep their
-- history, and nothing more is sent to it (the staging and the delivery job
-- both skip a deleted endpoint).
CREATE TABLE webhook_endpoints (
    id                 text        PRIMARY KEY CHECK (id LIKE 'we\_%'),
    user_id            bigint      NOT NULL REFERENCES users (id),
    url                text        NOT NULL,
    -- Event types ("payment.succeeded"), prefixes ("refund.*") or "*".
    enabled_events     text[]      NOT NULL,
    description        text,
    -- "whsec_" and the base64 of 32 random bytes; shown once, on create.
    secret             text        NOT NULL,
    status             text        NOT NULL DEFAULT 'enabled' CHECK (status IN ('enabled', 'disabled')),
    created_at         timestamptz NOT NULL DEFAULT now(),
    deleted_at         timestamptz,
    idempotency_key_id uuid        UNIQUE REFERENCES idempotency_keys (id) ON DELETE SET NULL
);
CREATE INDEX webhook_endpoints_user_created_idx ON webhook_endpoints (user_id, created_at DESC, id DESC)
    WHERE deleted_at IS NULL;

-- One event's delivery to one endpoint. cycle counts the redeliveries: each
-- one starts a new cycle of attempts, under a job of its own (the job's
-- arguments carry the cycle, so River's uniqueness by arguments does not
-- swallow a redelivery, and a job of an earlier cycle stops unsent).
CREATE TABLE webhook_deliveries (
    event_id           text        NOT NULL REFERENCES events (id),
    endpoint_id        text        NOT NULL REFERENCES webhook_endpoints (id),
    user_id            bigint      NOT NULL REFERENCES users (id),
    status             text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'succeeded', 'failed')),
    cycle              integer     NOT NULL DEFAULT 0,
    attempts           integer     NOT NULL DEFAULT 0,
    last_status_code   integer,
    last_error         text,
    next_attempt_at    timestamptz,
    -- When the delivery last became pending (created, or redelivered): the
    -- age of the oldest pending delivery is measured from it.
    pending_since      timestamptz NOT NULL DEFAULT now(),
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    -- The redelivery request that last started a cycle (NULL: the first).
    idempotency_key_id uuid        REFERENCES idempotency_keys (id) ON DELETE SET NULL,
    PRIMARY KEY (event_id, endpoint_id)
);
CREATE INDEX webhook_deliveries_pending_idx ON webhook_deliveries (pending_since) WHERE status = 'pending';

-- Every attempt at a delivery, as it was made: the delivery row keeps only
-- the last one.
CREATE TABLE webhook_attempts (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id     text        NOT NULL,
    endpoint_id  text        NOT NULL,
    cycle        integer     NOT NULL,
    attempted_at timestamptz NOT NULL,
    duration_ms  integer     NOT NULL,
    status_code  integer,
    error        text,
    succeeded    boolean     NOT NULL,
    FOREIGN KEY (event_id, endpoint_id) REFERENCES webhook_deliveries (event_id, endpoint_id)
);
CREATE INDEX webhook_attempts_delivery_idx ON webhook_attempts (event_id, endpoint_id, id);
