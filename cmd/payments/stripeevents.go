package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/webhooks"
)

const stripeEventsUsage = "payments stripe-events list --unprocessable [--limit N] [--json]"

// runStripeEvents is `payments stripe-events list --unprocessable`: the
// signed Stripe events the service could not decode or apply (answered 200
// and kept aside, with why), for an operator to look into. The database is
// found as `payments keys` finds it.
func runStripeEvents(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "list" {
		return fmt.Errorf("%w: %s", errUsage, stripeEventsUsage)
	}
	var cfg config
	var limit int
	var unprocessable, asJSON bool
	f := newFlags("stripe-events list", stderr)
	f.stringVar(&cfg.DatabaseURL, "database-url", "DATABASE_URL", "", "PostgreSQL connection URL (empty: the cluster in --data-dir)")
	f.stringVar(&cfg.DataDir, "data-dir", "PAYMENTS_DATA_DIR", ".data", "where payments dev keeps its PostgreSQL cluster")
	f.levelVar(&cfg.LogLevel, "log-level", "PAYMENTS_LOG_LEVEL", slog.LevelWarn, "debug, info, warn or error")
	f.BoolVar(&unprocessable, "unprocessable", false, "the events kept aside as unprocessable (the only list there is)")
	f.IntVar(&limit, "limit", 100, "at most this many events")
	f.BoolVar(&asJSON, "json", false, "JSON (with each body) instead of a table")
	positional, err := parseInterleaved(f, args[1:])
	switch {
	case err != nil:
		return err
	case len(positional) > 0:
		return fmt.Errorf("%w: stripe-events list takes no argument (got %q)", errUsage, positional[0])
	case !unprocessable:
		return fmt.Errorf("%w: give --unprocessable: %s", errUsage, stripeEventsUsage)
	case limit < 1:
		return fmt.Errorf("%w: --limit is %d: it must be at least 1", errUsage, limit)
	}
	log := newLogger(stderr, cfg.LogLevel)
	dbURL, stopDB, err := keysDatabase(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stopDB()
	pool, err := db.Open(ctx, dbURL, db.PoolConfig{MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	events, err := webhooks.ListUnprocessable(ctx, pool, limit)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(stdout, struct {
			Events []webhooks.Unprocessable `json:"events"`
		}{events})
	}
	if len(events) == 0 {
		_, err := fmt.Fprintln(stdout, "No Stripe event was kept aside as unprocessable.")
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RECEIVED\tEVENT\tTYPE\tREASON")
	for _, e := range events {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", timeText(e.Received), quotedOrDash(e.EventID), quotedOrDash(e.EventType), e.Reason)
	}
	return tw.Flush()
}

func quotedOrDash(s *string) string {
	if s == nil {
		return "-"
	}
	return fmt.Sprintf("%q", *s)
}
