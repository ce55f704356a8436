package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
)

// runWorker is `payments worker`: the background work only (enqueuer, job
// workers, completer, reaper), with /metrics on --metrics-addr. Any number
// may run at once.
func runWorker(ctx context.Context, args []string, stderr io.Writer) error {
	var cfg config
	var metricsAddr string
	f := newFlags("worker", stderr)
	cfg.commonFlags(f)
	f.stringVar(&metricsAddr, "metrics-addr", "PAYMENTS_METRICS_ADDR", "127.0.0.1:9464", "where the worker serves /metrics, /healthz and /readyz")
	if err := f.parse(args); err != nil {
		return err
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	if cfg.DatabaseURL == "" {
		return fmt.Errorf("%w: worker needs DATABASE_URL (or --database-url)", errUsage)
	}
	log := newLogger(stderr, cfg.LogLevel)
	log.Info("starting payments worker", slog.Any("config", cfg))
	flushTraces, err := startTracing(ctx, "worker", log)
	if err != nil {
		return err
	}
	defer flushTraces()
	p, err := newProcess(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer p.Close()
	ln, err := net.Listen("tcp", metricsAddr)
	if err != nil {
		return err
	}
	return runAll(ctx, p.runWorker, func(ctx context.Context) error { return p.serveMetrics(ctx, ln) })
}
