// Command paymentsbench measures what a new payment costs, end to end and
// against the raw SQL floors, and writes the figures as Markdown
// (docs/BENCHMARKS.md through scripts/bench.sh and `make bench`).
//
// In one run it starts its own throwaway PostgreSQL cluster (package
// pglocal, fsync on: durable settings, as in the pgbench baseline,
// with pg_stat_statements preloaded when the server has it) and an
// in-process Stripe simulator on a loopback HTTP server, and measures each
// scenario at each client count:
//
//	A-naive  Brandur's four SERIALIZABLE transactions per request, through pgx (own schema, own database)
//	A-naive-http  A-naive's transactions served over HTTP as a team would copy them: the same chi
//	         router, authentication, JSON and stripe-go call to the simulator as B (naivehttp.go)
//	A-own    the engine's transactions for one new payment, through recovery.Engine.Execute, no HTTP,
//	         no Stripe: a benchmark-only flow with create-payment's SQL and a no-op external call
//	B        POST /v1/payments end to end over HTTP, new keys, key filter on
//	C        replays of finished keys over HTTP
//	D        a same-key storm: every client sends the same new key at once, round after round
//	E        B with the key filter off
//
// Every cell but C starts from a fresh database, cloned from a template
// that holds -preload finished requests (100,000 by default; 0: empty
// tables, like the baseline's TRUNCATE), then a CHECKPOINT, a fresh pool and
// a fresh service (key filter rebuilt from the database, as at start-up);
// C replays keys made once in a database of its own. Each cell runs a
// warm-up and then a measured window.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/example/payments/internal/tuning"
)

// options are the command's flags.
type options struct {
	clients         []int
	warmup          time.Duration
	duration        time.Duration
	scenarios       []string
	out             string
	serviceConns    int
	floorConns      int
	walCompression  string
	users           int
	replayKeys      int
	stripeIdleConns int
	command         string
	keyfilterBench  string
	profileCell     string
	profileOut      string
	quick           bool
	keep            bool
	topSQL          int
	preload         int
	rounds          int
	goalRounds      int

	// The scale run (scale.go, startup.go, churn.go): make bench-scale.
	scaleSizes     []int
	scaleScenarios []string
	startupSizes   []int
	paymentsBin    string
	churnTTL       time.Duration
	churnTTLs      int
	churnRate      int
	churnReaper    time.Duration
	churnVariants  []string
	churnSVG       string
	scaleLoad      string
	baselineBin    string
	clusterDir     string

	// The reconciler's scenario (reconcile.go): make bench-reconcile.
	reconcile reconcileOptions
}

// allScenarios in the order they run at each client count.
var allScenarios = []string{"A-naive", "A-naive-http", "A-own", "B", "B-young", "E", "F", "G", "C", "D"}

// gogc is the garbage collector's setting in force (see internal/tuning).
var gogc string

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "paymentsbench:", err)
		os.Exit(1)
	}
}

