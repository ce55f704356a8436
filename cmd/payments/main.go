// Command payments is the payments service: the API, its background workers,
// the schema migrations, the Stripe simulator and a one-command dev mode, as
// subcommands of one binary. `payments help` lists them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/example/payments/internal/tuning"
)

const usage = `payments: a payment gateway that charges exactly once

Usage: payments <command> [flags]

Commands:
  dev         everything on one machine: local PostgreSQL, migrations, demo users, the API
  serve       the HTTP API only (needs DATABASE_URL, and STRIPE_SECRET_KEY or STRIPE_API_BASE)
  worker      background work only: staged jobs, receipts, events, completer, reaper
  migrate     schema migrations: payments migrate up|down|version (needs DATABASE_URL)
  stripesim   the Stripe simulator alone (--addr, --webhook-url, --webhook-secret)
  users       payments users create --email E: a new user, its API key printed once
  keys        the operator's view of idempotency keys: payments keys list|show|retry (stuck requests, their story, a retry now)
  stripe-events payments stripe-events list --unprocessable: signed Stripe events that could not be decoded or applied, kept aside
  listen      receive your webhooks here while you develop: prints each, forwards it (--forward-to URL)
  healthcheck payments healthcheck --url U: exit 0 when U answers 200 (for container health checks)

Every flag has an environment twin; run "payments <command> -h" to see them.
`

func main() {
	tuning.Apply()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errNoCommand):
		fmt.Fprintf(os.Stderr, "payments: %v\n\n%s", err, usage)
		os.Exit(2)
	case errors.Is(err, errUsage):
		// The one setting that is wrong and how to give it; the whole
		// usage would bury it.
		fmt.Fprintf(os.Stderr, "payments: %v\n(payments help lists the commands; payments <command> -h a command's flags)\n", err)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "payments: %v\n", err)
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

// errNoCommand is the usage error of a missing or unknown command: the
// only one answered with the whole usage, which lists the commands.
var errNoCommand = fmt.Errorf("%w", errUsage)

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: no command given", errNoCommand)
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "dev":
		return runDev(ctx, args, stdout, stderr)
	case "serve":
		return runServe(ctx, args, stderr)
	case "worker":
		return runWorker(ctx, args, stderr)
	case "migrate":
		return runMigrate(args, stdout, stderr)
	case "stripesim":
		return runStripesim(ctx, args, stdout, stderr)
	case "users":
		return runUsers(ctx, args, stdout, stderr)
	case "healthcheck":
		return runHealthcheck(ctx, args, stderr)
	case "listen":
		return runListen(ctx, args, stdout, stderr)
	case "keys":
		return runKeys(ctx, args, stdout, stderr)
	case "stripe-events":
		return runStripeEvents(ctx, args, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		return fmt.Errorf("%w: unknown command %q", errNoCommand, cmd)
	}
}
