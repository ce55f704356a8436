package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/keyfilter"
)

// The scale run (make bench-scale, scripts/bench-scale.sh): B, C and E on
// databases of 0, 100k, 1M and 10M live keys; the start-up of the real
// binary on the big ones; and a churn run with a short TTL (churn.go).
// Its report is docs/BENCHMARKS-scale.md, apart from make bench's.

// scaleScenarios are the scenarios of the scale table.
var scaleScenarios = []string{"B", "C", "E"}

// scaleTarget is the database the cells of one size run on.
type scaleTarget struct {
	size int      // preloaded keys; 0: the young database
	db   *scaleDB // nil for size 0
}

// scaleCounters are a cell's buffer and size figures: the database's block
// hits and reads (pg_stat_database; a read is a block shared_buffers did
// not hold, found in the OS's page cache or on disk), idempotency_keys'
// own (pg_statio_user_tables: heap and indexes), and the sizes after it.
type scaleCounters struct {
	liveKeys              int64 // rows in idempotency_keys before the cell
	blksHit, blksRead     int64
	keyHeapHit, keyHeapRd int64
	keyIdxHit, keyIdxRd   int64
	keyTable, keyIndexes  int64 // bytes, after the cell
	otherTables           int64 // payments and audit_records, heap and indexes, after the cell
}

// readScaleCounters reads the cumulative counters of dbname, on a
// connection it closes again (settle waits for every session to go).
func (b *bench) readScaleCounters(ctx context.Context, dbname string) (scaleCounters, error) {
	var c scaleCounters
	conn, err := pgx.Connect(ctx, b.server.URL(dbname))
	if err != nil {
		return c, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = conn.QueryRow(ctx, `SELECT d.blks_hit, d.blks_read,
		coalesce(t.heap_blks_hit, 0), coalesce(t.heap_blks_read, 0), coalesce(t.idx_blks_hit, 0), coalesce(t.idx_blks_read, 0),
		pg_table_size('idempotency_keys'), pg_indexes_size('idempotency_keys'),
		pg_total_relation_size('payments') + pg_total_relation_size('audit_records'),
		(SELECT reltuples::bigint FROM pg_class WHERE oid = 'idempotency_keys'::regclass)
		FROM pg_stat_database d, pg_statio_user_tables t
		WHERE d.datname = current_database() AND t.relname = 'idempotency_keys'`).
		Scan(&c.blksHit, &c.blksRead, &c.keyHeapHit, &c.keyHeapRd, &c.keyIdxHit, &c.keyIdxRd,
			&c.keyTable, &c.keyIndexes, &c.otherTables, &c.liveKeys)
	return c, err
}

func (c scaleCounters) minus(o scaleCounters) scaleCounters {
	return scaleCounters{
		liveKeys: o.liveKeys, blksHit: c.blksHit - o.blksHit, blksRead: c.blksRead - o.blksRead,
		keyHeapHit: c.keyHeapHit - o.keyHeapHit, keyHeapRd: c.keyHeapRd - o.keyHeapRd,
		keyIdxHit: c.keyIdxHit - o.keyIdxHit, keyIdxRd: c.keyIdxRd - o.keyIdxRd,
		keyTable: c.keyTable, keyIndexes: c.keyIndexes, otherTables: c.otherTables,
	}
}

// countLiveKeys counts the rows of idempotency_keys exactly (reltuples is
// an estimate, stale after a cell's inserts).
func (b *bench) countLiveKeys(ctx context.Context, dbname string) (int64, error) {
	conn, err := pgx.Connect(ctx, b.server.URL(dbname))
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int64
	err = conn.QueryRow(ctx, "SELECT count(*) FROM idempotency_keys").Scan(&n)
	return n, err
}

// dropSnapshot deletes the key filter's stored snapshot, so that the next
// start rebuilds from every live key.
func (b *bench) dropSnapshot(ctx context.Context, dbname string) error {
	conn, err := pgx.Connect(ctx, b.server.URL(dbname))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, "DELETE FROM keyfilter_snapshots")
	return err
}

// filterConfigFor sizes the key filter for live keys as an operator would
// (PAYMENTS_KEYFILTER_EXPECTED_KEYS): a slice holds a third of a TTL's keys
// with the default 4 slices; never below the service's default.
func filterConfigFor(liveKeys int) keyfilter.Config {
	perSlice := uint(1 << 20)
	if n := uint((liveKeys + 2) / 3); n > perSlice {
		perSlice = n
	}
	return keyfilter.Config{ExpectedKeysPerSlice: perSlice}
}

