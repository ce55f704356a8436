package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stagedjobs"
	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/telemetry"
)

// config is every setting of the service. Each has a flag and an environment
// twin; a flag given on the command line wins over the environment, which
// wins over the default.
type config struct {
	Addr            string
	DataDir         string
	DatabaseURL     string
	DBMaxConns      int
	DBTxTimeout     time.Duration
	LogLevel        slog.Level
	ShutdownTimeout time.Duration

	StripeSecretKey     string
	StripeAPIBase       string
	StripeWebhookSecret string
	StripesimAddr       string
	AllowLiveKeys       bool
	StripeSpentKeyGrace time.Duration

	KeyTTL      time.Duration
	LockTimeout time.Duration
	Failpoints  string

	KeyFilter             bool
	KeyFilterExpectedKeys int
	KeyFilterFPRate       float64
	// KeyFilterSnapshotInterval is how often serve writes the key filter's
	// snapshot (and at shutdown); 0 neither writes nor reads one.
	KeyFilterSnapshotInterval time.Duration
	// KeyFilterSnapshotMaxAge is the oldest snapshot a start loads.
	KeyFilterSnapshotMaxAge time.Duration

	RateLimit      float64
	RateLimitBurst int
	AuthCacheTTL   time.Duration

	// ConsoleToken is the operator's console's credential: set, the
	// console is served at /console (docs/API.md section 10); payments dev
	// makes one up when it is not set.
	ConsoleToken string
	// ConsoleTraceURL links the console's keys to a trace UI: {trace_id}
	// in it is replaced by the key's trace id.
	ConsoleTraceURL string

	SMTPURL              string
	SMTPCommandTimeout   time.Duration
	SMTPDataTimeout      time.Duration
	CompleterInterval    time.Duration
	CompleterGrace       time.Duration
	ReaperInterval       time.Duration
	EnqueuerPollInterval time.Duration

	ReconcileInterval   time.Duration
	ReconcileAfter      time.Duration
	ReconcileBackoffCap time.Duration
	ReconcileRate       float64

	// WebhookRetrySchedule is the delays between a webhook delivery's
	// attempts, comma-separated (webhookRetrySchedule parses it).
	WebhookRetrySchedule string
	// WebhookAllowPrivate lets webhook endpoints be on loopback, private
	// and other non-public addresses; payments dev defaults it to true.
	WebhookAllowPrivate bool
	// webhookOwn are the addresses webhooks never reach, even when private
	// ones are allowed: in dev, the service's own (ownAddresses). Not a
	// setting.
	webhookOwn []netip.AddrPort
}

// defaultShutdownTimeout lets a request that is waiting on Stripe when
// SIGTERM comes get Stripe's answer (a call times out after
// stripeclient.DefaultTimeout) and record it, rather than be cancelled and
// resumed by a retry: both are safe, the first is quicker for the client.
const defaultShutdownTimeout = stripeclient.DefaultTimeout + 5*time.Second

// flags registers settings on a flag.FlagSet with their environment twins,
// collecting environment values that do not parse.
type flags struct {
	*flag.FlagSet
	envErrs []error
}

func newFlags(name string, stderr io.Writer) *flags {
	fs := flag.NewFlagSet("payments "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return &flags{FlagSet: fs}
}

func (f *flags) parse(args []string) error {
	if err := f.Parse(args); err != nil {
		return err
	}
	if f.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, f.Arg(0))
	}
	return errors.Join(f.envErrs...)
}

func (f *flags) stringVar(p *string, name, env, def, help string) {
	if v, ok := os.LookupEnv(env); ok {
		def = v
	}
	f.StringVar(p, name, def, help+" (env "+env+")")
}

func (f *flags) intVar(p *int, name, env string, def int, help string) {
	f.parseEnv(env, func(v string) error { n, err := strconv.Atoi(v); def = n; return err })
	f.IntVar(p, name, def, help+" (env "+env+")")
}

func (f *flags) floatVar(p *float64, name, env string, def float64, help string) {
	f.parseEnv(env, func(v string) error { x, err := strconv.ParseFloat(v, 64); def = x; return err })
	f.Float64Var(p, name, def, help+" (env "+env+")")
}

