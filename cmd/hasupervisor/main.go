// Command hasupervisor starts, supervises and stops the highly available
// PostgreSQL formation of deploy/ha on this machine, on loopback: three etcd
// members, three PostgreSQL 15 nodes under Patroni (synchronous_mode_strict)
// and haproxy in front of them (docs/API.md section 11).
//
//	hasupervisor up     render the configs, start the supervisor in the
//	                    background, wait until a primary takes writes through
//	                    haproxy, print the DATABASE_URL
//	hasupervisor down   stop it, by the PIDs it started
//	hasupervisor run    the supervisor itself, in the foreground
//
// Settings: HA_DIR (default .ha), where the data, the rendered configs, the
// logs and formation.json live; HA_PORT_BASE (default 26000), the first of
// the ports it takes (haproxy on the base itself; see ports); HA_TEMPLATES
// (default deploy/ha), the templates.
//
// The supervisor does what systemd would: a Patroni, etcd member or haproxy
// that dies is started again within 5 s (after 0.5 s, then up to 4 s if it
// keeps dying). It is also the subreaper of what they start: Patroni's
// postmasters are orphans by design (Patroni starts them as pg_ctl does),
// and a postmaster killed with -9 must be reaped for Patroni to see it gone
// (this machine's init does not reap). While it runs, $HA_DIR/formation.json
// says where everything is, with each node's current postmaster PID.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: hasupervisor up|down|run")
		os.Exit(2)
	}
	cfg, err := configFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hasupervisor:", err)
		os.Exit(2)
	}
	switch os.Args[1] {
	case "up":
		err = up(cfg)
	case "down":
		err = down(cfg)
	case "run":
		log := slog.New(slog.NewTextHandler(os.Stderr, nil))
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		err = run(ctx, cfg, log)
	default:
		err = errors.New("usage: hasupervisor up|down|run")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "hasupervisor:", err)
		os.Exit(1)
	}
}