func parseFlags() (options, error) {
	var o options
	var clients, scenarios string
	var scaleSizes, scaleScenariosFlag, startupSizes, churnVariants string
	fs := flag.NewFlagSet("paymentsbench", flag.ContinueOnError)
	fs.StringVar(&clients, "clients", "1,4,16,64", "comma-separated concurrent client counts")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "warm-up of each cell, not measured")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "measured window of each cell")
	fs.StringVar(&scenarios, "scenarios", strings.Join(allScenarios, ","), "comma-separated scenarios to run")
	fs.StringVar(&o.out, "out", "", "write the Markdown report here (default: stdout)")
	fs.IntVar(&o.serviceConns, "service-conns", 0, "the service's database pool size for B-E (0: the service's default, four per core)")
	fs.IntVar(&o.floorConns, "floor-conns", 0, "the database pool size for A-naive and A-own (0: one connection per client, as pgbench)")
	fs.StringVar(&o.walCompression, "wal-compression", "off", "the server's wal_compression, for every cell alike (off, pglz, lz4, zstd: what the server was built with)")
	fs.IntVar(&o.users, "users", 64, "users the load is spread over")
	fs.IntVar(&o.replayKeys, "replay-keys", 2048, "finished keys created for C to replay")
	fs.IntVar(&o.stripeIdleConns, "stripe-idle-conns", 0, "idle connections the service keeps to Stripe (0: as the service, stripeclient's 64)")
	fs.StringVar(&o.command, "command", "", "the command to print in the report (default: this one)")
	fs.StringVar(&o.keyfilterBench, "keyfilter-bench", "", "a file with `go test -bench` output of internal/keyfilter, for the filter's goals")
	fs.StringVar(&o.profileCell, "cpuprofile-cell", "", "profile one cell, as SCENARIO:CLIENTS (e.g. B:16): its CPU in the window, "+
		"and its allocations so far at the window's start and end (the -cpuprofile file's name with .allocs0 and .allocs1: "+
		"go tool pprof -sample_index=alloc_space -diff_base F.allocs0 F.allocs1 shows the window's)")
	fs.StringVar(&o.profileOut, "cpuprofile", "paymentsbench.cpu.pprof", "where -cpuprofile-cell writes the profile")
	fs.BoolVar(&o.quick, "quick", false, "a quick run: 1s cells with a 0.5s warm-up, clients 1,4, 20000 preloaded requests unless -preload is given "+
		"(overrides -clients, -warmup, -duration)")
	fs.IntVar(&o.preload, "preload", 100000, "finished requests in the database every cell starts from (0: empty tables)")
	fs.IntVar(&o.rounds, "rounds", 1, "run every cell this many times, interleaved, and report the median")
	fs.IntVar(&o.goalRounds, "goal-rounds", 0, "run the cells the goals read (16 and 64 clients) this many times instead (0: -rounds)")
	fs.IntVar(&o.topSQL, "top-sql", 0, "after each cell, log its N costliest statements by server execution time (pg_stat_statements)")
	fs.BoolVar(&o.keep, "keep", false, "keep the cluster's directory and log (for a look at PostgreSQL's log afterwards)")
	fs.IntVar(&o.reconcile.payments, "reconcile", 0, "the reconciler's scenario instead: payments over the simulated month (e.g. 1000000)")
	fs.IntVar(&o.reconcile.days, "reconcile-days", 30, "reconciler's scenario: simulated days")
	fs.DurationVar(&o.reconcile.interval, "reconcile-interval", 30*time.Second, "reconciler's scenario: PAYMENTS_RECONCILE_INTERVAL on the simulator's clock")
	fs.Float64Var(&o.reconcile.drop, "reconcile-drop", 0.01, "reconciler's scenario: share of webhooks lost")
	fs.Float64Var(&o.reconcile.dashboard, "reconcile-dashboard", 0.005, "reconciler's scenario: share of payments refunded in the dashboard (webhooks lost)")
	fs.Float64Var(&o.reconcile.disputes, "reconcile-disputes", 0.001, "reconciler's scenario: share of payments disputed at Stripe (pm_card_createDispute), their webhooks lost at -reconcile-drop")
	fs.StringVar(&scaleSizes, "scale", "", "the scale run instead: live keys of each database, comma-separated (e.g. 0,100000,1000000,10000000; 0 is the young database)")
	fs.StringVar(&scaleScenariosFlag, "scale-scenarios", strings.Join(scaleScenarios, ","), "scale run: the scenarios of the table (B, C, E; empty: none)")
	fs.StringVar(&startupSizes, "startup", "", "scale run: measure the start-up of -payments-bin on these -scale sizes, filter on and off")
	fs.StringVar(&o.paymentsBin, "payments-bin", "", "scale run: the payments binary (go build ./cmd/payments) for -startup and -churn-ttls")
	fs.DurationVar(&o.churnTTL, "churn-ttl", 20*time.Second, "scale run: the churn's PAYMENTS_IDEMPOTENCY_KEY_TTL")
	fs.IntVar(&o.churnTTLs, "churn-ttls", 0, "scale run: how many TTLs the churn's load lasts (0: no churn)")
	fs.IntVar(&o.churnRate, "churn-rate", 150, "scale run: the churn's new payments per second")
	fs.DurationVar(&o.churnReaper, "churn-reaper-interval", time.Second, "scale run: the churn's PAYMENTS_REAPER_INTERVAL")
	fs.StringVar(&churnVariants, "churn-variants", "as-migrated", "scale run: churn runs, comma-separated: as-migrated, default-autovacuum (as migrated, idempotency_keys' storage settings reset to PostgreSQL's defaults), before-000017 (migration 000017 run down)")
	fs.StringVar(&o.baselineBin, "startup-baseline-bin", "", "scale run: also time the start-up (filter on) of this payments binary, say one built from main, for a before/after in one run")
	fs.StringVar(&o.clusterDir, "cluster-dir", "", "run on the cluster in this directory (one an earlier -keep run left), kept; the scale run reuses the databases it finds there (for development: their cells have added keys)")
	fs.StringVar(&o.scaleLoad, "scale-load", "copy", "scale run: how the databases are filled: copy (COPY FREEZE from the benchmark, three tables at once) or insert (INSERT ... SELECT generate_series, one table at a time)")
	fs.StringVar(&o.churnSVG, "churn-svg", "", "scale run: write the churn's plot here (SVG)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return o, err
	}
	intList := func(name, v string) ([]int, error) {
		var out []int
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f == "" {
				continue
			}
			n, err := strconv.Atoi(f)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("-%s: %q is not a count", name, f)
			}
			out = append(out, n)
		}
		return out, nil
	}
	var err error
	if o.scaleSizes, err = intList("scale", scaleSizes); err != nil {
		return o, err
	}
	if o.startupSizes, err = intList("startup", startupSizes); err != nil {
		return o, err
	}
	for _, s := range strings.Split(scaleScenariosFlag, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !slices.Contains(scaleScenarios, s) {
			return o, fmt.Errorf("-scale-scenarios: %q is not one of %s", s, strings.Join(scaleScenarios, ", "))
		}
		o.scaleScenarios = append(o.scaleScenarios, s)
	}
	for _, v := range strings.Split(churnVariants, ",") {
		if v = strings.TrimSpace(v); v != churnAsMigrated && v != churnBefore && v != churnDefaultVacuum {
			return o, fmt.Errorf("-churn-variants: %q is not %s, %s or %s", v, churnAsMigrated, churnDefaultVacuum, churnBefore)
		}
		o.churnVariants = append(o.churnVariants, v)
	}
	if o.scaleLoad != "copy" && o.scaleLoad != "insert" {
		return o, fmt.Errorf("-scale-load: %q is not copy or insert", o.scaleLoad)
	}
	if (len(o.startupSizes) > 0 || o.churnTTLs > 0) && o.paymentsBin == "" {
		return o, errors.New("-startup and -churn-ttls need -payments-bin")
	}
	if o.quick {
		clients, o.warmup, o.duration = "1,4", 500*time.Millisecond, time.Second
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["preload"] {
			o.preload = 20000
		}
	}
	for _, c := range strings.Split(clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 || n > 256 {
			return o, fmt.Errorf("-clients: %q is not a client count from 1 to 256", c)
		}
		o.clients = append(o.clients, n)
	}
	for _, s := range strings.Split(scenarios, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(allScenarios, s) {
			return o, fmt.Errorf("-scenarios: unknown scenario %q (known: %s)", s, strings.Join(allScenarios, ", "))
		}
		o.scenarios = append(o.scenarios, s)
	}
	if o.duration <= 0 || o.warmup < 0 {
		return o, errors.New("-duration must be positive and -warmup not negative")
	}
	if o.users < 1 || o.replayKeys < 1 || o.rounds < 1 || o.goalRounds < 0 {
		return o, errors.New("-users, -replay-keys and -rounds must be positive, -goal-rounds not negative")
	}
	if o.goalRounds == 0 {
		o.goalRounds = o.rounds
	}
	if o.command == "" {
		o.command = "go run ./cmd/paymentsbench " + strings.Join(os.Args[1:], " ")
	}
	return o, nil
}