func (f *flags) boolVar(p *bool, name, env string, def bool, help string) {
	f.parseEnv(env, func(v string) error { b, err := strconv.ParseBool(v); def = b; return err })
	f.BoolVar(p, name, def, help+" (env "+env+")")
}

func (f *flags) durationVar(p *time.Duration, name, env string, def time.Duration, help string) {
	f.parseEnv(env, func(v string) error { d, err := time.ParseDuration(v); def = d; return err })
	f.DurationVar(p, name, def, help+" (env "+env+")")
}

func (f *flags) levelVar(p *slog.Level, name, env string, def slog.Level, help string) {
	f.parseEnv(env, func(v string) error { return def.UnmarshalText([]byte(v)) })
	f.TextVar(p, name, def, help+" (env "+env+")")
}

// devDefault gives the flag name another default, for one command, unless
// its environment twin is set (which, as for every flag, wins over the
// default; the command line wins over both).
func (f *flags) devDefault(name, env, value string) {
	if _, ok := os.LookupEnv(env); ok {
		return
	}
	fl := f.Lookup(name)
	if err := fl.Value.Set(value); err != nil {
		panic(fmt.Sprintf("flag --%s: default %q: %v", name, value, err)) // a programming error
	}
	fl.DefValue = value
}

func (f *flags) parseEnv(env string, parse func(string) error) {
	if v, ok := os.LookupEnv(env); ok {
		if err := parse(v); err != nil {
			f.envErrs = append(f.envErrs, fmt.Errorf("%s=%q: %w", env, v, err))
		}
	}
}

// commonFlags are the settings of every command that serves the API.
func (c *config) commonFlags(f *flags) {
	f.stringVar(&c.Addr, "addr", "PAYMENTS_ADDR", "127.0.0.1:8080", "address the API listens on")
	f.stringVar(&c.DatabaseURL, "database-url", "DATABASE_URL", "", "PostgreSQL connection URL")
	f.intVar(&c.DBMaxConns, "db-max-conns", "PAYMENTS_DB_MAX_CONNS", 0, "database pool size (0: four per core)")
	f.durationVar(&c.DBTxTimeout, "db-tx-timeout", "PAYMENTS_DB_TX_TIMEOUT", db.DefaultTxTimeout,
		"the deadline of every database transaction, its COMMIT included (one waiting on a lost synchronous standby ends there, and its request answers 503 service_unavailable)")
	f.levelVar(&c.LogLevel, "log-level", "PAYMENTS_LOG_LEVEL", slog.LevelInfo, "debug, info, warn or error")
	f.durationVar(&c.ShutdownTimeout, "shutdown-timeout", "PAYMENTS_SHUTDOWN_TIMEOUT", defaultShutdownTimeout,
		"how long in-flight requests may take to finish on SIGINT/SIGTERM; those still running then are cancelled and told to retry")
	f.floatVar(&c.RateLimit, "rate-limit", "PAYMENTS_RATE_LIMIT", 100, "requests per second per user, on average (0: no limit)")
	f.intVar(&c.RateLimitBurst, "rate-limit-burst", "PAYMENTS_RATE_LIMIT_BURST", 200, "requests per user in one burst")
	f.durationVar(&c.AuthCacheTTL, "auth-cache-ttl", "PAYMENTS_AUTH_CACHE_TTL", 10*time.Second,
		"how long a looked-up API key is answered from memory; a revoked key works this long (0: off)")
	f.stringVar(&c.ConsoleToken, "console-token", "PAYMENTS_CONSOLE_TOKEN", "",
		"the operator's console's sign-in token; set, the console is served at /console (payments dev makes one up)")
	f.stringVar(&c.ConsoleTraceURL, "console-trace-url", "PAYMENTS_CONSOLE_TRACE_URL", "",
		"a trace UI's address for one trace, with {trace_id} in it (such as http://localhost:16686/trace/{trace_id}): the console links each key to its trace")
	c.stripeFlags(f)
	c.engineFlags(f)
	c.workerFlags(f)
}

