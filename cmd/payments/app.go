package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/example/payments/internal/api"
	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/failpoint"
	"github.com/example/payments/internal/keyfilter"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stagedjobs"
	"github.com/example/payments/internal/webhooks"
	"github.com/example/payments/internal/worker"
)

// app is the service's parts, built once from the configuration and shared
// by serve, worker and dev.
type app struct {
	cfg      config
	log      *slog.Logger
	pool     *pgxpool.Pool
	engine   *recovery.Engine
	payments *payments.Service
	webhooks *webhooks.Receiver
	registry *prometheus.Registry
}

func newApp(ctx context.Context, cfg config, log *slog.Logger) (*app, error) {
	failpoints, err := failpoint.Parse(cfg.Failpoints)
	if err != nil {
		return nil, fmt.Errorf("%w: PAYMENTS_FAILPOINTS: %v", errUsage, err)
	}
	stripe, err := newStripeClient(cfg, log)
	if err != nil {
		return nil, err
	}
	pool, err := db.Open(ctx, cfg.DatabaseURL, db.PoolConfig{MaxConns: int32(cfg.DBMaxConns)})
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	filter, err := keyfilter.New(keyfilter.Config{
		TTL: cfg.KeyTTL, ExpectedKeysPerSlice: uint(cfg.KeyFilterExpectedKeys), FalsePositiveRate: cfg.KeyFilterFPRate,
		Disabled: !cfg.KeyFilter, Registry: reg,
	})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("%w: key filter: %v", errUsage, err)
	}
	engine := recovery.New(recovery.Config{
		Pool: pool, Logger: log, KeyTTL: cfg.KeyTTL, LockTimeout: cfg.LockTimeout, Failpoints: failpoints, KeyFilter: filter,
	})
	if cfg.StripeWebhookSecret == "" {
		log.Warn("STRIPE_WEBHOOK_SECRET is not set: every Stripe webhook delivery will be refused")
	}
	return &app{
		cfg: cfg, log: log, pool: pool, engine: engine, registry: reg,
		payments: payments.NewService(pool, engine, stripe),
		webhooks: webhooks.NewReceiver(webhooks.Config{
			Pool: pool, Secret: cfg.StripeWebhookSecret, Logger: log.With(slog.String("component", "webhooks")), Registry: reg,
		}),
	}, nil
}

func (a *app) close() { a.pool.Close() }

// serveAPI serves the API on ln until ctx is cancelled, then stops taking new
// connections and gives in-flight requests cfg.ShutdownTimeout to finish.
// The key filter is rebuilt meanwhile; until it is ready, claims are careful.
func (a *app) serveAPI(ctx context.Context, ln net.Listener) error {
	go func() {
		start := time.Now()
		st, err := a.engine.RebuildKeyFilter(ctx)
		if err != nil {
			a.log.Warn("key filter rebuild failed; claims stay careful", slog.String("error", err.Error()))
			return
		}
		a.log.Info("key filter ready", slog.Int("keys", st.Added), slog.Duration("took", time.Since(start)))
	}()
	handler := api.NewHandler(api.Config{
		Pool: a.pool, Engine: a.engine, Payments: a.payments, Webhooks: a.webhooks, Logger: a.log, Registry: a.registry,
		RateLimit:    api.RateLimit{Rate: a.cfg.RateLimit, Burst: a.cfg.RateLimitBurst},
		AuthCacheTTL: a.cfg.apiAuthCacheTTL(),
	})
	a.log.Info("API listening", slog.String("addr", ln.Addr().String()))
	return a.serveHTTP(ctx, ln, handler, "API")
}

// runWorker does the background work until ctx is cancelled.
func (a *app) runWorker(ctx context.Context) error {
	mailer, err := stagedjobs.NewMailer(a.cfg.SMTPURL, a.log.With(slog.String("component", "mailer")))
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return worker.Run(ctx, worker.Config{
		Pool: a.pool, Logger: a.log, Registry: a.registry, Engine: a.engine, Flows: a.payments.Flows(), Mailer: mailer,
		CompleterInterval: a.cfg.CompleterInterval, CompleterGrace: a.cfg.CompleterGrace,
		ReaperInterval: a.cfg.ReaperInterval, EnqueuerPollInterval: a.cfg.EnqueuerPollInterval,
	})
}

// serveMetrics serves /metrics and /healthz on ln, for a process without the API.
func (a *app) serveMetrics(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{\"status\":\"ok\"}\n")) })
	a.log.Info("metrics listening", slog.String("addr", ln.Addr().String()))
	return a.serveHTTP(ctx, ln, mux, "metrics")
}

func (a *app) serveHTTP(ctx context.Context, ln net.Listener, handler http.Handler, name string) error {
	srv := &http.Server{
		Handler: handler,
		// Every phase of a request is bounded, so a slow or stuck client cannot
		// hold a connection (and a goroutine) forever.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	a.log.Info("shutting down "+name+": draining in-flight requests", slog.String("timeout", a.cfg.ShutdownTimeout.String()))
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("draining %s requests: %w", name, err)
	}
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	a.log.Info(name + " stopped")
	return nil
}

// runAll runs each function until ctx ends or one fails; a failure stops
// the others. It returns the first error.
func runAll(ctx context.Context, fns ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(fns))
	for _, fn := range fns {
		go func() {
			err := fn(ctx)
			cancel()
			errs <- err
		}()
	}
	var first error
	for range fns {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
