package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
)

// runServe is `payments serve`: the HTTP API against an existing database.
func runServe(ctx context.Context, args []string, stderr io.Writer) error {
	var cfg config
	f := newFlags("serve", stderr)
	cfg.commonFlags(f)
	cfg.metricsFlag(f, defaultMetricsAddr)
	if err := f.parse(args); err != nil {
		return err
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	if cfg.DatabaseURL == "" {
		return fmt.Errorf("%w: serve needs DATABASE_URL (or --database-url)", errUsage)
	}
	log := newLogger(stderr, cfg.LogLevel)
	log.Info("starting payments serve", slog.Any("config", cfg))
	flushTraces, err := startTracing(ctx, "serve", log)
	if err != nil {
		return err
	}
	defer flushTraces()
	p, err := newProcess(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer p.Close()
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	metrics, err := listenMetrics(cfg.MetricsAddr)
	if err != nil {
		return err
	}
	return runAll(ctx, func(ctx context.Context) error { return p.serveAPI(ctx, ln) }, p.metricsServer(metrics))
}
