-- The operator's console's sessions (migration 000043).

-- name: StartConsoleSession :exec
INSERT INTO console_sessions (id, created_at, expires_at) VALUES ($1, sqlc.arg(now), sqlc.arg(expires_at));

-- name: ConsoleSessionLive :one
SELECT EXISTS (SELECT 1 FROM console_sessions WHERE id = $1 AND expires_at > sqlc.arg(now));

-- name: EndConsoleSession :exec
DELETE FROM console_sessions WHERE id = $1;

-- name: DeleteExpiredConsoleSessions :exec
DELETE FROM console_sessions WHERE expires_at <= sqlc.arg(now);
