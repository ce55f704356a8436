package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/example/payments/internal/api"
	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/failpoint"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stripeclient"
)

// runServe is `payments serve`: the HTTP API against an existing database.
func runServe(ctx context.Context, args []string, stderr io.Writer) error {
	var cfg config
	f := newFlags("serve", stderr)
	cfg.commonFlags(f)
	if err := f.parse(args); err != nil {
		return err
	}
	if cfg.DatabaseURL == "" {
		return fmt.Errorf("%w: serve needs DATABASE_URL (or --database-url)", errUsage)
	}
	log := newLogger(stderr, cfg.LogLevel)
	log.Info("starting payments serve", slog.Any("config", cfg))
	stripe, err := newStripeClient(cfg, log)
	if err != nil {
		return err
	}
	pool, err := db.Open(ctx, cfg.DatabaseURL, db.PoolConfig{MaxConns: int32(cfg.DBMaxConns)})
	if err != nil {
		return err
	}
	defer pool.Close()
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	return serveAPI(ctx, cfg, log, pool, stripe, ln)
}

// serveAPI serves the API on ln until ctx is cancelled, then stops taking new
// connections and gives in-flight requests cfg.ShutdownTimeout to finish.
func serveAPI(ctx context.Context, cfg config, log *slog.Logger, pool *pgxpool.Pool, stripe *stripeclient.Client, ln net.Listener) error {
	failpoints, err := failpoint.Parse(cfg.Failpoints)
	if err != nil {
		return fmt.Errorf("%w: PAYMENTS_FAILPOINTS: %v", errUsage, err)
	}
	engine := recovery.New(recovery.Config{
		Pool: pool, Logger: log, KeyTTL: cfg.KeyTTL, LockTimeout: cfg.LockTimeout, Failpoints: failpoints,
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv := &http.Server{
		Handler: api.NewHandler(api.Config{
			Pool: pool, Engine: engine, Payments: payments.NewService(pool, engine, stripe), Logger: log, Registry: reg,
		}),
		// Every phase of a request is bounded, so a slow or stuck client cannot
		// hold a connection (and a goroutine) forever.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("API listening", slog.String("addr", ln.Addr().String()))

	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: draining in-flight requests", slog.String("timeout", cfg.ShutdownTimeout.String()))
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("draining requests: %w", err)
	}
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("API stopped")
	return nil
}
