package recovery_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/clocktest"
	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/recovery"
)

// skewedPool is a pool on b's database whose sessions see a now() that is
// skew away from the server's: a database whose clock differs from the
// process's. (A function in a schema searched before pg_catalog shadows
// the built-in now(); every query of the engine that says now() gets it.)
func skewedPool(t *testing.T, skew time.Duration) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	url := dbtest.NewURL(t)
	pool, err := db.Open(ctx, url, db.PoolConfig{MaxConns: 4})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, fmt.Sprintf(`
		CREATE SCHEMA skewed;
		CREATE FUNCTION skewed.now() RETURNS timestamptz LANGUAGE sql STABLE
			AS $$ SELECT pg_catalog.now() + make_interval(secs => %f) $$;`, skew.Seconds()))
	require.NoError(t, err)
	pool.Close()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = "skewed, public, pg_catalog"
	pool, err = pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var dbNow time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT now()").Scan(&dbNow))
	require.InDelta(t, skew.Seconds(), time.Until(dbNow).Seconds(), 60, "the database's clock is skewed")
	return pool
}

// Issue 20, item 11: whether a key is too old to repeat its external call
// (Config.ExternalWindow) was judged by comparing the key's created_at,
// the database's time, with the process's clock. With clocks two hours
// apart, a key well inside the window was given up on (needs attention,
// never charged), and one past it was sent again, under a child key the
// remote side may have forgotten. It is now judged by the database, on
// the one clock that wrote created_at.
func TestExecute_theExternalWindowIsJudgedOnTheDatabasesClock(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		dbClock    time.Duration // the database's clock, against the process's
		age        time.Duration // the key's age on the database's clock
		wantCalled bool
	}{
		"22 h old on a database 2 h behind is called again": {dbClock: -2 * time.Hour, age: 22 * time.Hour, wantCalled: true},
		"24 h old on a database 2 h ahead is not":           {dbClock: 2 * time.Hour, age: 24 * time.Hour, wantCalled: false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupOn(t, skewedPool(t, tc.dbClock), recovery.Config{})
			ctx := context.Background()
			b.remote.fail.Store(1)
			_, err := b.execute(t, 1, "k1", `{"name":"lamp"}`)
			require.True(t, recovery.IsTransient(err), "the remote side is down: %v", err)
			_, err = b.pool.Exec(ctx, "UPDATE idempotency_keys SET created_at = now() - make_interval(secs => $1)", tc.age.Seconds())
			require.NoError(t, err)

			resp, err := b.execute(t, 1, "k1", `{"name":"lamp"}`)
			if tc.wantCalled {
				require.NoError(t, err)
				require.Equal(t, 201, resp.Status)
				require.EqualValues(t, 1, b.remote.executed.Load())
			} else {
				require.ErrorIs(t, err, recovery.ErrNeedsAttention, "past the window, and nothing to reconcile")
				require.Zero(t, b.remote.executed.Load(), "never sent again")
			}
		})
	}
}

// The window, on the injected clock: the one clock goes into SQL.
func TestCompleter_theExternalWindowOnTheInjectedClock(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	b := setup(t, recovery.Config{Now: clock.Now, ExternalWindow: 23 * time.Hour})
	ctx := context.Background()
	b.remote.fail.Store(2)
	for _, key := range []string{"past", "inside"} {
		_, err := b.execute(t, 1, key, `{"name":"lamp"}`)
		require.True(t, recovery.IsTransient(err), "the remote side is down: %v", err)
		clock.Advance(2 * time.Minute)
	}
	// "past" was created 2 minutes before "inside": move the clock so that
	// it is a minute past the window and "inside" a minute inside it.
	clock.Advance(23*time.Hour - 3*time.Minute)
	completer := recovery.NewCompleter(recovery.CompleterConfig{Engine: b.engine, Grace: time.Second})
	run, err := completer.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, recovery.CompleterRun{Claimed: 2, Finished: 1, NeedsAttention: 1}, run)
	require.Equal(t, string(recovery.Finished), b.recoveryPoint(t, "inside"))
	require.Equal(t, string(thingCreated), b.recoveryPoint(t, "past"))
	require.EqualValues(t, 1, b.remote.executed.Load())
}
