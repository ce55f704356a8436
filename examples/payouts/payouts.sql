-- The team's table, in the service's database. It carries the key that made
-- each row and declares it in key_references, with no foreign key to
-- idempotency_keys (migration 000023 says why): when the reaper deletes a
-- key, the payout lets go of it and stays (migration 000045).
CREATE TABLE payouts (
    id                 text PRIMARY KEY,
    idempotency_key_id uuid UNIQUE,
    user_id            bigint NOT NULL,
    amount             bigint NOT NULL CHECK (amount > 0),
    currency           text NOT NULL,
    destination        text NOT NULL,
    status             text NOT NULL CHECK (status IN ('pending', 'paid', 'refused')),
    transfer           text,
    failure            text,
    created_at         timestamptz NOT NULL DEFAULT now()
);

INSERT INTO key_references (table_name, on_key_deleted) VALUES ('payouts', 'let_go');
