// Package app assembles the payments service from its parts: the database
// pool, the key filter, the engine, the payment flows, the webhook receiver,
// the metrics registry, and the API's HTTP handler and server. Every program
// that runs the service builds it here: cmd/payments serves it, and
// cmd/paymentsbench measures it (scenarios B to E), so the benchmark
// measures the service as it runs and cannot drift from it.
//
// It holds no behaviour of its own: configuration in, wired parts out.
// Reading configuration (flags, environment) and running the parts (serving,
// shutting down, the background workers) are its callers' business.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/example/payments/internal/api"
	"github.com/example/payments/internal/console"
	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/failpoint"
	"github.com/example/payments/internal/keyadmin"
	"github.com/example/payments/internal/keyfilter"
	"github.com/example/payments/internal/merchanthooks"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/webhooks"
)

// Config is what the parts need. Zero values take each part's default.
type Config struct {
	DatabaseURL string
	Pool        db.PoolConfig
	// KeyTTL is how long an idempotency key is remembered, by the engine
	// and by the key filter alike. Default 24h.
	KeyTTL      time.Duration
	LockTimeout time.Duration
	// StripeSpentKeyGrace is recovery.Config.SpentKeyGrace (zero: its default).
	StripeSpentKeyGrace time.Duration
	Failpoints          *failpoint.Set
	// KeyFilter sizes the key filter, or turns it off (Disabled). Its TTL
	// and Registry are the app's.
	KeyFilter keyfilter.Config
	Stripe    *stripeclient.Client
	// PaymentsOptions change how the payments service is built (the
	// benchmark's engine floor injects its create flow's Stripe call).
	PaymentsOptions []payments.Option
	WebhookSecret   string
	// WebhookURLCheck vets a new webhook endpoint's URL beyond its syntax
	// (api.Config.WebhookURLCheck); nil checks the syntax only.
	WebhookURLCheck api.URLCheck
	Logger          *slog.Logger
	// ConsoleToken, when set, serves the operator's console at /console
	// (docs/API.md section 10) with this credential; ConsoleTraceURL links
	// its keys to their traces ({trace_id} replaced).
	ConsoleToken    string
	ConsoleTraceURL string
}

// App is the service's parts, wired together.
type App struct {
	Log      *slog.Logger
	Pool     *pgxpool.Pool
	Engine   *recovery.Engine
	Payments *payments.Service
	Webhooks *webhooks.Receiver
	// Hooks runs the webhooks to merchants: endpoints and redelivery.
	Hooks *merchanthooks.Service
	// Registry holds every part's metrics, and the Go runtime's and the
	// process's.
	Registry *prometheus.Registry

	checkURL api.URLCheck
	console  console.Config // Token "": no console
}

// ErrKeyFilterConfig wraps a key filter configuration that keyfilter refused.
var ErrKeyFilterConfig = errors.New("key filter configuration")

