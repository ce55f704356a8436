package main

// The reconciler's scenario (make bench-reconcile, docs/BENCHMARKS-reconcile.md):
// what reading Stripe's event log costs, against the payments on record.
//
// A month of history is made in bulk, consistently, in the simulator (its
// own code, stripesim.Seed: the PaymentIntents, charges and events a
// request would make, on its clock) and in the database (the payments as
// the create flow records them, and the ids of the events whose webhook
// was delivered in the webhook's inbox), one reconcile interval of the
// simulator's clock at a time (POST /_sim/advance's Advance), and the
// reconciler makes one pass after each interval, over real HTTP to the
// simulator and a real PostgreSQL. Changes come spread across the month:
// a share of the webhooks is lost (their events are not in the inbox), a
// share of the payments is refunded in Stripe's dashboard with its
// webhooks lost, and a share is disputed at Stripe (pm_card_createDispute:
// the simulator opens the dispute laterDelay after the payment, on its
// own), most disputes closed, won or lost, days later
// (stripesim.CloseDispute, as POST /_sim/disputes/{id}/close). The
// disputes' webhooks are lost at the webhook drop rate; the delivered ones
// are applied through the webhook's own code (webhooks.Receiver.Apply).
// The report judges itself.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/ids"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/pglocal"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/stripesim"
	"github.com/example/payments/internal/users"
	"github.com/example/payments/internal/webhooks"
)

// reconcileOptions are the scenario's settings.
type reconcileOptions struct {
	payments  int           // payments over the month
	days      int           // simulated days
	interval  time.Duration // PAYMENTS_RECONCILE_INTERVAL, on the simulator's clock
	drop      float64       // share of webhooks lost
	dashboard float64       // share of payments refunded in the dashboard, webhooks lost
	disputes  float64       // share of payments disputed at Stripe (pm_card_createDispute)
	out       string
	command   string
}

// tables whose reads and writes are counted.
var reconcileTables = []string{"payments", "refunds", "stripe_events", "payment_intents", "payments_awaiting_stripe", "stripe_event_cursor"}

