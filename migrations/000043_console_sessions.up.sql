-- The operator's console's sessions, kept on the server (issue 42): a
-- signed cookie alone kept working after sign-out until it lapsed (12 h),
-- so a cookie copied off a shared machine outlived the sign-out. A session
-- is live while its row is here and not expired; sign-out deletes the row,
-- and every instance on the database sees it at once (an in-memory list of
-- ended sessions would be one instance's). The cookie stays signed: its id
-- is looked up only after its signature is checked, so a forged cookie
-- costs no query. Expired rows are deleted at each sign-in.
CREATE TABLE console_sessions (
    id         bytea PRIMARY KEY,  -- the session's random id, as in its cookie (16 bytes)
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