// workerFlags are the settings of the background work.
func (c *config) workerFlags(f *flags) {
	f.stringVar(&c.SMTPURL, "smtp-url", "SMTP_URL", "", "SMTP server for receipts, smtp://user:pass@host:port?from=addr (STARTTLS when offered) or smtps:// (implicit TLS); empty: receipts are logged")
	f.durationVar(&c.SMTPCommandTimeout, "smtp-command-timeout", "PAYMENTS_SMTP_COMMAND_TIMEOUT", stagedjobs.DefaultSMTPCommandTimeout,
		"how long the mail server may take to greet, and to answer MAIL and each RCPT (RFC 5321 section 4.5.3.2: 5 minutes)")
	f.durationVar(&c.SMTPDataTimeout, "smtp-data-timeout", "PAYMENTS_SMTP_DATA_TIMEOUT", stagedjobs.DefaultSMTPDataTerminationTimeout,
		"how long the mail server may take to answer the end of a receipt's DATA (RFC 5321 section 4.5.3.2.6: 10 minutes); a shorter wait may send a slow server the receipt twice")
	f.durationVar(&c.CompleterInterval, "completer-interval", "PAYMENTS_COMPLETER_INTERVAL", 10*time.Second,
		"how often the completer looks for abandoned requests")
	f.durationVar(&c.CompleterGrace, "completer-grace", "PAYMENTS_COMPLETER_GRACE", 30*time.Second,
		"how long a request sits untouched before the completer finishes it")
	f.durationVar(&c.ReaperInterval, "reaper-interval", "PAYMENTS_REAPER_INTERVAL", time.Minute,
		"how often expired finished keys are deleted")
	f.durationVar(&c.EnqueuerPollInterval, "enqueuer-poll-interval", "PAYMENTS_ENQUEUER_POLL_INTERVAL", stagedjobs.DefaultPollInterval,
		"how often the enqueuer looks for staged jobs (the longest a job waits to be queued)")
	f.durationVar(&c.ReconcileInterval, "reconcile-interval", "PAYMENTS_RECONCILE_INTERVAL", 30*time.Second,
		"how often the reconciler looks for payments and refunds due a check at Stripe")
	f.durationVar(&c.ReconcileAfter, "reconcile-after", "PAYMENTS_RECONCILE_AFTER", 5*time.Minute,
		"how long after a payment was made (or refunded) the reconciler first reads it from Stripe, if Stripe could still change it (then again with back-off)")
	f.durationVar(&c.ReconcileBackoffCap, "reconcile-backoff-cap", "PAYMENTS_RECONCILE_BACKOFF_CAP", 6*time.Hour,
		"the longest the reconciler's back-off between two checks of one payment grows")
	f.floatVar(&c.ReconcileRate, "reconcile-rate", "PAYMENTS_RECONCILE_RATE", 20,
		"Stripe calls a second the reconciler of one process makes at most")
	f.stringVar(&c.WebhookRetrySchedule, "webhook-retry-schedule", "PAYMENTS_WEBHOOK_RETRY_SCHEDULE", "5s,5m,30m,2h,5h,10h,10h",
		"delays between a webhook delivery's attempts, comma-separated; after the last the delivery fails")
	f.boolVar(&c.WebhookAllowPrivate, "webhook-allow-private", "PAYMENTS_WEBHOOK_ALLOW_PRIVATE", false,
		"allow webhook endpoints on loopback, private and other non-public addresses (payments dev does unless this is false)")
}

// webhookRetrySchedule parses WebhookRetrySchedule: durations, each positive.
func (c config) webhookRetrySchedule() ([]time.Duration, error) {
	var schedule []time.Duration
	for _, part := range strings.Split(c.WebhookRetrySchedule, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("%q is not a duration", part)
		}
		if d <= 0 {
			return nil, fmt.Errorf("%v is not positive", d)
		}
		schedule = append(schedule, d)
	}
	return schedule, nil
}

