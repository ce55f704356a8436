-- Merchant events (payment.succeeded, ...), written by the staged-job
-- workers, one per state change, under an id chosen when the change was staged.
CREATE TABLE events (
    id         text        PRIMARY KEY CHECK (id LIKE 'evt\_%'),
    user_id    bigint      NOT NULL REFERENCES users (id),
    type       text        NOT NULL,
    data       jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_user_created_idx ON events (user_id, created_at DESC, id DESC);

-- One row per receipt, written before it is sent: a receipt job that runs
-- twice finds the row and does not send again.
CREATE TABLE receipts (
    payment_id text        NOT NULL REFERENCES payments (id),
    -- "payment", or "refund:<refund id>".
    kind       text        NOT NULL,
    recipient  text        NOT NULL,
    sent_at    timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (payment_id, kind)
);

-- The completer's bookkeeping: how often it tried a key, and a mark when it
-- gave up and a person must look (never a blind second charge).
ALTER TABLE idempotency_keys
    ADD COLUMN completer_attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN needs_attention_at timestamptz;

-- The completer looks only at unfinished keys, the reaper only at finished ones.
CREATE INDEX idempotency_keys_unfinished_idx ON idempotency_keys (last_run_at)
    WHERE recovery_point <> 'finished';
CREATE INDEX idempotency_keys_expiry_idx ON idempotency_keys (expires_at)
    WHERE recovery_point = 'finished';