// goalClients are the client counts whose cells the goals read: they run
// -goal-rounds times (issue 40: one run decides, on medians of 5).
var goalClients = []int{16, 64}

// roundsAt is how many rounds the cells at c clients run.
func (o options) roundsAt(c int) int {
	if slices.Contains(goalClients, c) {
		return o.goalRounds
	}
	return o.rounds
}

func run() error {
	o, err := parseFlags()
	if err != nil {
		return err
	}
	gogc = tuning.Apply() // as cmd/payments does: the service's settings
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	if o.reconcile.payments > 0 {
		o.reconcile.out, o.reconcile.command = o.out, o.command
		return runReconcileBench(ctx, o.reconcile, log)
	}
	if len(o.scaleSizes) > 0 || o.churnTTLs > 0 {
		return runScale(ctx, o, log)
	}
	start := time.Now()
	b, err := newBench(ctx, o, log)
	if err != nil {
		return err
	}
	defer b.close()

	for round := 1; round <= max(o.rounds, o.goalRounds); round++ {
		for _, c := range o.clients {
			if round > o.roundsAt(c) {
				continue
			}
			for _, s := range allScenarios {
				if !slices.Contains(o.scenarios, s) || ((s == "F" || s == "G") && !slices.Contains(backgroundClients, c)) {
					continue
				}
				if err := ctx.Err(); err != nil {
					return err
				}
				res, err := b.runCell(ctx, s, c)
				if err != nil {
					return fmt.Errorf("%s at %d clients: %w", s, c, err)
				}
				res.round = round
				log.Info("cell", slog.String("scenario", s), slog.Int("clients", c), slog.Int("round", round),
					slog.String("req/s", fmt.Sprintf("%.0f", res.rps)), slog.String("p50", fmtMs(res.p50)),
					slog.String("p99", fmtMs(res.p99)), slog.String("stmts/req", fmt.Sprintf("%.1f", res.perReq(float64(res.client.statements)))),
					slog.String("retries/req", fmt.Sprintf("%.3f", res.perReq(float64(res.retries)))),
					slog.String("outcomes", res.outcomeString()))
				b.results = append(b.results, res)
			}
		}
	}
	b.elapsed = time.Since(start)
	report := b.report()
	if o.out == "" {
		_, err = os.Stdout.WriteString(report)
		return err
	}
	if err := os.WriteFile(o.out, []byte(report), 0o644); err != nil {
		return err
	}
	log.Info("wrote the report", slog.String("file", o.out), slog.Duration("took", b.elapsed.Round(time.Second)))
	return nil
}
