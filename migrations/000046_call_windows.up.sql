-- When each attempt of a key's external call could have reached the remote
-- side (issue 38, item 5): the call windows the engine gives a phase's
-- reconcile (recovery.CallWindow), so that the create flow's reconcile asks
-- Stripe for the PaymentIntents made in the minutes of the key's own
-- attempts, instead of every PaymentIntent made since the key was created.
--
-- Nothing here costs a statement: the columns are written by the statements
-- that already write the key row (its insert, each move, each claim, each
-- unlock), and read only by a reconcile (AttemptWindowsOfKey). A key's
-- attempts at its recovery point are:
--
--   earlier_attempts  the windows of the attempts before the current one,
--                     since the key reached its recovery point: a claim of
--                     an existing key adds the previous attempt's window
--                     (call_window), a move empties it (NULL: none)
--   the current one   from the later of its claim (last_run_at) and the
--                     move to the recovery point (point_reached_at), to its
--                     end: its unlock (unlocked_at, its recorded failure),
--                     else the end of the lock it last wrote
--                     (lock_expires_at: a holder that died), or now for a
--                     live one; then the engine's SpentKeyGrace longer
--
-- A finished key keeps none of it (FinishIdempotencyKey sets them NULL).
ALTER TABLE idempotency_keys
    ADD COLUMN point_reached_at timestamptz,
    ADD COLUMN unlocked_at timestamptz,
    ADD COLUMN earlier_attempts tstzmultirange;

-- call_window is the window of an attempt: from the later of its claim and
-- the key's move to its recovery point (the commit that made the call
-- possible; a key from before this migration has no move recorded: its
-- creation), to ended_at (never before it opened).
CREATE FUNCTION call_window(last_run_at timestamptz, point_reached_at timestamptz, created_at timestamptz,
    ended_at timestamptz) RETURNS tstzrange
LANGUAGE sql IMMUTABLE AS $$
    SELECT tstzrange(o, greatest(o, ended_at), '[]')
    FROM (SELECT greatest(last_run_at, coalesce(point_reached_at, created_at)) AS o) opened
$$;

-- with_previous_attempt is earlier, the windows of a key's earlier attempts,
-- with that of the attempt that held the key until now added, as a claim
-- of the key records it (LockIdempotencyKey, ClaimAbandonedKeys,
-- ClaimKeyNow: it takes the row's values before the claim). The previous
-- attempt ended at its unlock, if it unlocked after its claim (an unlock is
-- its recorded failure; one before its claim is an earlier attempt's, left
-- by a build that did not clear it), else at the end of the lock it last
-- wrote (it died, its last heartbeat or move plus its lock's lifetime),
-- and no later than now; its window stays open tail_seconds longer (the
-- claiming engine's SpentKeyGrace: the remote side may go on executing
-- what it answered). Windows that then overlap are one (a multirange's
-- union): a key retried every few seconds keeps one window, not one per
-- retry. A key never claimed (lock_token 0: a key the service made for
-- work of its own, InsertUnheldKey) had no attempt.
CREATE FUNCTION with_previous_attempt(earlier tstzmultirange, lock_token bigint, last_run_at timestamptz,
    point_reached_at timestamptz, created_at timestamptz, unlocked_at timestamptz, lock_expires_at timestamptz,
    now timestamptz, tail_seconds float8) RETURNS tstzmultirange
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN lock_token = 0 THEN earlier
        ELSE coalesce(earlier, '{}'::tstzmultirange) + tstzmultirange(call_window(last_run_at, point_reached_at, created_at,
            CASE WHEN unlocked_at >= last_run_at THEN unlocked_at ELSE least(coalesce(lock_expires_at, now), now) END
            + make_interval(secs => tail_seconds)))
    END
$$;

-- The attempts made before this migration recorded nothing: an unfinished
-- key that was ever claimed gets one window for all of them, from its
-- creation to now, which is what its reconcile read before (from the key's
-- creation on).
UPDATE idempotency_keys
SET earlier_attempts = tstzmultirange(tstzrange(created_at, greatest(created_at, now()), '[]'))
WHERE id IN (SELECT id FROM idempotency_keys_unfinished) -- the few unfinished keys (migration 000029)
  AND recovery_point <> 'finished' AND lock_token > 0;