// stripeFlags are the settings of the connection to Stripe.
func (c *config) stripeFlags(f *flags) {
	f.stringVar(&c.StripeSecretKey, "stripe-secret-key", "STRIPE_SECRET_KEY", "", "Stripe secret key (sk_test_...)")
	f.stringVar(&c.StripeAPIBase, "stripe-api-base", "STRIPE_API_BASE", "", "Stripe API base URL (empty: Stripe's own)")
	f.stringVar(&c.StripeWebhookSecret, "stripe-webhook-secret", "STRIPE_WEBHOOK_SECRET", "", "secret that signs Stripe's webhooks (whsec_...)")
	f.boolVar(&c.AllowLiveKeys, "allow-live-keys", "PAYMENTS_ALLOW_LIVE_KEYS", false, "accept a sk_live_ Stripe key")
	f.durationVar(&c.StripeSpentKeyGrace, "stripe-spent-key-grace", "PAYMENTS_STRIPE_SPENT_KEY_GRACE", recovery.DefaultSpentKeyGrace,
		"how long after Stripe first replays a stored 500 for a child key the service trusts its list's \"nothing made\" and moves to a new child key (a request Stripe may still be executing must have landed by then)")
}

// engineFlags are the settings of the idempotency engine.
func (c *config) engineFlags(f *flags) {
	f.durationVar(&c.KeyTTL, "idempotency-key-ttl", "PAYMENTS_IDEMPOTENCY_KEY_TTL", 24*time.Hour,
		"how long an idempotency key is remembered")
	f.durationVar(&c.LockTimeout, "lock-timeout", "PAYMENTS_LOCK_TIMEOUT", 90*time.Second,
		"how long a request's lock lasts without a heartbeat")
	f.stringVar(&c.Failpoints, "failpoints", "PAYMENTS_FAILPOINTS", "", "crash-test failpoints: name=action,...")
	f.boolVar(&c.KeyFilter, "keyfilter", "PAYMENTS_KEYFILTER", true, "the RAM Bloom filter in front of the key index")
	f.intVar(&c.KeyFilterExpectedKeys, "keyfilter-expected-keys", "PAYMENTS_KEYFILTER_EXPECTED_KEYS", 1<<20,
		"new keys expected per filter slice (a third of the TTL)")
	f.floatVar(&c.KeyFilterFPRate, "keyfilter-fp-rate", "PAYMENTS_KEYFILTER_FP_RATE", 0.005,
		"the filter's target false-positive rate")
	f.durationVar(&c.KeyFilterSnapshotInterval, "keyfilter-snapshot-interval", "PAYMENTS_KEYFILTER_SNAPSHOT_INTERVAL", 10*time.Minute,
		"how often serve stores the filter's snapshot in the database (and at shutdown), for the next start to load; 0: never, and none is loaded")
	f.durationVar(&c.KeyFilterSnapshotMaxAge, "keyfilter-snapshot-max-age", "PAYMENTS_KEYFILTER_SNAPSHOT_MAX_AGE", time.Hour,
		"the oldest snapshot a start loads (it then reads the keys made since); an older one, or none, means reading every live key")
}

