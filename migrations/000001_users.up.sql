-- Users of the API (merchants) and their API keys.
CREATE TABLE users (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email      text        NOT NULL UNIQUE CHECK (email <> ''),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Only a SHA-256 hash of each key is stored: API keys are long random
-- strings, so a fast hash is enough, and a leaked table reveals no key.
-- Lookups hash the presented key and find it by the unique index.
CREATE TABLE api_keys (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id    bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    key_hash   bytea       NOT NULL UNIQUE CHECK (length(key_hash) = 32),
    -- The first characters of the key, to tell keys apart in listings and logs.
    key_prefix text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);

CREATE INDEX api_keys_user_id_idx ON api_keys (user_id);
