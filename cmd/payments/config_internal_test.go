package main

import (
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db"
)

// The README's configuration table: the defaults of the settings issue 6
// added, and --auth-cache-ttl 0 turning the API key cache off (api.Config
// reads a negative TTL as off, 0 as its default).
func TestConfig_defaultsAndTheAuthCacheSwitch(t *testing.T) {
	for _, env := range []string{"PAYMENTS_AUTH_CACHE_TTL", "PAYMENTS_ENQUEUER_POLL_INTERVAL", "PAYMENTS_KEYFILTER",
		"PAYMENTS_KEYFILTER_EXPECTED_KEYS", "PAYMENTS_KEYFILTER_FP_RATE", "PAYMENTS_KEYFILTER_SNAPSHOT_INTERVAL", "PAYMENTS_KEYFILTER_SNAPSHOT_MAX_AGE", "PAYMENTS_DB_MAX_CONNS", "PAYMENTS_DB_TX_TIMEOUT",
		"PAYMENTS_RECONCILE_INTERVAL", "PAYMENTS_RECONCILE_AFTER", "PAYMENTS_RECONCILE_BACKOFF_CAP", "PAYMENTS_RECONCILE_RATE",
		"PAYMENTS_SMTP_COMMAND_TIMEOUT", "PAYMENTS_SMTP_DATA_TIMEOUT", "PAYMENTS_STRIPE_SPENT_KEY_GRACE"} {
		if v, ok := os.LookupEnv(env); ok {
			t.Setenv(env, v) // restored after the test
			require.NoError(t, os.Unsetenv(env))
		}
	}
	parse := func(args ...string) config {
		var c config
		f := newFlags("serve", io.Discard)
		c.commonFlags(f)
		require.NoError(t, f.Parse(args))
		return c
	}
	c := parse()
	require.Equal(t, 10*time.Second, c.AuthCacheTTL)
	require.Equal(t, 10*time.Second, c.apiAuthCacheTTL())
	require.Equal(t, 200*time.Millisecond, c.EnqueuerPollInterval)
	require.True(t, c.KeyFilter)
	require.Equal(t, 1048576, c.KeyFilterExpectedKeys)
	require.Equal(t, 0.005, c.KeyFilterFPRate, "issue 29: one new key in 200 takes the careful path")
	require.Equal(t, 10*time.Minute, c.KeyFilterSnapshotInterval)
	require.Equal(t, time.Hour, c.KeyFilterSnapshotMaxAge)
	require.Zero(t, c.DBMaxConns, "0: db.Open's default, four per core")
	require.Equal(t, 10*time.Second, c.DBTxTimeout, "docs/API.md section 11: PAYMENTS_DB_TX_TIMEOUT, default 10s")
	require.Equal(t, 2*time.Second, parse("--db-tx-timeout", "2s").DBTxTimeout)
	require.Equal(t, 5*time.Minute, c.SMTPCommandTimeout, "RFC 5321 section 4.5.3.2.1-3")
	require.Equal(t, 10*time.Minute, c.SMTPDataTimeout, "RFC 5321 section 4.5.3.2.6")
	require.Equal(t, time.Minute, c.StripeSpentKeyGrace)
	require.Equal(t, 30*time.Second, c.ReconcileInterval)
	require.Equal(t, 5*time.Minute, c.ReconcileAfter)
	require.Equal(t, 6*time.Hour, c.ReconcileBackoffCap)
	require.Equal(t, 20.0, c.ReconcileRate)

	require.Negative(t, parse("--auth-cache-ttl", "0").apiAuthCacheTTL(), "0 turns the cache off")
}

// docs/API.md section 7: payments dev allows private webhook addresses
// unless PAYMENTS_WEBHOOK_ALLOW_PRIVATE=false is set (or the flag says so),
// so the SSRF guard can be rehearsed in dev. It used to force them on.
func TestDevConfig_webhookAllowPrivateDefaultsOnAndCanBeTurnedOff(t *testing.T) {
	const env = "PAYMENTS_WEBHOOK_ALLOW_PRIVATE"
	if v, ok := os.LookupEnv(env); ok {
		t.Setenv(env, v) // restored after the test
	}
	require.NoError(t, os.Unsetenv(env))
	parse := func(args ...string) config {
		t.Helper()
		cfg, err := parseDevConfig(args, io.Discard)
		require.NoError(t, err)
		return cfg
	}
	require.True(t, parse().WebhookAllowPrivate, "dev's default")
	require.False(t, parse("--webhook-allow-private=false").WebhookAllowPrivate)

	t.Setenv(env, "false")
	require.False(t, parse().WebhookAllowPrivate)
	require.True(t, parse("--webhook-allow-private=true").WebhookAllowPrivate, "the command line wins over the environment")
	t.Setenv(env, "true")
	require.True(t, parse().WebhookAllowPrivate)
}

// The start-up log shows the pool size in effect: "db_max_conns: 0" read as
// no connections at all, where 0 means the default, four per core.
func TestConfig_logShowsTheEffectivePoolSize(t *testing.T) {
	attrs := map[string]slog.Value{}
	for _, a := range (config{}).LogValue().Group() {
		attrs[a.Key] = a.Value
	}
	require.Equal(t, int64(db.DefaultMaxConns()), attrs["db_max_conns"].Int64(), "four per core")
	attrs = map[string]slog.Value{}
	for _, a := range (config{DBMaxConns: 7}).LogValue().Group() {
		attrs[a.Key] = a.Value
	}
	require.Equal(t, int64(7), attrs["db_max_conns"].Int64())
}

// The console's token is a secret: the log masks it; dev prints it, with
// the console's address, because the person who started dev needs it.
func TestConfig_consoleTokenIsMaskedInTheLogAndPrintedByDev(t *testing.T) {
	cfg := config{ConsoleToken: "console_0123456789abcdef0123456789abcdef", DatabaseURL: "postgres://x@localhost/db"}
	for _, a := range cfg.LogValue().Group() {
		if a.Key == "console_token" {
			require.Equal(t, "console_****", a.Value.String())
		}
		require.NotContains(t, a.Value.String(), "0123456789abcdef0123456789abcdef", a.Key)
	}
	var out strings.Builder
	printWelcome(&out, cfg, "127.0.0.1:8080")
	require.Contains(t, out.String(), "Console:   http://127.0.0.1:8080/console  (token: console_0123456789abcdef0123456789abcdef)")

	token := newConsoleToken()
	require.Regexp(t, `^console_[0-9a-f]{32}$`, token)
	require.NotEqual(t, token, newConsoleToken())
}