// LogValue shows the configuration with every secret masked.
func (c config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("addr", c.Addr),
		slog.String("data_dir", c.DataDir),
		slog.String("database_url", maskURL(c.DatabaseURL)),
		slog.Int("db_max_conns", c.dbMaxConns()),
		slog.String("db_tx_timeout", c.DBTxTimeout.String()),
		slog.String("log_level", c.LogLevel.String()),
		slog.String("shutdown_timeout", c.ShutdownTimeout.String()),
		slog.String("stripe_secret_key", maskSecret(c.StripeSecretKey)),
		slog.String("stripe_api_base", c.StripeAPIBase),
		slog.String("stripe_webhook_secret", maskSecret(c.StripeWebhookSecret)),
		slog.String("stripesim_addr", c.StripesimAddr),
		slog.Bool("allow_live_keys", c.AllowLiveKeys),
		slog.String("stripe_spent_key_grace", c.StripeSpentKeyGrace.String()),
		slog.String("idempotency_key_ttl", c.KeyTTL.String()),
		slog.String("lock_timeout", c.LockTimeout.String()),
		slog.String("failpoints", c.Failpoints),
		slog.Bool("keyfilter", c.KeyFilter),
		slog.Int("keyfilter_expected_keys", c.KeyFilterExpectedKeys),
		slog.Float64("keyfilter_fp_rate", c.KeyFilterFPRate),
		slog.String("keyfilter_snapshot_interval", c.KeyFilterSnapshotInterval.String()),
		slog.String("keyfilter_snapshot_max_age", c.KeyFilterSnapshotMaxAge.String()),
		slog.Float64("rate_limit", c.RateLimit),
		slog.Int("rate_limit_burst", c.RateLimitBurst),
		slog.String("auth_cache_ttl", c.AuthCacheTTL.String()),
		slog.String("console_token", maskSecret(c.ConsoleToken)),
		slog.String("console_trace_url", c.ConsoleTraceURL),
		slog.String("smtp_url", maskURL(c.SMTPURL)),
		slog.String("smtp_command_timeout", c.SMTPCommandTimeout.String()),
		slog.String("smtp_data_timeout", c.SMTPDataTimeout.String()),
		slog.String("completer_interval", c.CompleterInterval.String()),
		slog.String("completer_grace", c.CompleterGrace.String()),
		slog.String("reaper_interval", c.ReaperInterval.String()),
		slog.String("enqueuer_poll_interval", c.EnqueuerPollInterval.String()),
		slog.String("reconcile_interval", c.ReconcileInterval.String()),
		slog.String("reconcile_after", c.ReconcileAfter.String()),
		slog.String("reconcile_backoff_cap", c.ReconcileBackoffCap.String()),
		slog.Float64("reconcile_rate", c.ReconcileRate),
		slog.String("webhook_retry_schedule", c.WebhookRetrySchedule),
		slog.Bool("webhook_allow_private", c.WebhookAllowPrivate),
	)
}

// dbMaxConns is the pool size in effect: DBMaxConns, or db.Open's default
// (four per core) for 0.
func (c config) dbMaxConns() int {
	if c.DBMaxConns > 0 {
		return c.DBMaxConns
	}
	return int(db.DefaultMaxConns())
}

// apiAuthCacheTTL is AuthCacheTTL as api.Config reads it: there 0 means the
// default and only a negative value turns the cache off, here 0 is off.
func (c config) apiAuthCacheTTL() time.Duration {
	if c.AuthCacheTTL <= 0 {
		return -1
	}
	return c.AuthCacheTTL
}

// maskSecret keeps a secret's prefix (sk_test_, whsec_), which tells what
// kind of secret it is, and hides the rest.
func maskSecret(secret string) string {
	if secret == "" {
		return ""
	}
	if i := strings.LastIndexByte(secret, '_'); i > 0 && i < 12 {
		return secret[:i+1] + "****"
	}
	return "****"
}

// maskURL hides a connection URL's password, and a password= setting of a
// keyword/value connection string.
func maskURL(raw string) string {
	if raw == "" {
		return ""
	}
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" {
		if q := u.Query(); q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.Redacted()
	}
	fields := strings.Fields(raw)
	for i, f := range fields {
		if strings.HasPrefix(f, "password=") {
			fields[i] = "password=xxxxx"
		}
	}
	return strings.Join(fields, " ")
}

func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	// A line logged with a traced context names its trace_id and span_id.
	return slog.New(telemetry.LogHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})))
}

// minLockTimeout is the shortest lock timeout that makes sense: the
// heartbeat beats every third of it, and a phase's transaction retries for
// at most a third, each a few database round trips.
const minLockTimeout = 100 * time.Millisecond