// setupScale prepares scenario name (B, C or E) on the target's database.
func (b *bench) setupScale(ctx context.Context, t *scaleTarget, name string, clients int) (*scenario, error) {
	tracer := &sqlCounter{}
	serviceConns := b.o.serviceConns
	if serviceConns <= 0 {
		serviceConns = int(db.DefaultMaxConns())
	}
	filter := filterConfigFor(t.size)
	filter.Disabled = name == "E"
	client, us := httpClient(clients), b.users
	if t.size == 0 {
		// The young database: a new clone per cell, so it stays young; C
		// replays the keys prepareReplays made once through the service.
		if name == "C" {
			if err := b.prepareReplays(ctx); err != nil {
				return nil, err
			}
			if _, err := b.monitor.Exec(ctx, "CHECKPOINT"); err != nil {
				return nil, err
			}
			svc, err := b.startServiceWith(ctx, dbReplay, filter, tracer)
			if err != nil {
				return nil, err
			}
			keys := b.replayable
			return &scenario{dbname: dbReplay, conns: serviceConns, tracer: tracer,
				close: func() { client.CloseIdleConnections(); svc.close() },
				do: func(ctx context.Context, _ int, rng *rand.Rand) (string, error) {
					k := keys[rng.IntN(len(keys))]
					return postPayment(ctx, client, svc.url, k.user, k.key)
				},
			}, nil
		}
		if err := b.clone(ctx, dbPayments, tmplPayments); err != nil {
			return nil, err
		}
		svc, err := b.startServiceWith(ctx, dbPayments, filter, tracer)
		if err != nil {
			return nil, err
		}
		return &scenario{dbname: dbPayments, conns: serviceConns, tracer: tracer,
			close: func() { client.CloseIdleConnections(); svc.close() },
			do: func(ctx context.Context, _ int, rng *rand.Rand) (string, error) {
				return postPayment(ctx, client, svc.url, us[rng.IntN(len(us))], uuid.NewString())
			},
		}, nil
	}
	dbname := t.db.name
	b.sim.Reset()
	if _, err := b.monitor.Exec(ctx, "CHECKPOINT"); err != nil {
		return nil, err
	}
	svc, err := b.startServiceWith(ctx, dbname, filter, tracer)
	if err != nil {
		return nil, err
	}
	// The rebuild's reads are not the cell's: its connections go, and with
	// them their statistics (a backend flushes them when it exits), before
	// the cell's counters are read.
	svc.app.Pool.Reset()
	if err := b.settle(ctx, dbname); err != nil {
		svc.close()
		return nil, err
	}
	sc := &scenario{dbname: dbname, conns: serviceConns, tracer: tracer,
		close: func() { client.CloseIdleConnections(); svc.close() }}
	if name == "C" {
		// A replay of any preloaded request: its user is the preload's
		// (users in id order, as the preload spread them).
		size := t.size
		sc.do = func(ctx context.Context, _ int, rng *rand.Rand) (string, error) {
			i := 1 + rng.IntN(size)
			return postPayment(ctx, client, svc.url, us[i%len(us)], scaleKey(i))
		}
	} else {
		sc.do = func(ctx context.Context, _ int, rng *rand.Rand) (string, error) {
			return postPayment(ctx, client, svc.url, us[rng.IntN(len(us))], uuid.NewString())
		}
	}
	return sc, nil
}