func runReconcileBench(ctx context.Context, o reconcileOptions, log *slog.Logger) error {
	// The simulator holds a month of Stripe's objects and events in this
	// process: gigabytes of live heap, which the service's GOGC of 400
	// (internal/tuning) would let grow to five times that before a
	// collection. The figures this scenario judges are calls, rows and
	// the simulator's clock, not CPU: Go's default (GOGC 100) keeps the
	// process at about twice its live heap, unless GOGC is set.
	gcPercent := os.Getenv("GOGC")
	if gcPercent == "" {
		debug.SetGCPercent(100)
		gcPercent = "100"
	}
	dir, err := os.MkdirTemp("", "paymentsbench-reconcile-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	server, err := pglocal.Start(ctx, pglocal.Config{DataDir: filepath.Join(dir, "data"), LogFile: filepath.Join(dir, "postgres.log")})
	if err != nil {
		return err
	}
	defer server.Stop()
	dbURL := server.URL("postgres")
	if err := db.MigrateUp(ctx, dbURL, log); err != nil {
		return err
	}
	pool, err := db.Open(ctx, dbURL, db.PoolConfig{MaxConns: 8})
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := users.SeedDemoUsers(ctx, pool); err != nil {
		return err
	}
	var userID int64
	if err := pool.QueryRow(ctx, "SELECT min(id) FROM users").Scan(&userID); err != nil {
		return err
	}

	start := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	sim := stripesim.New(stripesim.Config{Now: func() time.Time { return start }})
	defer sim.Close()
	simServer := httptest.NewServer(sim.Handler())
	defer simServer.Close()
	stripe, err := stripeclient.New(stripeclient.Config{SecretKey: "sk_test_bench", APIBase: simServer.URL})
	if err != nil {
		return err
	}
	flows := recovery.NewBuilder(recovery.Config{Pool: pool})
	svc := payments.NewService(pool, flows, stripe)
	if _, err := flows.Build(); err != nil {
		return err
	}
	receiver := webhooks.NewReceiver(webhooks.Config{Pool: pool})
	rec := svc.NewReconciler(payments.ReconcilerConfig{Apply: receiver.Apply, Rate: 1e6})

	steps := int(time.Duration(o.days) * 24 * time.Hour / o.interval)
	rng := rand.New(rand.NewPCG(38, 38))
	var (
		made         []string                 // PaymentIntents made so far
		pendingSince = map[string]time.Time{} // dashboard refunds not yet shown, by Stripe's id: when made
		latencies    []time.Duration
		passes       int
		listed       int
		applied      int
		moved        int
		dashboards   int
		lost         int
		seedTime     time.Duration
		passTime     time.Duration
		instrument   int64 // rows the benchmark's own checks read
		dp           = newDisputeBench(o, receiver.Apply)
	)
	before, err := tableStats(ctx, pool)
	if err != nil {
		return err
	}
	now := start
	begun := time.Now()
	for step := range steps {
		// The interval's changes come at a random moment of it, its
		// payments at its end, and the pass after it.
		at := time.Duration(rng.Int64N(int64(o.interval)))
		mark := now
		now = sim.Advance(at)
		seedStart := time.Now()
		dp.close(sim, now)
		if err := dp.events(ctx, sim, rng, mark, now); err != nil {
			return err
		}
		if err := dashboardRefunds(sim, rng, o.dashboard*float64(o.payments)/float64(steps), made, pendingSince, now, &dashboards); err != nil {
			return err
		}
		mark = now
		now = sim.Advance(o.interval - at)
		if err := dp.events(ctx, sim, rng, mark, now); err != nil {
			return err
		}
		// The payments of this interval: (step+1)*N/steps so far.
		n := (step+1)*o.payments/steps - step*o.payments/steps
		b := &seedBatch{}
		for range n {
			payID := ids.New("pay")
			pm := "pm_card_visa"
			if rng.Float64() < o.disputes {
				pm = "pm_card_createDispute" // Stripe's test card that is disputed after the payment
			}
			s, err := sim.Seed("/v1/payment_intents", url.Values{"amount": {"2000"}, "currency": {"usd"},
				"payment_method": {pm}, "payment_method_types[0]": {"card"}, "confirm": {"true"},
				"metadata[payment]": {payID}})
			if err != nil {
				return err
			}
			made = append(made, s.ID)
			if pm != "pm_card_visa" {
				dp.payments[s.ID] = payID
			}
			b.payments = append(b.payments, payID)
			b.intents = append(b.intents, s.ID)
			b.methods = append(b.methods, pm)
			for _, ev := range s.Events {
				if rng.Float64() < o.drop {
					lost++
					continue
				}
				b.events = append(b.events, ev)
			}
		}
		if err := b.insert(ctx, pool, userID, now); err != nil {
			return err
		}
		seedTime += time.Since(seedStart)

		passStart := time.Now()
		for {
			run, err := rec.RunOnce(ctx)
			if err != nil {
				return fmt.Errorf("pass %d: %w", passes, err)
			}
			passes++
			listed += run.Listed
			applied += run.Applied
			moved += run.Moved
			if !run.Partial {
				break
			}
		}
		passTime += time.Since(passStart)
		if len(pendingSince) > 0 {
			if err := shown(ctx, pool, pendingSince, now, &latencies, &instrument); err != nil {
				return err
			}
		}
		if len(dp.pending) > 0 {
			if err := dp.shown(ctx, pool, now, &instrument); err != nil {
				return err
			}
		}
		if step%(steps/20+1) == 0 {
			log.Info("reconcile bench", slog.Int("step", step), slog.Int("of", steps), slog.Int("payments", len(made)),
				slog.Int("disputes", dp.opened), slog.String("rss", fmt.Sprintf("%d MiB", peakRSS()>>20)),
				slog.Duration("elapsed", time.Since(begun)))
		}
	}
	// The last changes get the passes a running service would give them.
	for range 2 {
		now = sim.Advance(o.interval)
		if _, err := rec.RunOnce(ctx); err != nil {
			return err
		}
		passes++
		if err := shown(ctx, pool, pendingSince, now, &latencies, &instrument); err != nil {
			return err
		}
		if err := dp.shown(ctx, pool, now, &instrument); err != nil {
			return err
		}
	}
	time.Sleep(1200 * time.Millisecond) // PostgreSQL flushes a backend's table statistics at most once a second
	after, err := tableStats(ctx, pool)
	if err != nil {
		return err
	}
	calls := 0
	for _, r := range sim.Requests() {
		if r.Method == "GET" {
			calls++
		}
	}
	differ, err := differences(ctx, pool, sim)
	if err != nil {
		return err
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	var dbBytes int64
	if err := pool.QueryRow(ctx, "SELECT pg_database_size(current_database())").Scan(&dbBytes); err != nil {
		return err
	}
	dataBytes, err := dirSize(filepath.Join(dir, "data"))
	if err != nil {
		return err
	}
	report := reconcileReport{o: o, steps: steps, passes: passes, calls: calls, listed: listed, applied: applied, moved: moved,
		dashboards: dashboards, notShown: len(pendingSince), lost: lost, latencies: latencies, differ: differ, dp: dp,
		peakRSS: peakRSS(), liveHeap: ms.HeapAlloc, gogc: gcPercent, dbBytes: dbBytes, dataBytes: dataBytes,
		read: after.read - before.read - instrument, instrument: instrument, reads: readsByTable(before, after), written: after.written - before.written, seedTime: seedTime, passTime: passTime,
		wall: time.Since(begun)}
	text := report.markdown()
	if o.out == "" {
		fmt.Print(text)
		return nil
	}
	return os.WriteFile(o.out, []byte(text), 0o644)
}

// dashboardRefunds makes an interval's dashboard refunds of earlier
// payments, with their webhooks lost.
func dashboardRefunds(sim *stripesim.Simulator, rng *rand.Rand, mean float64, made []string, pending map[string]time.Time,
	now time.Time, count *int) error {
	for range dashboardsThisStep(rng, mean) {
		if len(made) == 0 {
			return nil
		}
		pi := made[rng.IntN(len(made))]
		s, err := sim.Seed("/v1/refunds", url.Values{"payment_intent": {pi}, "amount": {"100"}})
		if err != nil {
			continue // refunded in full already: Stripe refuses, as it would
		}
		*count++
		pending[s.ID] = now
	}
	return nil
}

// dashboardsThisStep is how many dashboard refunds an interval gets, for
// an expected share of mean: the integer part, and one more with the
// fraction's probability.
func dashboardsThisStep(rng *rand.Rand, mean float64) int {
	n := int(mean)
	if rng.Float64() < mean-float64(n) {
		n++
	}
	return n
}

// seedBatch is one interval's payments and delivered events for the database.
type seedBatch struct {
	payments, intents, methods, events []string
}

// insert records the interval's payments as the create flow would have
// (succeeded, with their PaymentIntent) and the delivered events' ids in
// the webhook's inbox, as their webhooks would have.
func (b *seedBatch) insert(ctx context.Context, pool *pgxpool.Pool, userID int64, at time.Time) error {
	if len(b.payments) > 0 {
		if _, err := pool.Exec(ctx, `
WITH p AS (
  INSERT INTO payments (id, user_id, amount, currency, status, capture, amount_captured, payment_method,
      stripe_payment_intent, metadata, created_at, updated_at)
  SELECT id, $1, 2000, 'usd', 'succeeded', true, 2000, pm, pi, '{}', $4, $4
  FROM unnest($2::text[], $3::text[], $5::text[]) AS u(id, pi, pm)
  RETURNING id, stripe_payment_intent)
INSERT INTO payment_intents (stripe_payment_intent, payment_id) SELECT stripe_payment_intent, id FROM p`,
			userID, b.payments, b.intents, at, b.methods); err != nil {
			return fmt.Errorf("seeding payments: %w", err)
		}
	}
	if len(b.events) > 0 {
		if _, err := pool.Exec(ctx, `INSERT INTO stripe_events (id, type, occurred_at, outcome)
SELECT id, 'delivered', $2, 'applied' FROM unnest($1::text[]) AS id`, b.events, at); err != nil {
			return fmt.Errorf("seeding the inbox: %w", err)
		}
	}
	return nil
}

// shown takes the dashboard refunds the API now shows out of pending, with
// how long after Stripe made them.
// The rows its query reads are the benchmark's, not the reconciler's: they
// are counted (pg_stat_xact_user_tables, in the query's own transaction)
// into instrument, which the report takes off.
func shown(ctx context.Context, pool *pgxpool.Pool, pending map[string]time.Time, now time.Time, latencies *[]time.Duration,
	instrument *int64) error {
	ids := make([]string, 0, len(pending))
	for id := range pending {
		ids = append(ids, id)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, "SELECT stripe_refund FROM refunds WHERE stripe_refund = ANY($1)", ids)
	if err != nil {
		return err
	}
	var found []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		found = append(found, id)
	}
	if rows.Err() != nil {
		return rows.Err()
	}
	var read int64
	if err := tx.QueryRow(ctx, `SELECT coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)), 0)::bigint
		FROM pg_stat_xact_user_tables WHERE relname = 'refunds'`).Scan(&read); err != nil {
		return err
	}
	*instrument += read
	for _, id := range found {
		*latencies = append(*latencies, now.Sub(pending[id]))
		delete(pending, id)
	}
	return tx.Commit(ctx)
}

// stats are rows read and written in the counted tables, in all and by
// table ("payments: seq 0, idx 12").
type stats struct {
	read, written int64
	byTable       map[string][2]int64 // seq_tup_read, idx_tup_fetch
}

func tableStats(ctx context.Context, pool *pgxpool.Pool) (stats, error) {
	s := stats{byTable: map[string][2]int64{}}
	rows, err := pool.Query(ctx, `SELECT relname, seq_tup_read, coalesce(idx_tup_fetch, 0), n_tup_ins + n_tup_upd + n_tup_del
		FROM pg_stat_user_tables WHERE relname = ANY($1)`, reconcileTables)
	if err != nil {
		return s, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var seq, idx, written int64
		if err := rows.Scan(&name, &seq, &idx, &written); err != nil {
			return s, err
		}
		s.read += seq + idx
		s.written += written
		s.byTable[name] = [2]int64{seq, idx}
	}
	return s, rows.Err()
}

// readsByTable is the rows each table gave between two snapshots.
func readsByTable(before, after stats) string {
	var parts []string
	for _, t := range reconcileTables {
		a, b := after.byTable[t], before.byTable[t]
		parts = append(parts, fmt.Sprintf("%s: %d by scans, %d by index", t, a[0]-b[0], a[1]-b[1]))
	}
	return strings.Join(parts, "; ")
}

// recordDifferences are the records that differ from Stripe's at the end,
// by kind.
type recordDifferences struct {
	refunds, disputes, duplicates int
}

func (d recordDifferences) total() int { return d.refunds + d.disputes + d.duplicates }

// differences compares the records with Stripe's: refunds
// (refundDifferences), disputes (disputeDifferences) and duplicates
// (duplicateDifferences).
func differences(ctx context.Context, pool *pgxpool.Pool, sim *stripesim.Simulator) (recordDifferences, error) {
	var d recordDifferences
	var err error
	if d.refunds, err = refundDifferences(ctx, pool, sim); err != nil {
		return d, err
	}
	if d.disputes, err = disputeDifferences(ctx, pool, sim); err != nil {
		return d, err
	}
	d.duplicates, err = duplicateDifferences(ctx, pool)
	return d, err
}

// refundDifferences counts the payments whose record differs from Stripe's:
// amount_refunded against the sum of the PaymentIntent's refunds that did
// not fail, and the refunds Stripe holds that no refund of ours is.
func refundDifferences(ctx context.Context, pool *pgxpool.Pool, sim *stripesim.Simulator) (int, error) {
	raw, err := sim.Objects("refund")
	if err != nil {
		return 0, err
	}
	stripeRefunded := map[string]int64{}
	var stripeIDs []string
	for _, r := range raw {
		var re struct {
			ID            string `json:"id"`
			PaymentIntent string `json:"payment_intent"`
			Status        string `json:"status"`
			Amount        int64  `json:"amount"`
		}
		if err := json.Unmarshal(r, &re); err != nil {
			return 0, err
		}
		if re.Status != "failed" {
			stripeRefunded[re.PaymentIntent] += re.Amount
		}
		stripeIDs = append(stripeIDs, re.ID)
	}
	differ := 0
	rows, err := pool.Query(ctx, "SELECT stripe_payment_intent, amount_refunded FROM payments WHERE amount_refunded > 0 OR stripe_payment_intent = ANY($1)",
		keys(stripeRefunded))
	if err != nil {
		return 0, err
	}
	seen := map[string]bool{}
	for rows.Next() {
		var pi string
		var refunded int64
		if err := rows.Scan(&pi, &refunded); err != nil {
			return 0, err
		}
		seen[pi] = true
		if refunded != stripeRefunded[pi] {
			differ++
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	var ours int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM refunds WHERE stripe_refund = ANY($1)", stripeIDs).Scan(&ours); err != nil {
		return 0, err
	}
	return differ + len(stripeIDs) - ours, nil
}

func keys(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// reconcileReport is the scenario's figures and their judgement.
type reconcileReport struct {
	o                                            reconcileOptions
	steps, passes, calls, listed, applied, moved int
	dashboards, notShown, lost                   int
	differ                                       recordDifferences
	dp                                           *disputeBench
	latencies                                    []time.Duration
	peakRSS, liveHeap                            uint64
	gogc                                         string
	dbBytes, dataBytes                           int64
	read, written                                int64
	reads                                        string
	instrument                                   int64
	seedTime, passTime, wall                     time.Duration
}

func (r reconcileReport) markdown() string {
	var b strings.Builder
	p99 := time.Duration(0)
	if len(r.latencies) > 0 {
		slices.Sort(r.latencies)
		p99 = r.latencies[(len(r.latencies)*99+99)/100-1]
	}
	callsPer := float64(r.calls) / float64(max(r.o.payments, 1))
	readPerPass := float64(r.read) / float64(max(r.passes, 1))
	listedPerPass := float64(r.listed) / float64(max(r.passes, 1))
	bound := 2 * r.o.interval
	verdict := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "FAIL"
	}
	fmt.Fprintf(&b, "# The reconciler at volume: reading Stripe's event log\n\n")
	fmt.Fprintf(&b, "`%s` (cmd/paymentsbench/reconcile.go). %d payments over %d simulated days "+
		"(the simulator's clock), a pass every %v of it (PAYMENTS_RECONCILE_INTERVAL), %.1f %% of webhooks lost, "+
		"%.1f %% of payments refunded in Stripe's dashboard with their webhooks lost", r.o.command, r.o.payments, r.o.days, r.o.interval,
		100*r.o.drop, 100*r.o.dashboard)
	fmt.Fprintf(&b, ", %.1f %% of payments disputed at Stripe (pm_card_createDispute), the webhooks of a dispute's move lost together at the same rate, "+
		"%.0f %% of the disputes closed (won or lost, half each) 1 to 20 days later", 100*r.o.disputes, 100*disputeCloseShare)
	fmt.Fprintf(&b, ". History is made in bulk through the simulator's own code and the database's "+
		"(see the file's comment); the reconciler's passes are real: HTTP to the simulator, PostgreSQL. "+
		"Wall time %v (seeding %v, passes %v).\n\n", r.wall.Round(time.Second), r.seedTime.Round(time.Second), r.passTime.Round(time.Second))
	fmt.Fprintf(&b, "| measure | value | goal | verdict |\n|---|---|---|---|\n")
	fmt.Fprintf(&b, "| Stripe calls per payment | %.4f (%d calls, %d passes) | <= 0.05 | %s |\n", callsPer, r.calls, r.passes, verdict(callsPer <= 0.05))
	fmt.Fprintf(&b, "| rows read per pass (payments, refunds, inbox, cursor, ...) | %.1f (events listed per pass %.1f) | <= 3 per event listed + 10 | %s |\n",
		readPerPass, listedPerPass, verdict(readPerPass <= 3*listedPerPass+10))
	fmt.Fprintf(&b, "| rows written in those tables (seeding included) | %d, of which the reconciler's changes: %d events applied that moved a record | | |\n",
		r.written, r.moved)
	fmt.Fprintf(&b, "| a dashboard refund to the API, p99 (simulator's clock) | %v (%d refunds; max %v) | <= %v (2 intervals; no events_lag here) | %s |\n",
		p99, len(r.latencies), lastOr(r.latencies), bound, verdict(len(r.latencies) > 0 && p99 <= bound && r.notShown == 0))
	dl := slices.Clone(r.dp.latencies)
	slices.Sort(dl)
	dp99 := time.Duration(0)
	if len(dl) > 0 {
		dp99 = dl[(len(dl)*99+99)/100-1]
	}
	dverdict := verdict(dp99 <= bound && len(r.dp.pending) == 0)
	if len(dl) == 0 && len(r.dp.pending) == 0 {
		dverdict = "none to judge: no move lost every webhook" // a small run may lose none at 1 %
	}
	fmt.Fprintf(&b, "| a dispute's move (opened, closed) whose every webhook was lost, to the API, p99 | %v (%d moves; max %v) | <= %v | %s |\n",
		dp99, len(dl), lastOr(dl), bound, dverdict)
	fmt.Fprintf(&b, "| records that differ from Stripe's at the end (refunds, disputes, duplicates) | %d (%d, %d, %d) | 0 | %s |\n\n",
		r.differ.total(), r.differ.refunds, r.differ.disputes, r.differ.duplicates, verdict(r.differ.total() == 0))
	fmt.Fprintf(&b, "Rows read, by table (the benchmark's own checks included here, %d rows of refunds, which the table above leaves out): %s. "+
		"Seeding writes, and reads none of these tables.\n\n", r.instrument, r.reads)
	fmt.Fprintf(&b, "Disputes: %d opened by Stripe, %d closed (%d won, %d lost), %d still open at the end; %d dispute events, "+
		"%d of their webhooks lost; %d moves with every webhook lost, %d of them not shown at the end. The end check compares "+
		"every dispute Stripe holds with the payment's `dispute` (id and status) and counts the payments holding one Stripe "+
		"does not; it counts the service's duplicates too (refunds of origin `duplicate`, `duplicate_charges`): "+
		"this scenario makes none at Stripe, so each would differ.\n\n",
		r.dp.opened, r.dp.closed, r.dp.won, r.dp.closed-r.dp.won, r.dp.opened-r.dp.closed, r.dp.nEvents, r.dp.lostWebhooks,
		len(r.dp.latencies)+len(r.dp.pending), len(r.dp.pending))
	fmt.Fprintf(&b, "Memory and disk: the bench process (the simulator, the reconciler, the bench) peaked at %.2f GiB resident "+
		"(VmHWM), with GOGC %s; its live heap at the end, after a collection, %.2f GiB (%.0f bytes a payment, the simulator's "+
		"objects and events most of it). PostgreSQL's database %.2f GiB (pg_database_size), its data directory %.2f GiB "+
		"(WAL included).\n\n",
		float64(r.peakRSS)/(1<<30), r.gogc, float64(r.liveHeap)/(1<<30), float64(r.liveHeap)/float64(max(r.o.payments, 1)),
		float64(r.dbBytes)/(1<<30), float64(r.dataBytes)/(1<<30))
	perMonth := float64(r.o.payments) * 30 / float64(r.o.days)
	fmt.Fprintf(&b, "Events listed %d, applied (not in the inbox) %d, lost webhooks %d. The floor of the calls is one list "+
		"call per pass: %d passes over the %d days at %v, so at %d payments over them (%.0f a month) the calls per payment "+
		"cannot be under %.4f whatever the reconciler does; at this interval the goal of 0.05 holds from %d payments "+
		"over %d days (%.0f a month).\n",
		r.listed, r.applied, r.lost, r.steps, r.o.days, r.o.interval, r.o.payments, perMonth,
		float64(r.steps)/float64(max(r.o.payments, 1)), r.steps*20, r.o.days, float64(r.steps*20)*30/float64(r.o.days))
	return b.String()
}

func lastOr(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[len(d)-1]
}
