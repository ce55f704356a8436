-- name: CreateUser :one
INSERT INTO users (email) VALUES (@email)
RETURNING *;

-- name: UpsertUserByEmail :one
-- Seeding: the same user every time, whether or not it exists.
INSERT INTO users (email) VALUES (@email)
ON CONFLICT (email) DO UPDATE SET email = excluded.email
RETURNING *;

-- name: CreateAPIKey :exec
-- A key that is already stored is left as it is (seeding runs on every start).
INSERT INTO api_keys (user_id, key_hash, key_prefix)
VALUES (@user_id, @key_hash, @key_prefix)
ON CONFLICT (key_hash) DO NOTHING;

-- name: GetUserByAPIKeyHash :one
SELECT u.id, u.email, k.key_hash
FROM api_keys k
JOIN users u ON u.id = k.user_id
WHERE k.key_hash = @key_hash AND k.revoked_at IS NULL;
