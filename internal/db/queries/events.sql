-- name: InsertEvent :one
-- The id was chosen when the change was staged: a job that runs twice
-- inserts nothing the second time (and gets no row). Without a created_at
-- the event's created is the database's clock now, which must then be read
-- after LockEndpointsOfUserShared (webhooks_out.sql), in its transaction.
INSERT INTO events (id, user_id, type, data, created_at)
VALUES (@id, @user_id, @type, @data, coalesce(sqlc.narg('created_at')::timestamptz, clock_timestamp()))
ON CONFLICT (id) DO NOTHING
RETURNING created_at;

-- name: GetEvent :one
SELECT * FROM events WHERE id = @id AND user_id = @user_id;

-- name: ListEvents :many
-- Newest first, keyset-paginated like payments; only events of type
-- event_type when it is not NULL.
SELECT * FROM events
WHERE user_id = @user_id
  AND (sqlc.narg('event_type')::text IS NULL OR type = sqlc.narg('event_type'))
  AND (created_at, id) < (@before_created::timestamptz, @before_id::text)
ORDER BY created_at DESC, id DESC
LIMIT @row_limit;
