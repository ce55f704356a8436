package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/example/payments/migrations"
)

// The churn run: keys expire in seconds instead of a day, so a few minutes
// hold several TTLs of inserts and deletions. `payments serve` and
// `payments worker` (the real binaries: the reaper and the completer run
// in the worker, as in production) on a young database, under a steady
// load of new payments at a fixed rate, sampled every second.
//
// Time is compressed, and so is everything that runs on a clock: the
// reaper's interval (-churn-reaper-interval; the default minute is 0.07 %
// of the default 24 h TTL) and autovacuum's naptime (1 s instead of a
// minute, for this run only), so that each keeps the share of a TTL it has
// in production.

// The churn variants: the database as migrated, or as it was before
// migration 000017 (its down migration run on the clone).
const (
	churnAsMigrated    = "as-migrated"
	churnBefore        = "before-000017"
	churnDefaultVacuum = "default-autovacuum" // as migrated, idempotency_keys' storage settings reset
)

// churnNaptime is autovacuum_naptime during the churn.
const churnNaptime = "1s"

// churnSample is the key table at one moment.
type churnSample struct {
	at          time.Duration // since the load began
	rows        int64         // count(*)
	unexpired   int64         // unfinished, or finished and not yet expired
	nLive       int64         // pg_stat_user_tables
	nDead       int64
	table       int64 // pg_table_size, bytes
	indexes     int64 // pg_indexes_size
	lag         float64
	autovacuums int64
	sent, ok    int64 // requests sent and answered 201 so far
	// webhook_deliveries: its rows, and the rows its scans have read so
	// far (seq_tup_read): each key the reaper deletes looks up the
	// deliveries that refer to it.
	deliveries, deliveryScanRows int64
}

// churnResult is one churn run.
type churnResult struct {
	variant      string
	ttl          time.Duration
	reaper       time.Duration
	rate         float64 // the target, new payments per second
	achieved     float64 // 201s per second over the load
	load         time.Duration
	samples      []churnSample
	outcomes     map[string]int
	reloptions   string // idempotency_keys' storage settings during the run
	reaperRuns   int
	reaperErrors int
}

