package recovery_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/keyfilter"
	"github.com/example/payments/internal/recovery"
)

func readyFilter(t *testing.T, reg prometheus.Registerer) *keyfilter.Filter {
	t.Helper()
	f, err := keyfilter.New(keyfilter.Config{TTL: 24 * time.Hour, ExpectedKeysPerSlice: 10000, Registry: reg})
	require.NoError(t, err)
	return f
}

// readyEmpty returns a filter made ready by rebuilding from nothing: it
// knows no key, as an instance that started moments before the others wrote.
func readyEmpty(t *testing.T, reg prometheus.Registerer) *keyfilter.Filter {
	t.Helper()
	f := readyFilter(t, reg)
	_, err := f.Rebuild(context.Background(), func(func(keyfilter.Row, error) bool) {})
	require.NoError(t, err)
	return f
}

func TestKeyFilter_aFalseNewFromAnotherInstanceIsCaughtByTheIndex(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	b := setup(t, recovery.Config{KeyFilter: readyEmpty(t, reg)})
	ctx := context.Background()

	first, err := b.execute(t, 1, "k1", `{"name":"lamp"}`)
	require.NoError(t, err)
	require.Equal(t, 201, first.Status)

	// A second instance, whose filter never saw k1, says "new": the insert
	// hits the unique index and the careful path replays.
	other := b.newEngine(t, recovery.Config{KeyFilter: readyEmpty(t, nil)})
	resp, err := other.Execute(ctx, b.request(1, "k1", `{"name":"lamp"}`))
	require.NoError(t, err)
	require.True(t, resp.Replayed)
	require.Equal(t, first.Body, resp.Body)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM things"))

	// Back on the first instance, k1 is "maybe seen": careful, and a replay.
	resp, err = b.execute(t, 1, "k1", `{"name":"lamp"}`)
	require.NoError(t, err)
	require.True(t, resp.Replayed)
	require.Equal(t, 2.0, gathered(t, reg, "payments_keyfilter_checks_total"))
	require.Equal(t, 1.0, gathered(t, reg, "payments_keyfilter_definitely_new_total"))
	require.Equal(t, 0.0, gathered(t, reg, "payments_keyfilter_false_positives_total"))
}

func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			m := f.GetMetric()[0]
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestKeyFilter_rebuildRemembersLiveKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		_, err := b.execute(t, 1, k, `{"name":"`+k+`"}`)
		require.NoError(t, err)
	}
	f := readyFilter(t, nil)
	engine := b.newEngine(t, recovery.Config{KeyFilter: f})
	st, err := engine.RebuildKeyFilter(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, st.Added)
	for _, k := range []string{"a", "b", "c"} {
		require.True(t, f.MaybeSeen(1, k), "live key %s is remembered", k)
	}
	require.False(t, f.MaybeSeen(1, "never-used"))
	require.False(t, f.MaybeSeen(2, "a"), "keys are per user")
}

// A key lives a TTL after it finished, and for ever while unfinished (rule
// 8): the rebuild must remember such keys even when they were claimed long
// ago, in a slice the filter has dropped, so that the claim of a retry
// takes the careful path instead of a false "new".
func TestKeyFilter_rebuildRemembersKeysClaimedLongAgoThatAreStillLive(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	ctx := context.Background()
	_, err := b.execute(t, 1, "finished-late", `{"name":"a"}`)
	require.NoError(t, err)
	b.remote.fail.Store(1)
	_, err = b.execute(t, 1, "unfinished", `{"name":"b"}`)
	require.True(t, recovery.IsTransient(err))
	_, err = b.execute(t, 1, "expired", `{"name":"c"}`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `
		UPDATE idempotency_keys SET created_at = now() - interval '3 days',
			expires_at = CASE idempotency_key WHEN 'finished-late' THEN now() + interval '1 hour'
				WHEN 'expired' THEN now() - interval '1 hour' END`)
	require.NoError(t, err)

	f := readyFilter(t, nil) // a TTL of 24 hours
	engine := b.newEngine(t, recovery.Config{KeyFilter: f})
	st, err := engine.RebuildKeyFilter(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, st.Added)
	require.True(t, f.MaybeSeen(1, "finished-late"), "finished 23 hours ago: live for one more")
	require.True(t, f.MaybeSeen(1, "unfinished"), "an unfinished key never expires")
	require.False(t, f.MaybeSeen(1, "expired"))
}

// The rebuild reads keys a page at a time, keyset-paginated on columns that
// repeat (finished keys by expiry, unfinished ones by their last run), so
// keys that share a value across a page's end must all be read, once.
func TestKeyFilter_rebuildReadsEveryLiveKeyAcrossPagesOfTiedTimes(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	ctx := context.Background()
	// 12,000 finished keys over three expiry times, 6,000 unfinished ones
	// over two last runs (a page is 5,000 rows), and 1,000 expired ones.
	_, err := b.pool.Exec(ctx, `
		INSERT INTO idempotency_keys (user_id, idempotency_key, flow, request_method, request_path, request_params,
			request_fingerprint, recovery_point, response_code, response_body, last_run_at, expires_at)
		SELECT 1, kind || '-' || i, 'thing', 'POST', '/v1/things', '{}', sha256(i::text::bytea),
			CASE WHEN kind = 'unfinished' THEN 'started' ELSE 'finished' END,
			CASE WHEN kind = 'unfinished' THEN NULL ELSE 201 END,
			CASE WHEN kind = 'unfinished' THEN NULL ELSE '\x7b7d'::bytea END,
			now() - make_interval(mins => i % 2),
			CASE kind WHEN 'finished' THEN now() + make_interval(hours => 1 + i % 3)
				WHEN 'expired' THEN now() - interval '1 minute' END
		FROM (VALUES ('finished', 12000), ('unfinished', 6000), ('expired', 1000)) AS k(kind, n),
			generate_series(1, n) AS i`)
	require.NoError(t, err)

	f, err := keyfilter.New(keyfilter.Config{TTL: 24 * time.Hour, ExpectedKeysPerSlice: 20000})
	require.NoError(t, err)
	engine := b.newEngine(t, recovery.Config{KeyFilter: f})
	st, err := engine.RebuildKeyFilter(ctx)
	require.NoError(t, err)
	require.Equal(t, 18000, st.Added, "every live key once")
	require.Equal(t, 0, st.Expired)
	for i := 1; i <= 12000; i++ {
		require.True(t, f.MaybeSeen(1, fmt.Sprintf("finished-%d", i)), "finished-%d", i)
	}
	for i := 1; i <= 6000; i++ {
		require.True(t, f.MaybeSeen(1, fmt.Sprintf("unfinished-%d", i)), "unfinished-%d", i)
	}
}
