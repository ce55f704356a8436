package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// runStripesim is `payments stripesim`: the Stripe simulator alone.
func runStripesim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var addr, webhookURL, webhookSecret, stateFile string
	var level slog.Level
	var authorisationLifetime time.Duration
	f := newFlags("stripesim", stderr)
	f.stringVar(&addr, "addr", "PAYMENTS_STRIPESIM_ADDR", "127.0.0.1:12111", "address the simulator listens on")
	f.stringVar(&webhookURL, "webhook-url", "PAYMENTS_STRIPESIM_WEBHOOK_URL", "", "where to deliver signed webhook events (empty: none)")
	f.stringVar(&webhookSecret, "webhook-secret", "STRIPE_WEBHOOK_SECRET", "", "secret that signs the webhook events (whsec_...)")
	f.durationVar(&authorisationLifetime, "authorisation-lifetime", "PAYMENTS_STRIPESIM_AUTHORISATION_LIFETIME", 7*24*time.Hour,
		"how long an uncaptured authorisation lives before the simulator cancels it, as Stripe does after 7 days (shorter for chaos runs)")
	f.stringVar(&stateFile, "state-file", "PAYMENTS_STRIPESIM_STATE_FILE", "",
		"a file that keeps the simulator's objects and idempotency keys across restarts, written after every change (empty: memory only)")
	f.levelVar(&level, "log-level", "PAYMENTS_LOG_LEVEL", slog.LevelInfo, "debug, info, warn or error")
	if err := f.parse(args); err != nil {
		return err
	}
	if authorisationLifetime <= 0 {
		return fmt.Errorf("%w: PAYMENTS_STRIPESIM_AUTHORISATION_LIFETIME (--authorisation-lifetime) is %v: it must be positive", errUsage, authorisationLifetime)
	}
	if webhookURL != "" && webhookSecret == "" {
		return fmt.Errorf("%w: --webhook-url needs --webhook-secret (or STRIPE_WEBHOOK_SECRET)", errUsage)
	}
	log := newLogger(stderr, level)
	sim, err := startSimulator(addr, webhookURL, webhookSecret, authorisationLifetime, stateFile, log)
	if err != nil {
		return err
	}
	defer sim.stop()
	fmt.Fprintf(stdout, "Stripe simulator listening on %s\n", sim.url)
	log.Info("stripe simulator listening", slog.String("url", sim.url), slog.String("webhook_url", webhookURL))
	<-ctx.Done()
	log.Info("stripe simulator stopping")
	return nil
}