func (b *bench) runChurn(ctx context.Context, variant string) (*churnResult, error) {
	o := b.o
	r := &churnResult{variant: variant, ttl: o.churnTTL, reaper: o.churnReaper, rate: float64(o.churnRate), outcomes: map[string]int{}}
	const dbname = "churn"
	if err := b.clone(ctx, dbname, tmplPayments); err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, b.server.URL(dbname))
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if variant == churnDefaultVacuum {
		if err := resetStorageSettings(ctx, conn, "idempotency_keys"); err != nil {
			return nil, err
		}
	}
	if variant == churnBefore {
		// The schema as it was before migration 000017: its down migration.
		down, err := migrations.FS.ReadFile("000017_key_store_at_scale.down.sql")
		if err != nil {
			return nil, err
		}
		if _, err := conn.Exec(ctx, string(down)); err != nil {
			return nil, fmt.Errorf("migrating 000017 down: %w", err)
		}
	}
	if err := conn.QueryRow(ctx, `SELECT coalesce(string_agg(c.relname || ': ' || array_to_string(c.reloptions, ', '), '; '), 'none')
		FROM pg_class c WHERE c.reloptions IS NOT NULL AND (c.oid = 'idempotency_keys'::regclass
		OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'idempotency_keys'::regclass))`).Scan(&r.reloptions); err != nil {
		return nil, err
	}
	if _, err := b.monitor.Exec(ctx, "ALTER SYSTEM SET autovacuum_naptime = '"+churnNaptime+"'"); err != nil {
		return nil, err
	}
	defer func() {
		_, _ = b.monitor.Exec(context.WithoutCancel(ctx), "ALTER SYSTEM RESET autovacuum_naptime")
		_, _ = b.monitor.Exec(context.WithoutCancel(ctx), "SELECT pg_reload_conf()")
	}()
	if _, err := b.monitor.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return nil, err
	}

	apiAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	metricsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	env := append(os.Environ(),
		"DATABASE_URL="+b.server.URL(dbname), "STRIPE_API_BASE="+b.simURL, "STRIPE_WEBHOOK_SECRET=whsec_bench_0123456789abcdef",
		"PAYMENTS_IDEMPOTENCY_KEY_TTL="+o.churnTTL.String(), "PAYMENTS_REAPER_INTERVAL="+o.churnReaper.String(),
		"PAYMENTS_RATE_LIMIT=0", "PAYMENTS_ADDR="+apiAddr, "PAYMENTS_METRICS_ADDR="+metricsAddr, "PAYMENTS_WEBHOOK_ALLOW_PRIVATE=true")
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
			_ = p.Wait()
		}
	}()
	var workerLog *os.File
	for _, command := range []string{"serve", "worker"} {
		logFile, err := os.Create(filepath.Join(b.dir, "churn-"+variant+"-"+command+".log"))
		if err != nil {
			return nil, err
		}
		defer logFile.Close()
		if command == "worker" {
			workerLog = logFile
		}
		p := exec.CommandContext(ctx, o.paymentsBin, command)
		p.Env, p.Stdout, p.Stderr = env, logFile, logFile
		if command == "serve" {
			// The worker's metrics are the ones read (metricsAddr):
			// serve's own listener would take the same address.
			p.Env = append(slices.Clone(env), "PAYMENTS_METRICS_ADDR=off")
		}
		if err := p.Start(); err != nil {
			return nil, err
		}
		procs = append(procs, p)
	}
	if err := waitHTTP(ctx, "http://"+apiAddr+"/readyz", time.Minute); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, "http://"+metricsAddr+"/healthz", time.Minute); err != nil {
		return nil, err
	}
	// Every user has a webhook endpoint, as merchants do: each payment's
	// event is delivered, and webhook_deliveries grows by a row per payment.
	receiver, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hooks := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = hooks.Serve(receiver) }()
	defer hooks.Close()
	for _, u := range b.users {
		if err := registerEndpoint(ctx, httpClient(1), "http://"+apiAddr, u, "http://"+receiver.Addr().String()+"/hooks"); err != nil {
			return nil, err
		}
	}

	loadFor := time.Duration(o.churnTTLs) * o.churnTTL
	b.log.Info("churn", slog.String("variant", variant), slog.Duration("ttl", o.churnTTL), slog.Int("rate", o.churnRate),
		slog.Duration("load", loadFor), slog.String("reloptions", r.reloptions))
	start := time.Now()
	loadCtx, stopLoad := context.WithTimeout(ctx, loadFor)
	defer stopLoad()
	var sent, ok atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	// Open loop at a fixed rate: request n is due at start + n/rate; each
	// of the workers takes every workers-th one, and sends a late one at once.
	const workers = 48
	client := httpClient(workers)
	url := "http://" + apiAddr
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := w; ; n += workers {
				due := start.Add(time.Duration(float64(n) / r.rate * float64(time.Second)))
				sleepCtx(loadCtx, time.Until(due))
				if loadCtx.Err() != nil {
					return
				}
				sent.Add(1)
				u := b.users[n%len(b.users)]
				outcome, err := postPayment(loadCtx, client, url, u, uuid.NewString())
				if err != nil {
					if loadCtx.Err() != nil {
						return
					}
					outcome = "error: " + err.Error()
				}
				if outcome == "201" {
					ok.Add(1)
				}
				mu.Lock()
				r.outcomes[outcome]++
				mu.Unlock()
			}
		}()
	}
	// The sampler runs a little past the load, until the reaper has had
	// its turn on the last keys' TTL... not needed: the load's TTLs are
	// what the goals read.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for loadCtx.Err() == nil {
		select {
		case <-loadCtx.Done():
		case <-tick.C:
			s, err := sampleChurn(ctx, conn)
			if err != nil {
				return nil, err
			}
			s.at, s.sent, s.ok = time.Since(start), sent.Load(), ok.Load()
			r.samples = append(r.samples, s)
			if len(r.samples)%10 == 0 {
				b.log.Info("churn sample", slog.Duration("at", s.at.Round(time.Second)), slog.Int64("rows", s.rows),
					slog.Int64("unexpired", s.unexpired), slog.Int64("dead", s.nDead), slog.String("table+idx MiB", mib(s.table+s.indexes)),
					slog.String("lag s", fmt.Sprintf("%.1f", s.lag)))
			}
		}
	}
	r.load = time.Since(start)
	wg.Wait()
	r.achieved = float64(ok.Load()) / r.load.Seconds()
	if raw, err := os.ReadFile(workerLog.Name()); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.Contains(line, `"reaper`) || strings.Contains(line, "reaped") {
				if strings.Contains(line, `"level":"ERROR"`) || strings.Contains(line, `"level":"WARN"`) {
					r.reaperErrors++
				} else {
					r.reaperRuns++
				}
			}
		}
	}
	return r, nil
}