// runScale is the scale run.
func runScale(ctx context.Context, o options, log *slog.Logger) error {
	start := time.Now()
	b, err := newScaleBench(ctx, o, log)
	if err != nil {
		return err
	}
	defer b.close()
	sr := &scaleRun{started: time.Now()}
	b.scaleRun = sr

	var targets []*scaleTarget
	for _, size := range o.scaleSizes {
		t := &scaleTarget{size: size}
		if size > 0 {
			if t.db, err = b.buildScaleDB(ctx, size); err != nil {
				return err
			}
			log.Info("built", slog.String("db", t.db.name), slog.Duration("took", t.db.took.Round(time.Second)))
		}
		targets = append(targets, t)
	}
	sr.buildDone = time.Now()
	if len(o.scaleScenarios) > 0 {
		for round := 1; round <= o.rounds; round++ {
			for _, c := range o.clients {
				for _, t := range targets {
					for _, s := range o.scaleScenarios {
						if err := ctx.Err(); err != nil {
							return err
						}
						res, err := b.runScaleCell(ctx, t, s, c)
						if err != nil {
							return fmt.Errorf("%s at %d keys, %d clients: %w", s, t.size, c, err)
						}
						res.round = round
						sr.cells = append(sr.cells, res)
					}
				}
			}
		}
	}
	sr.cellsDone = time.Now()
	for _, size := range o.startupSizes {
		t := findTarget(targets, size)
		if t == nil || t.db == nil {
			return fmt.Errorf("-startup %d: not among the -scale sizes", size)
		}
		// The first start finds no key filter snapshot (the table is
		// emptied) and rebuilds from every live key; it stores a snapshot
		// when it stops, which the second loads (issue 29).
		type startupRun struct{ filterOn, baseline, snapshot bool }
		runs := []startupRun{{true, false, false}, {true, false, true}, {false, false, false}}
		if o.baselineBin != "" {
			runs = append(runs, startupRun{true, true, false})
		}
		for _, run := range runs {
			if !run.snapshot {
				if err := b.dropSnapshot(ctx, t.db.name); err != nil {
					return fmt.Errorf("start-up at %d keys: %w", size, err)
				}
			}
			r, err := b.measureStartup(ctx, t, run.filterOn, run.baseline)
			if err != nil {
				return fmt.Errorf("start-up at %d keys: %w", size, err)
			}
			sr.startups = append(sr.startups, r)
		}
	}
	sr.startupDone = time.Now()
	if o.churnTTLs > 0 {
		for _, variant := range o.churnVariants {
			r, err := b.runChurn(ctx, variant)
			if err != nil {
				return fmt.Errorf("churn (%s): %w", variant, err)
			}
			sr.churns = append(sr.churns, r)
		}
	}
	sr.targets = targets
	b.elapsed = time.Since(start)
	if o.churnSVG != "" && len(sr.churns) > 0 {
		if err := b.writeChurnSVG(o.churnSVG); err != nil {
			return err
		}
	}
	report := b.scaleReport()
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

func findTarget(ts []*scaleTarget, size int) *scaleTarget {
	for _, t := range ts {
		if t.size == size {
			return t
		}
	}
	return nil
}

// scaleRun is what the scale run measured.
type scaleRun struct {
	started, buildDone, cellsDone, startupDone time.Time
	targets                                    []*scaleTarget
	cells                                      []*cellResult
	startups                                   []*startupResult
	churns                                     []*churnResult
}

// newScaleBench starts the cluster and the simulator, and makes the
// migrated template with the users (and the young template for size 0).
func newScaleBench(ctx context.Context, o options, log *slog.Logger) (*bench, error) {
	b := &bench{o: o, log: log}
	ok := false
	defer func() {
		if !ok {
			b.close()
		}
	}()
	if err := b.startCluster(ctx); err != nil {
		return nil, err
	}
	if err := b.startSimulator(); err != nil {
		return nil, err
	}
	if o.clusterDir != "" { // an earlier run's template: made again, with new users' keys
		if _, err := b.monitor.Exec(ctx, "DROP DATABASE IF EXISTS "+tmplPayments+" WITH (FORCE)"); err != nil {
			return nil, err
		}
	}
	if err := b.makePaymentsTemplate(ctx); err != nil {
		return nil, err
	}
	if err := b.clone(ctx, dbReplay, tmplPayments); err != nil {
		return nil, err
	}
	var err error
	if b.machine, err = b.describeMachine(ctx); err != nil {
		return nil, err
	}
	ok = true
	return b, nil
}

// runScaleCell is runCell on a scale target, with the buffer and size
// figures around it.
func (b *bench) runScaleCell(ctx context.Context, t *scaleTarget, name string, clients int) (*cellResult, error) {
	b.scaleTarget = t
	defer func() { b.scaleTarget = nil }()
	dbname := dbPayments
	switch {
	case t.db != nil:
		dbname = t.db.name
	case name == "C":
		dbname = dbReplay
	}
	res, err := b.runCell(ctx, name, clients)
	if err != nil {
		return nil, err
	}
	res.size = t.size
	res.liveKeys, err = b.countLiveKeys(ctx, dbname)
	if err != nil {
		return nil, err
	}
	res.liveKeys -= int64(res.outcomes["201"]) // the cell's own new keys were not there before it
	b.log.Info("scale cell", slog.Int("size", t.size), slog.String("scenario", name), slog.Int("clients", clients),
		slog.String("req/s", fmt.Sprintf("%.0f", res.rps)), slog.String("p50", fmtMs(res.p50)), slog.String("p99", fmtMs(res.p99)),
		slog.String("blk reads/req", fmt.Sprintf("%.2f", res.perReq(float64(res.scale.blksRead)))),
		slog.String("outcomes", res.outcomeString()))
	return res, nil
}

// scaleMedian is the cell of scenario s at size and clients with the
// median throughput, and all of them, slowest first.
func (sr *scaleRun) cellsOf(s string, size, clients int) []*cellResult {
	var rs []*cellResult
	for _, r := range sr.cells {
		if r.scenario == s && r.size == size && r.clients == clients {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(x, y *cellResult) int {
		switch {
		case x.rps < y.rps:
			return -1
		case x.rps > y.rps:
			return 1
		}
		return 0
	})
	return rs
}

func (sr *scaleRun) median(s string, size, clients int) *cellResult {
	rs := sr.cellsOf(s, size, clients)
	if len(rs) == 0 {
		return nil
	}
	return rs[len(rs)/2]
}

func mib(n int64) string { return fmt.Sprintf("%.0f", float64(n)/(1<<20)) }

func sizeName(n int) string {
	switch {
	case n == 0:
		return "young"
	case n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// startServiceWith is startService with a key filter configuration of its own.
func (b *bench) startServiceWith(ctx context.Context, dbname string, filter keyfilter.Config, tracer *sqlCounter) (*service, error) {
	saved := b.filterOverride
	b.filterOverride = &filter
	defer func() { b.filterOverride = saved }()
	return b.startService(ctx, dbname, !filter.Disabled, tracer)
}