// validate refuses settings that parse but make no sense, naming each one,
// so that the process stops at start-up rather than misbehave later (a burst
// of 0 used to answer 429 to every request).
func (c config) validate() error {
	var errs []error
	bad := func(env, flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s (--%s) %s", env, flag, fmt.Sprintf(format, args...)))
	}
	positive := func(env, flag string, d time.Duration) {
		if d <= 0 {
			bad(env, flag, "is %v: it must be positive", d)
		}
	}
	notNegative := func(env, flag string, d time.Duration) {
		if d < 0 {
			bad(env, flag, "is %v: it must not be negative", d)
		}
	}
	if c.DBMaxConns < 0 {
		bad("PAYMENTS_DB_MAX_CONNS", "db-max-conns", "is %d: give a pool size, or 0 for four per core", c.DBMaxConns)
	}
	positive("PAYMENTS_DB_TX_TIMEOUT", "db-tx-timeout", c.DBTxTimeout)
	positive("PAYMENTS_SHUTDOWN_TIMEOUT", "shutdown-timeout", c.ShutdownTimeout)
	positive("PAYMENTS_SMTP_COMMAND_TIMEOUT", "smtp-command-timeout", c.SMTPCommandTimeout)
	positive("PAYMENTS_SMTP_DATA_TIMEOUT", "smtp-data-timeout", c.SMTPDataTimeout)
	switch {
	case c.RateLimit < 0:
		bad("PAYMENTS_RATE_LIMIT", "rate-limit", "is %v: give requests per second, or 0 for no limit", c.RateLimit)
	case c.RateLimit > 0 && c.RateLimitBurst < 1:
		bad("PAYMENTS_RATE_LIMIT_BURST", "rate-limit-burst", "is %d with a rate limit of %v: no request could ever pass; give at least 1 (or PAYMENTS_RATE_LIMIT=0 for no limit)",
			c.RateLimitBurst, c.RateLimit)
	}
	notNegative("PAYMENTS_AUTH_CACHE_TTL", "auth-cache-ttl", c.AuthCacheTTL)
	positive("PAYMENTS_STRIPE_SPENT_KEY_GRACE", "stripe-spent-key-grace", c.StripeSpentKeyGrace)
	positive("PAYMENTS_IDEMPOTENCY_KEY_TTL", "idempotency-key-ttl", c.KeyTTL)
	if c.LockTimeout < minLockTimeout {
		bad("PAYMENTS_LOCK_TIMEOUT", "lock-timeout", "is %v: it must be at least %v", c.LockTimeout, minLockTimeout)
	}
	if c.KeyFilter {
		if c.KeyFilterExpectedKeys < 1 {
			bad("PAYMENTS_KEYFILTER_EXPECTED_KEYS", "keyfilter-expected-keys", "is %d: it must be at least 1", c.KeyFilterExpectedKeys)
		}
		if c.KeyFilterFPRate <= 0 || c.KeyFilterFPRate >= 1 {
			bad("PAYMENTS_KEYFILTER_FP_RATE", "keyfilter-fp-rate", "is %v: it must be between 0 and 1", c.KeyFilterFPRate)
		}
		notNegative("PAYMENTS_KEYFILTER_SNAPSHOT_INTERVAL", "keyfilter-snapshot-interval", c.KeyFilterSnapshotInterval)
		positive("PAYMENTS_KEYFILTER_SNAPSHOT_MAX_AGE", "keyfilter-snapshot-max-age", c.KeyFilterSnapshotMaxAge)
	}
	positive("PAYMENTS_COMPLETER_INTERVAL", "completer-interval", c.CompleterInterval)
	positive("PAYMENTS_COMPLETER_GRACE", "completer-grace", c.CompleterGrace)
	positive("PAYMENTS_REAPER_INTERVAL", "reaper-interval", c.ReaperInterval)
	positive("PAYMENTS_ENQUEUER_POLL_INTERVAL", "enqueuer-poll-interval", c.EnqueuerPollInterval)
	positive("PAYMENTS_RECONCILE_INTERVAL", "reconcile-interval", c.ReconcileInterval)
	positive("PAYMENTS_RECONCILE_AFTER", "reconcile-after", c.ReconcileAfter)
	positive("PAYMENTS_RECONCILE_BACKOFF_CAP", "reconcile-backoff-cap", c.ReconcileBackoffCap)
	if !(c.ReconcileRate > 0) { // also NaN
		bad("PAYMENTS_RECONCILE_RATE", "reconcile-rate", "is %v: it must be more than 0", c.ReconcileRate)
	}
	if _, err := c.webhookRetrySchedule(); err != nil {
		bad("PAYMENTS_WEBHOOK_RETRY_SCHEDULE", "webhook-retry-schedule", "is %q: %v; give positive durations separated by commas, such as 5s,5m,30m",
			c.WebhookRetrySchedule, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	return nil
}