// sampleChurn reads the key table's figures. The reaper lag is how long
// the oldest expired finished key has been expired (0: none is left).
func sampleChurn(ctx context.Context, conn *pgx.Conn) (churnSample, error) {
	var s churnSample
	if _, err := conn.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return s, err
	}
	err := conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM idempotency_keys),
		(SELECT count(*) FROM idempotency_keys WHERE expires_at IS NULL OR expires_at > now()),
		t.n_live_tup, t.n_dead_tup, t.autovacuum_count + t.vacuum_count,
		pg_table_size('idempotency_keys'), pg_indexes_size('idempotency_keys'),
		coalesce((SELECT extract(epoch FROM now() - min(expires_at)) FROM idempotency_keys
			WHERE recovery_point = 'finished' AND expires_at <= now()), 0)::float8
		, d.n_live_tup, d.seq_tup_read
		FROM pg_stat_user_tables t, pg_stat_user_tables d WHERE t.relname = 'idempotency_keys' AND d.relname = 'webhook_deliveries'`).
		Scan(&s.rows, &s.unexpired, &s.nLive, &s.nDead, &s.autovacuums, &s.table, &s.indexes, &s.lag, &s.deliveries, &s.deliveryScanRows)
	return s, err
}

// resetStorageSettings resets every storage setting (reloptions) of table
// and of its indexes to PostgreSQL's defaults.
func resetStorageSettings(ctx context.Context, conn *pgx.Conn, table string) error {
	rows, err := conn.Query(ctx, `SELECT c.oid::regclass::text, c.relkind::text, array_agg(split_part(o, '=', 1))
		FROM pg_class c, unnest(c.reloptions) AS o
		WHERE c.oid = $1::regclass OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = $1::regclass)
		GROUP BY 1, 2`, table)
	if err != nil {
		return err
	}
	type rel struct {
		name, kind string
		opts       []string
	}
	var rels []rel
	for rows.Next() {
		var x rel
		if err := rows.Scan(&x.name, &x.kind, &x.opts); err != nil {
			return err
		}
		rels = append(rels, x)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, x := range rels {
		what := "TABLE"
		if x.kind == "i" {
			what = "INDEX"
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER %s %s RESET (%s)", what, x.name, strings.Join(x.opts, ", "))); err != nil {
			return err
		}
	}
	return nil
}

// waitHTTP polls url until it answers 200.
func waitHTTP(ctx context.Context, url string, limit time.Duration) error {
	client := httpClient(1)
	deadline := time.Now().Add(limit)
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer 200 within %s", url, limit)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// churnPeriod is one TTL of a churn run.
type churnPeriod struct {
	n                 int // 1-based
	rowsMean, rowsMax float64
	rowsMin           float64
	deadMax           int64
	sizeEnd, sizeMax  int64 // table + indexes
	tableEnd          int64 // the table alone (its heap, free space map and visibility map), at the end
	lagMax            float64
	unexpiredMean     float64
	deliveriesEnd     int64
	scanRowsPerSecond float64 // webhook_deliveries rows read by scans, per second
}

// periods cuts the samples into TTLs.
func (r *churnResult) periods() []churnPeriod {
	var ps []churnPeriod
	for n := 1; time.Duration(n)*r.ttl <= r.load+time.Second; n++ {
		from, to := time.Duration(n-1)*r.ttl, time.Duration(n)*r.ttl
		p := churnPeriod{n: n, rowsMin: math.Inf(1)}
		count := 0
		var first, last *churnSample
		for i := range r.samples {
			s := r.samples[i]
			if s.at < from || s.at >= to {
				continue
			}
			count++
			if first == nil {
				first = &r.samples[i]
			}
			last = &r.samples[i]
			p.rowsMean += float64(s.rows)
			p.unexpiredMean += float64(s.unexpired)
			p.rowsMax = max(p.rowsMax, float64(s.rows))
			p.rowsMin = min(p.rowsMin, float64(s.rows))
			p.deadMax = max(p.deadMax, s.nDead)
			p.sizeEnd = s.table + s.indexes
			p.tableEnd = s.table
			p.sizeMax = max(p.sizeMax, s.table+s.indexes)
			p.lagMax = max(p.lagMax, s.lag)
		}
		if count == 0 {
			break
		}
		p.rowsMean /= float64(count)
		p.unexpiredMean /= float64(count)
		p.deliveriesEnd = last.deliveries
		if d := (last.at - first.at).Seconds(); d > 0 {
			p.scanRowsPerSecond = float64(last.deliveryScanRows-first.deliveryScanRows) / d
		}
		ps = append(ps, p)
	}
	return ps
}

// goals judges the run: after the first TTL, the rows stay within 10 % of
// rate x TTL, and the table and its indexes grow by at most 20 % over their
// size at the first TTL's end.
func (r *churnResult) goals() (rowsDev float64, growth float64) {
	ps := r.periods()
	if len(ps) < 2 {
		return math.NaN(), math.NaN()
	}
	target := r.achieved * r.ttl.Seconds()
	base := float64(ps[0].sizeEnd)
	for _, p := range ps[1:] {
		rowsDev = max(rowsDev, math.Abs(p.rowsMax/target-1), math.Abs(p.rowsMin/target-1))
		growth = max(growth, float64(p.sizeMax)/base-1)
	}
	return rowsDev, growth
}