// New connects to the database and builds the parts. The key filter starts
// cold, answering "maybe seen" until Engine.RebuildKeyFilter has run.
func New(ctx context.Context, cfg Config) (*App, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The flows' declarations need no database: the engine built from them
	// alone refuses a flow declared wrong or a failpoint that no flow fires
	// before anything connects (buildEngine builds it again below, with
	// the pool, and would refuse the same).
	if err := (&App{}).buildEngine(recovery.Config{Failpoints: cfg.Failpoints}, cfg.Stripe, cfg.PaymentsOptions...); err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	filterCfg := cfg.KeyFilter
	filterCfg.TTL, filterCfg.Registry = cfg.KeyTTL, reg
	filter, err := keyfilter.New(filterCfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrKeyFilterConfig, err)
	}
	pool, err := db.Open(ctx, cfg.DatabaseURL, cfg.Pool)
	if err != nil {
		return nil, err
	}
	// What an operator alerts on, in every process (docs/metrics.md): the
	// keys needing a person and the completer's lag, read from the database
	// on scrape, and this process's serialization retries.
	keyadmin.RegisterMetrics(reg, pool)
	payments.RegisterMetrics(reg, pool) // payments_stripe_duplicates_total
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "payments_db_serialization_retries_total",
		Help: "Transactions this process ran again after a serialization failure or deadlock.",
	}, func() float64 { return float64(db.SerializationRetries()) }))
	a := &App{
		Log: log, Pool: pool, Registry: reg, checkURL: cfg.WebhookURLCheck,
		Webhooks: webhooks.NewReceiver(webhooks.Config{
			Pool: pool, Secret: cfg.WebhookSecret, Logger: log.With(slog.String("component", "webhooks")), Registry: reg,
		}),
	}
	if err := a.buildEngine(recovery.Config{
		Pool: pool, Logger: log, KeyTTL: cfg.KeyTTL, LockTimeout: cfg.LockTimeout, SpentKeyGrace: cfg.StripeSpentKeyGrace,
		Failpoints: cfg.Failpoints, KeyFilter: filter,
	}, cfg.Stripe, cfg.PaymentsOptions...); err != nil {
		pool.Close()
		return nil, err
	}
	engine := a.Engine
	if cfg.ConsoleToken != "" {
		// The console re-drives keys as `payments keys retry` does: through
		// keyadmin, with a completer of its own that only RetryNow uses.
		completer := recovery.NewCompleter(recovery.CompleterConfig{Engine: engine})
		a.console = console.Config{
			Token: cfg.ConsoleToken, TraceURL: cfg.ConsoleTraceURL, Pool: pool, Hooks: a.Hooks,
			Keys: keyadmin.New(pool, engine.Flows(), completer), Logger: log.With(slog.String("component", "console")),
		}
	}
	return a, nil
}

// buildEngine builds the services, which register every flow with the
// engine's builder, and then the engine, here and once: it refuses a flow
// declared wrong, a name taken twice, or a failpoint that no flow fires (a
// misspelt one would never fire), and the service does not start.
func (a *App) buildEngine(cfg recovery.Config, stripe *stripeclient.Client, opts ...payments.Option) (err error) {
	b := recovery.NewBuilder(cfg)
	a.Payments = payments.NewService(a.Pool, b, stripe, opts...)
	a.Hooks = merchanthooks.NewService(a.Pool, b)
	a.Engine, err = b.Build()
	return err
}

// DeclaredFlows are every flow the service runs, as declared, in name
// order, built without a database: for what is derived from the
// declarations (the README's table of recovery points and failpoints, the
// chaos suite's failpoints).
func DeclaredFlows() ([]*recovery.Flow, error) {
	a := &App{}
	if err := a.buildEngine(recovery.Config{}, nil); err != nil {
		return nil, err
	}
	return a.Engine.Flows(), nil
}

// Close closes the pool.
func (a *App) Close() { a.Pool.Close() }

// APIHandler is the HTTP API over the app's parts. A zero limit turns rate
// limiting off; authCacheTTL is api.Config's AuthCacheTTL.
func (a *App) APIHandler(limit api.RateLimit, authCacheTTL time.Duration) (http.Handler, error) {
	return api.NewHandler(api.Config{
		Pool: a.Pool, Engine: a.Engine, Payments: a.Payments, Webhooks: a.Webhooks, Logger: a.Log, Registry: a.Registry,
		Hooks: a.Hooks, WebhookURLCheck: a.checkURL,
		RateLimit: limit, AuthCacheTTL: authCacheTTL, Console: a.consoleHandler(),
	})
}

// consoleHandler mounts the console when a token is configured.
func (a *App) consoleHandler() func(api.FailedAuthGate) http.Handler {
	if a.console.Token == "" {
		return nil
	}
	return func(gate api.FailedAuthGate) http.Handler {
		cfg := a.console
		cfg.Gate = gate
		h, err := console.New(cfg)
		if err != nil { // only a missing token fails, and it is not missing
			panic(err)
		}
		return h
	}
}

// NewServer is an HTTP server for handler with the service's timeouts:
// every phase of a request is bounded, so a slow or stuck client cannot hold
// a connection (and a goroutine) forever.
func NewServer(handler http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}
