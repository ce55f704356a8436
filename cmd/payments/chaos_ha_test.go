//go:build chaos

package main_test

// The chaos suite against make ha's formation (docs/API.md section 11): the
// same clients, processes and invariant checker as TestChaos, on a database
// behind haproxy, while the formation's primary is killed (its postmaster,
// then its Patroni) and paused. It writes docs/CHAOS-HA.md, whose table
// judges each promise of section 11, and fails on any that fails.
//
//	make ha && make chaos-ha
//
// Settings: HA_FORMATION (make ha's formation.json; make chaos-ha passes
// it), CHAOS_HA_REPORT (where the report goes; make chaos-ha: docs/CHAOS-HA.md),
// and the CHAOS_* of chaos_test.go, with other defaults here: 6 clients,
// think 200ms, no simulator faults, no service crashes, lock timeout 30s,
// key TTL a day, authorisations of 45s, settle timeout 150s, load until the
// faults are measured (at most CHAOS_DURATION, 6m).

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/cmd/payments/chaostest"
	"github.com/example/payments/internal/db"
)

func TestChaosHA(t *testing.T) {
	path := os.Getenv("HA_FORMATION")
	if path == "" {
		t.Fatal("HA_FORMATION is unset: run make chaos-ha (it starts make ha's formation and names its formation.json)")
	}
	f, err := chaostest.ReadFormation(path)
	require.NoError(t, err)

	// The HA run's defaults: a modest load (two cores carry the formation
	// too), no crashes of the service and no faults of the simulator (the
	// faults are the database's: Stripe's 500s and delays answer 503 and
	// hold keys by design, and would hide the database's recovery in every
	// measure; the webhooks' and the mail server's faults stay), a
	// lock timeout long enough that a key left locked by a lost connection
	// is seen as such instead of lapsing (30 s: longer than a paused
	// primary's outage, its lease and the failover), keys that live a day,
	// an authorisation that outlives a request held up by that outage (the
	// simulator cancels one after CHAOS_AUTHORISATION_LIFETIME, 20 s by
	// default, and the create then rightly answers "canceled"), and a settle
	// that outlasts River's rescue of the jobs whose completion its
	// completer gave up on during the outage (after three tries over about
	// 7 s; the worker rescues a job "running" for a minute).
	for k, v := range map[string]string{"CHAOS_CLIENTS": "6", "CHAOS_THINK": "200ms", "CHAOS_FAULT_RATE": "0",
		"CHAOS_CRASH_INTERVAL": "0", "CHAOS_LOCK_TIMEOUT": "30s", "CHAOS_KEY_TTL": "0", "CHAOS_DURATION": "6m",
		"CHAOS_AUTHORISATION_LIFETIME": "45s", "CHAOS_SETTLE_TIMEOUT": "150s"} {
		if _, ok := os.LookupEnv(k); !ok {
			t.Setenv(k, v)
		}
	}
	cfg, err := chaostest.ConfigFromEnv()
	require.NoError(t, err)
	t.Logf("chaos-ha: seed %d (set CHAOS_SEED=%d to replay its choices)", cfg.Seed, cfg.Seed)
	// The processes' logs are kept whenever the run fails, a promise of
	// its own as well as an invariant (the suite keeps them only for the
	// latter), with the formation's own logs (Patroni, PostgreSQL, etcd,
	// haproxy), which make chaos-ha removes with its directory.
	keepLogs := cfg.LogDir != ""
	if !keepLogs {
		cfg.LogDir, err = os.MkdirTemp("", "payments-chaos-ha-logs-")
		require.NoError(t, err)
	}
	defer func() {
		switch {
		case !t.Failed() && !keepLogs:
			_ = os.RemoveAll(cfg.LogDir)
		case t.Failed():
			if err := os.CopyFS(filepath.Join(cfg.LogDir, "formation"), os.DirFS(filepath.Join(filepath.Dir(path), "log"))); err != nil {
				t.Logf("chaos-ha: copying the formation's logs: %v", err)
			}
			t.Logf("chaos-ha: the processes' and the formation's logs are in %s", cfg.LogDir)
		}
	}()

	// A fresh database for the run, made and migrated through haproxy.
	ctx := context.Background()
	name := fmt.Sprintf("chaos_ha_%d", time.Now().Unix())
	admin, err := pgx.Connect(ctx, f.DatabaseURL)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))
	t.Cleanup(func() {
		admin, err := pgx.Connect(ctx, f.DatabaseURL)
		if err == nil {
			_, err = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_ = admin.Close(ctx)
		}
		if err != nil {
			t.Logf("chaos-ha: dropping %s: %v", name, err)
		}
	})
	url := strings.Replace(f.DatabaseURL, "/payments?", "/"+name+"?", 1)
	require.NoError(t, db.MigrateUp(ctx, url, slog.New(slog.DiscardHandler)))
	// The probe's table (chaostest.HA): the service never reads it.
	probe, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	_, err = probe.Exec(ctx, "CREATE TABLE chaos_ha_probe (id int PRIMARY KEY, at timestamptz NOT NULL)")
	require.NoError(t, err)
	require.NoError(t, probe.Close(ctx))

	// Each fault's lock window: longer than the longest lock lifetime of
	// the run's processes (serve-b's, twice the lock timeout).
	ha := &chaostest.HA{FormationPath: path, DatabaseURL: url, LockWindow: 2*cfg.LockTimeout + 5*time.Second}
	rep, err := chaostest.Run(ctx, cfg, chaostest.Options{Binary: binary, DatabaseURL: url, Logf: t.Logf, HA: ha})
	require.NoError(t, err)
	promises := ha.Promises(rep)
	doc := ha.HAMarkdown(rep, promises, fmt.Sprintf("haproxy on 127.0.0.1:%d", f.HAProxy.Port))
	t.Log("\n" + rep.String() + "\n" + doc)
	if out := os.Getenv("CHAOS_HA_REPORT"); out != "" {
		require.NoError(t, os.WriteFile(out, []byte(doc), 0o644))
	}
	for _, p := range promises {
		if !p.Pass {
			t.Errorf("chaos-ha: FAIL: %s: %s", p.Promise, p.Measured)
		}
	}
	if rep.Failed() {
		t.Errorf("chaos-ha: %d violations; seed %d; process logs in %s", len(rep.Violations), cfg.Seed, rep.LogDir)
	}
}
