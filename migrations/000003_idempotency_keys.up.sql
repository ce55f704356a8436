-- One row per (user, Idempotency-Key): the request, where its execution
-- stands (recovery_point), who holds it (locked_at, lock_token), and, once
-- finished, the response every retry gets back.
--
-- The id is random (gen_random_uuid) rather than a sequence: the keys Stripe
-- sees are derived from it, so it must never repeat, and random ids spread
-- inserts over the primary key's b-tree instead of one hot right-most page.
CREATE TABLE idempotency_keys (
    id                  uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id             bigint      NOT NULL REFERENCES users (id),
    idempotency_key     text        NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    -- The flow that executes the request, so the completer can resume it
    -- from the stored parameters alone.
    flow                text        NOT NULL,
    request_method      text        NOT NULL,
    request_path        text        NOT NULL,
    request_params      jsonb       NOT NULL,
    -- SHA-256 of method, path and canonical JSON body: a retry must match it.
    request_fingerprint bytea       NOT NULL CHECK (length(request_fingerprint) = 32),
    recovery_point      text        NOT NULL DEFAULT 'started',
    -- The lock: held while locked_at is recent. lock_token grows with every
    -- claim, and every commit of a holder checks it (the fence).
    locked_at           timestamptz,
    lock_token          bigint      NOT NULL DEFAULT 0,
    last_run_at         timestamptz NOT NULL DEFAULT now(),
    response_code       integer,
    -- The exact bytes of the response, so every replay is identical to the first answer.
    response_body       bytea,
    created_at          timestamptz NOT NULL DEFAULT now(),
    expires_at          timestamptz NOT NULL,
    UNIQUE (user_id, idempotency_key),
    CHECK ((recovery_point = 'finished') = (response_code IS NOT NULL))
);

-- Every table a flow writes carries the key that produced it, so a resumed
-- flow finds its own earlier work. Deleting an expired key keeps the work.
ALTER TABLE payments
    ADD COLUMN idempotency_key_id uuid UNIQUE REFERENCES idempotency_keys (id) ON DELETE SET NULL;

-- Who did what, for people: one row per state change of a resource.
CREATE TABLE audit_records (
    id                 bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id            bigint      NOT NULL REFERENCES users (id),
    action             text        NOT NULL,
    resource_type      text        NOT NULL,
    resource_id        text        NOT NULL,
    data               jsonb       NOT NULL DEFAULT '{}',
    idempotency_key_id uuid        REFERENCES idempotency_keys (id) ON DELETE SET NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (idempotency_key_id, action)
);

-- Jobs staged in the same transaction as the state change they announce: a
-- job exists if and only if its change committed. The enqueuer moves them to
-- the job queue.
CREATE TABLE staged_jobs (
    id                 bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind               text        NOT NULL,
    args               jsonb       NOT NULL,
    idempotency_key_id uuid        REFERENCES idempotency_keys (id) ON DELETE SET NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (idempotency_key_id, kind)
);
