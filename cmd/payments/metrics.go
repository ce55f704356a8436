package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
)

// The metrics listener: /metrics (and /healthz) on an address of its own,
// never on the API's port, so that what the service counts (keys needing
// attention, failed authentications by outcome, webhook failures) is not
// open to whoever reaches the API (issue 42). Loopback by default: a scraper
// on another machine needs the address set (0.0.0.0:9465 in a container).
// `off` (or an empty value) serves no metrics at all.
const (
	// defaultMetricsAddr is serve's and dev's; the worker keeps its own
	// (defaultWorkerMetricsAddr), so both run side by side on one machine.
	defaultMetricsAddr       = "127.0.0.1:9465"
	defaultWorkerMetricsAddr = "127.0.0.1:9464"
	metricsOff               = "off"
)

// metricsFlag adds --metrics-addr (env PAYMENTS_METRICS_ADDR) with def.
func (c *config) metricsFlag(f *flags, def string) {
	f.stringVar(&c.MetricsAddr, "metrics-addr", "PAYMENTS_METRICS_ADDR", def,
		"where /metrics and /healthz are served, apart from the API (loopback by default; off or empty: nowhere)")
}

// listenMetrics opens the metrics listener: nil when the address is off,
// or empty (which net.Listen would take for a random port on every
// interface: the opposite of what an empty setting means).
func listenMetrics(addr string) (net.Listener, error) {
	if a := strings.TrimSpace(addr); a == "" || strings.EqualFold(a, metricsOff) {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener (PAYMENTS_METRICS_ADDR, or %s to serve none): %w", metricsOff, err)
	}
	return ln, nil
}

// metricsServer is runAll's function serving ln, or waiting for the end
// when there is no listener.
func (p *process) metricsServer(ln net.Listener) func(context.Context) error {
	return func(ctx context.Context) error {
		if ln == nil {
			p.Log.Info("metrics not served", slog.String("reason", "PAYMENTS_METRICS_ADDR="+metricsOff))
			<-ctx.Done()
			return nil
		}
		return p.serveMetrics(ctx, ln)
	}
}
