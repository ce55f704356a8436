//go:build chaos

package main_test

// The chaos suite: the real binary, two API instances and a worker on one
// database, the Stripe simulator, many retrying clients, simulator faults
// of every kind, failpoint crashes, SIGKILLs and restarts; then an
// invariant checker proves every customer was charged exactly once.
// cmd/payments/chaostest does the work; this test only hands it the binary and a
// database.
//
//	CHAOS_DURATION=60s go test -tags chaos -run '^TestChaos$' -count=1 -v -timeout 20m ./cmd/payments/
//
// Settings (chaostest.ConfigFromEnv), with their defaults:
//
//	CHAOS_DURATION=60s           how long clients start new requests
//	CHAOS_CLIENTS=16             clients at once
//	CHAOS_THINK=100ms            mean pause of a client between two chains
//	CHAOS_SEED=<random>          printed; the same seed makes the same choices
//	CHAOS_FAULT_RATE=4           simulator faults armed per second
//	CHAOS_CRASH_INTERVAL=3s      mean time between crash events (0: none)
//	CHAOS_KILL_WORKER=false      also SIGKILL the worker (see chaostest.Config)
//	CHAOS_LOCK_TIMEOUT=2s        the service's PAYMENTS_LOCK_TIMEOUT
//	CHAOS_WEBHOOK_DUPLICATES=0.1 share of webhook events delivered twice
//	CHAOS_WEBHOOK_DROP=0         share of webhook events never delivered (1: none; the reconciler,
//	                             PAYMENTS_RECONCILE_AFTER=2s in the cluster, brings the records to Stripe's)
//	CHAOS_REQUEST_BUDGET=2m      retry budget of one logical request
//	CHAOS_SETTLE_TIMEOUT=60s     longest settling without progress
//	CHAOS_LOG_DIR=               keep the processes' logs there (else kept only on failure)
//	CHAOS_REPORT=                also write the report to this file

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/cmd/payments/chaostest"
	"github.com/example/payments/internal/dbtest"
)

func TestChaos(t *testing.T) {
	cfg, err := chaostest.ConfigFromEnv()
	require.NoError(t, err)
	t.Logf("chaos: seed %d (set CHAOS_SEED=%d to replay its choices)", cfg.Seed, cfg.Seed)

	rep, err := chaostest.Run(context.Background(), cfg, chaostest.Options{
		Binary: binary, DatabaseURL: dbtest.NewURL(t), Logf: t.Logf,
	})
	require.NoError(t, err)
	report := rep.String() + "\nfor the docs:\n\n" + rep.Markdown()
	t.Log("\n" + report)
	if path := os.Getenv("CHAOS_REPORT"); path != "" {
		require.NoError(t, os.WriteFile(path, []byte(report), 0o644))
	}
	if rep.Failed() {
		t.Fatalf("chaos: %d violations; seed %d; process logs in %s", len(rep.Violations), cfg.Seed, rep.LogDir)
	}
}
