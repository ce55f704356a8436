package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/example/payments/internal/db"
)

type machineInfo struct {
	cpu, kernel, memory, goVersion string
	cores                          int
	pgVersion                      string
	pgSettings                     []string
	loadBefore                     string
}

func (b *bench) describeMachine(ctx context.Context) (machineInfo, error) {
	m := machineInfo{cores: runtime.NumCPU(), goVersion: runtime.Version(), cpu: "unknown", loadBefore: loadAverage()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if raw, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = strings.TrimSpace(string(raw))
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fields := strings.Fields(sc.Text()); len(fields) >= 2 && fields[0] == "MemTotal:" {
				kb, _ := strconv.ParseFloat(fields[1], 64)
				m.memory = fmt.Sprintf("%.1f GiB", kb/1024/1024)
			}
		}
		f.Close()
	}
	if err := b.monitor.QueryRow(ctx, "SHOW server_version").Scan(&m.pgVersion); err != nil {
		return m, err
	}
	for _, name := range []string{"fsync", "synchronous_commit", "wal_sync_method", "full_page_writes", "wal_compression", "shared_buffers",
		"max_connections", "default_transaction_isolation", "shared_preload_libraries"} {
		var v string
		if err := b.monitor.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
			return m, err
		}
		if v == "" {
			v = "(none)"
		}
		m.pgSettings = append(m.pgSettings, name+" "+v)
	}
	return m, nil
}

func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// all returns the results of scenario s at c clients, slowest first.
func (b *bench) all(s string, c int) []*cellResult {
	var rs []*cellResult
	for _, r := range b.results {
		if r.scenario == s && r.clients == c {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(x, y *cellResult) int { return cmp.Compare(x.rps, y.rps) })
	return rs
}

// get returns the result of scenario s at c clients (of several rounds,
// the one with the median throughput), or nil.
func (b *bench) get(s string, c int) *cellResult {
	rs := b.all(s, c)
	if len(rs) == 0 {
		return nil
	}
	return rs[len(rs)/2]
}

var scenarioTitles = map[string]string{
	"A-naive":      "A-naive: Brandur's 4 SERIALIZABLE tx, pgx, no HTTP/Stripe",
	"A-naive-http": "A-naive-http: A-naive's tx behind the same HTTP, auth, JSON and Stripe call as B",
	"A-own":        "A-own: the engine's tx for a new payment, pgx, no HTTP/Stripe",
	"B":            "B: POST /v1/payments, new keys, filter on",
	"B-young":      "B-young: B on an empty database (no preload)",
	"C":            "C: replays of finished keys",
	"D":            "D: same-key storm",
	"E":            "E: B with the filter off",
}

func (b *bench) report() string {
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format, args...) }
	m := b.machine
	o := b.o

	p("# Benchmarks\n\n")
	p("Written on %s UTC by the command below (`make bench` runs `scripts/bench.sh`); the load took %s. "+
		"Do not edit by hand: run `make bench` again.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04"), b.elapsed.Round(time.Second))
	p("```\n%s\n```\n\n", o.command)
	p("## Machine\n\n| | |\n|---|---|\n")
	p("| CPU | %d × %s |\n", m.cores, m.cpu)
	p("| memory | %s |\n", m.memory)
	p("| kernel | Linux %s |\n", m.kernel)
	p("| Go | %s (GOMAXPROCS %d, GOGC %s: the service's setting, `internal/tuning`, for the whole process) |\n", m.goVersion, runtime.GOMAXPROCS(0), gogc)
	p("| PostgreSQL | %s, a throwaway cluster started by the benchmark (pglocal, unix socket); %s |\n", m.pgVersion, strings.Join(m.pgSettings, ", "))
	p("| load average | %s before the run, %s after |\n\n", m.loadBefore, loadAverage())
	p("Everything runs on these %d cores at once: the clients, the HTTP server, the service, the Stripe simulator "+
		"(all in the benchmark's process) and PostgreSQL. The machine is shared and noisy: read the ratios, "+
		"which come from one run, rather than comparing absolute figures across runs.\n\n", m.cores)

	b.writeMethod(p)
	b.writeResults(p)
	b.writeStorm(p)
	b.writeBackground(p)
	b.writeRatios(p)
	b.writeCPU(p)
	b.writeGoals(p)
	b.writeNotes(p)
	return w.String()
}

func (b *bench) writeMethod(p func(string, ...any)) {
	o := b.o
	p("## What is measured\n\n")
	p("Each cell is one scenario at one number of concurrent clients, in a closed loop (each client sends its next request "+
		"when the previous one is answered; HTTP clients keep their connections alive). It runs a %s warm-up and a %s "+
		"measured window: throughput and latency come from the window, costs per request from the whole cell.\n\n", o.warmup, o.duration)
	if o.preload > 0 {
		p("Every cell but C starts from a fresh database, a clone (`CREATE DATABASE ... TEMPLATE`, then `CHECKPOINT`) of a template "+
			"that holds %d finished requests (keys, payments, audit records; for A-naive, the same in its own schema), "+
			"analysed; then a new pool and, for B to E, a new service whose key filter is rebuilt from that database before "+
			"the load starts, as at start-up. The preload is there because a service that has run for a while has big "+
			"b-trees: in empty tables every concurrent transaction reads and writes the same one or few leaf pages, "+
			"and SERIALIZABLE's page-level predicate locks turn that into conflicts that production would not see "+
			"(`-preload 0` starts from empty tables, as the baseline's TRUNCATE did). C's cells share one database, "+
			"where its keys were made once (below); each starts after a `CHECKPOINT`.\n\n", o.preload)
	} else {
		p("Every cell but C starts from a fresh, empty database (a clone of a migrated template, then `CHECKPOINT`, as the " +
			"baseline truncated its tables before each pgbench run), a new pool and, for B to E, a new service whose key filter " +
			"is rebuilt from the database before the load starts. Empty b-trees exaggerate SERIALIZABLE's page-level " +
			"conflicts; `-preload N` starts from N finished requests instead.\n\n")
	}
	p("- **A-naive**: the baseline's `request4.sql` (the pgbench measurement of plain PostgreSQL that the project started from, reproduced in `cmd/paymentsbench/naive.go`): four SERIALIZABLE transactions "+
		"per new request, on its own schema (bigserial keys) in its own database, issued through pgx, %s, every statement "+
		"on its own and BEGIN alone, as pgbench sends them. Each transaction "+
		"is retried alone through `db.WithTx` (pgbench restarted the whole script with a new key).\n", floorConnsText(o.floorConns))
	p("- **A-naive-http**: the like-for-like floor of B: A-naive's four transactions (its SQL, one statement at a time, BEGIN alone, " +
		"no key filter, no pipelining, the client's key in place of a random one and the PaymentIntent's id in place of a made-up charge) " +
		"served by a plain Go handler over the same chi router, authenticated by the same `users.Authenticator` on the service's users, " +
		"its JSON body decoded and its JSON answer and log line written, and the same stripe-go call to the same simulator with a child key " +
		"derived from the key row between the second and third transaction, on a pool of the service's size (`cmd/paymentsbench/naivehttp.go`). " +
		"What a team that copied the pattern naively would serve; what B does beyond it (fencing, replays, the filter, events and receipts staged) " +
		"is what B / A-naive-http prices.\n")
	p("- **A-own**: the engine's own transactions for a new payment, `recovery.Engine.Execute` with the key filter on and "+
		"%s, running the real create-payment flow (`payments.Service.Create` built `WithCreatePaymentIntent`: its phases and its SQL) "+
		"whose Stripe call answers at once with a succeeded PaymentIntent (it calls nobody). No HTTP, no Stripe: the engine's floor.\n",
		floorConnsText(o.floorConns))
	p("- **B**: `POST /v1/payments` with a new key, over HTTP, against the service as `payments serve` runs it, "+
		"assembled by the same code (`internal/app`): its pool (%s), the key filter on, stripeclient calling the simulator over loopback HTTP "+
		"(no added latency, no faults; %s), request logs formatted as JSON and discarded, rate limit off. The load is "+
		"spread over %d users.\n", connsText(o.serviceConns), stripeConnsText(o.stripeIdleConns), o.users)
	p("- **B-young**: B on a database that holds only the users, as a new deployment's does, whatever `-preload` says: " +
		"the young database where new keys got 409 (issue 14). No client may get a 409; the retries that resolve the " +
		"page-level conflicts inside each request (`db.TxOptions.RetryFor`) are in its *retries* column.\n")
	p("- **C**: the same request replayed: %d finished keys were created once through the service (at 16 clients, in "+
		"%s; %d of those requests were answered 409 or 503 and sent again with their key), on a clone of the same "+
		"template; each request replays a random one (201 with `Idempotent-Replayed: true`).\n",
		o.replayKeys, b.prefill.took.Round(time.Millisecond), b.prefill.conflicts)
	p("- **D**: a same-key storm: in each round every client sends the same new key at once; the next round starts when " +
		"all have answered. One wins (201), the others get 409 while it runs, or its replay once it has finished.\n")
	p("- **E**: B with the key filter off (`PAYMENTS_KEYFILTER=off`): every claim looks the key up first.\n\n")
	p("Columns: *stmts* are SQL statements per request as the client sent them (a pgx query tracer on the pool: BEGIN and "+
		"COMMIT included, failed and retried ones too); *round trips* are how many times the client sent and then waited "+
		"(a statement alone, or a batch: the engine's transactions send BEGIN with their first statement, and writes "+
		"nobody reads with the next statement or COMMIT; pgx adds one the first time a connection prepares a statement); *server stmts* are what PostgreSQL completed (%s); *tx* are "+
		"transactions the client began (explicit ones, and statements run outside one); *commits* are PostgreSQL's "+
		"`xact_commit` (+ `xact_rollback`) for the database; *retries* are transactions run again after a serialization "+
		"failure or deadlock (`db.SerializationRetries`); *WAL syncs* are `pg_stat_wal.wal_sync` (each an fdatasync of "+
		"the WAL; fewer than write commits means group commit); *WAL KiB* is the WAL written, with the full-page images "+
		"in it (`wal_fpi`: the first change of a page after a checkpoint writes the whole 8 KiB page); *CPU* is CPU time per request in the window, of this process "+
		"(clients, HTTP, service, simulator) and of PostgreSQL (postmaster and children), *busy* is the whole "+
		"machine's CPU use in the window, *others* the part of it used by other processes (this machine is shared), "+
		"and *iowait* the time cores sat idle waiting for the disk.\n\n", pgssText(b.pgss))
}

func connsText(n int) string {
	if n > 0 {
		return fmt.Sprintf("%d connections, set by -service-conns", n)
	}
	return fmt.Sprintf("the service's default, four per core = %d connections, whatever the clients", db.DefaultMaxConns())
}

func floorConnsText(n int) string {
	if n > 0 {
		return fmt.Sprintf("%d connections, set by -floor-conns", n)
	}
	return "one connection per client"
}

func stripeConnsText(n int) string {
	if n > 0 {
		return fmt.Sprintf("%d idle connections kept to Stripe, set by -stripe-idle-conns", n)
	}
	return "stripeclient's default HTTP client: 64 idle connections kept to Stripe"
}

func pgssText(on bool) string {
	if on {
		return "pg_stat_statements, utility statements tracked"
	}
	return "pg_stat_statements is not available here, so the column is empty"
}

func (b *bench) writeResults(p func(string, ...any)) {
	p("## Results\n\n")
	if b.o.rounds > 1 || b.o.goalRounds > 1 {
		p("Every cell ran %d times (the cells at %v clients, which the goals read, %d times), interleaved (every cell once, "+
			"then every cell again, ...). Each row is the run with the median throughput, with the range of all runs; the ratios "+
			"and goals use the medians, and each goal row gives the range of its ratio round by round.\n\n", b.o.rounds, goalClients, b.o.goalRounds)
	}
	p("| scenario | clients | db conns | req/s | p50 ms | p95 ms | p99 ms | max ms | outcomes (whole cell) |\n")
	p("|---|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, r := range b.ordered() {
		rps := fmt.Sprintf("**%.0f**", r.rps)
		if rs := b.all(r.scenario, r.clients); len(rs) > 1 {
			rps += fmt.Sprintf(" (%.0f–%.0f)", rs[0].rps, rs[len(rs)-1].rps)
		}
		p("| %s | %d | %d | %s | %s | %s | %s | %s | %s |\n", r.scenario, r.clients, r.conns, rps,
			ms(r.p50), ms(r.p95), ms(r.p99), ms(r.pmax), r.outcomeString())
	}
	p("\nCost per request (whole cell; CPU over the window):\n\n")
	p("| scenario | clients | stmts | round trips | server stmts | tx | commits | retries | WAL syncs | WAL KiB (full pages) | CPU ms here | CPU ms postgres | busy %% | others %% | iowait %% |\n")
	p("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range b.ordered() {
		server := "–"
		if r.server.statements >= 0 {
			server = fmt.Sprintf("%.1f", r.perReq(float64(r.server.statements)))
		}
		commits := fmt.Sprintf("%.2f", r.perReq(float64(r.server.commits)))
		if r.server.rollbacks > 0 {
			commits += fmt.Sprintf(" (+%.2f)", r.perReq(float64(r.server.rollbacks)))
		}
		here, pg, busy, others, iowait := r.cpuPerReq()
		p("| %s | %d | %.1f | %.1f | %s | %.2f | %s | **%.3f** | %.2f | %.1f (%.2f) | %.3f | %.3f | %.0f | %.0f | %.0f |\n", r.scenario, r.clients,
			r.perReq(float64(r.client.statements)), r.perReq(float64(r.client.roundTrips)), server, r.perReq(float64(r.client.transactions)), commits,
			r.perReq(float64(r.retries)), r.perReq(float64(r.server.walSyncs)), r.perReq(r.server.walBytes)/1024, r.perReq(float64(r.server.walFPI)),
			here, pg, busy, others, iowait)
	}
	var errs []string
	for _, r := range b.results {
		for msg, n := range r.errs {
			where := fmt.Sprintf("%s at %d clients", r.scenario, r.clients)
			if max(b.o.rounds, b.o.goalRounds) > 1 {
				where += fmt.Sprintf(" (round %d)", r.round)
			}
			errs = append(errs, fmt.Sprintf("- %s, %d×: `%s`", where, n, msg))
		}
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		p("\nErrors (requests that failed in the client or the service):\n\n%s\n", strings.Join(errs, "\n"))
	}
	p("\n")
}

// cpuPerReq is CPU ms per request of this process and of PostgreSQL in the
// window, and the machine's busy and iowait percentages.
func (r *cellResult) cpuPerReq() (here, pg, busy, others, iowait float64) {
	a, z := r.cpu[0], r.cpu[1]
	if r.requests > 0 {
		here = float64(z.self-a.self) / float64(time.Millisecond) / float64(r.requests)
		pg = float64(z.postgres-a.postgres) / float64(time.Millisecond) / float64(r.requests)
	}
	if all := z.machineAll - a.machineAll; all > 0 {
		busy = 100 * float64(z.machineBusy-a.machineBusy) / float64(all)
		others = max(0, 100*float64((z.machineBusy-a.machineBusy)-(z.self-a.self)-(z.postgres-a.postgres))/float64(all))
		iowait = 100 * float64(z.iowait-a.iowait) / float64(all)
	}
	return
}

func (b *bench) ordered() []*cellResult {
	var out []*cellResult
	for _, s := range allScenarios {
		for _, c := range b.o.clients {
			if r := b.get(s, c); r != nil {
				out = append(out, r)
			}
		}
	}
	return out
}

func (b *bench) writeStorm(p func(string, ...any)) {
	var rows []*cellResult
	for _, c := range b.o.clients {
		if r := b.get("D", c); r != nil {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	p("## Same-key storm (D)\n\n")
	p("Every client sends the same new key at once, round after round (whole cell):\n\n")
	p("| clients | rounds | 201 (the one that ran) | 201 replayed | 409 in use | other |\n|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rows {
		other := r.total - r.outcomes["201"] - r.outcomes["201 replayed"] - r.outcomes["409"]
		p("| %d | %d | %d | %d | %d | %d |\n", r.clients, r.total/r.clients, r.outcomes["201"], r.outcomes["201 replayed"], r.outcomes["409"], other)
	}
	p("\nA round with more than one plain 201 would be a second execution of one key; there must be one per round.\n\n")
}

// writeStormGoal judges D, the same-key storm: every answer is the one
// request that ran (201), a replay of it, or 409 in use; never a 5xx nor a
// transport error (docs/API.md section 2, rule 5: a same-key loser gets 409
// or the replay). One such answer in any cell fails the row.
func (b *bench) writeStormGoal(p func(string, ...any), verdict func(bool) string) {
	var bad []string
	measured := false
	for _, c := range b.o.clients {
		r := b.get("D", c)
		if r == nil {
			continue
		}
		measured = true
		var n int
		for outcome, count := range r.outcomes {
			if stormAnswerIsFailure(outcome) {
				n += count
			}
		}
		if n > 0 {
			bad = append(bad, fmt.Sprintf("D@%d: %d", c, n))
		}
	}
	switch {
	case !measured:
		p("| the same-key storm (D) answers no 5xx | not measured in this run | – |\n")
	case len(bad) == 0:
		p("| the same-key storm (D) answers no 5xx | every answer was 201, its replay or 409 | %s |\n", verdict(true))
	default:
		p("| the same-key storm (D) answers no 5xx | 5xx or errors: %s | %s |\n", strings.Join(bad, ", "), verdict(false))
	}
}

// stormAnswerIsFailure tells whether an outcome of D ("201", "201
// replayed", "409", "500", "error", ...) is one a client must never get.
func stormAnswerIsFailure(outcome string) bool {
	return outcome == "error" || strings.HasPrefix(outcome, "5")
}

func (b *bench) ratio(num, den string, c int) (float64, bool) {
	n, d := b.get(num, c), b.get(den, c)
	if n == nil || d == nil || d.rps == 0 {
		return 0, false
	}
	return n.rps / d.rps, true
}

// ratioTable writes one row per (numerator, denominator, label) and one
// column per client count, with value's ratio or a dash.
func (b *bench) ratioTable(p func(string, ...any), title string, rows [][3]string, value func(num, den string, clients int) (float64, bool)) {
	p("| %s |", title)
	for _, c := range b.o.clients {
		p(" %d clients |", c)
	}
	p("\n|---|")
	for range b.o.clients {
		p("--:|")
	}
	p("\n")
	for _, row := range rows {
		p("| %s |", row[2])
		for _, c := range b.o.clients {
			if v, ok := value(row[0], row[1], c); ok {
				p(" %.2f |", v)
			} else {
				p(" – |")
			}
		}
		p("\n")
	}
}

func (b *bench) writeRatios(p func(string, ...any)) {
	p("## Ratios (throughput, within this run)\n\n")
	b.ratioTable(p, "ratio", [][3]string{
		{"B", "A-naive-http", "B / A-naive-http: the whole service vs the naive pattern behind the same HTTP and Stripe call"},
		{"B", "A-naive", "B / A-naive: the whole service vs the naive SQL floor"},
		{"B", "A-own", "B / A-own: what HTTP and Stripe add to the engine's own SQL"},
		{"A-own", "A-naive", "A-own / A-naive: the engine's SQL vs the naive SQL"},
		{"C", "B", "C / B: a replay vs a new payment"},
		{"B", "E", "B / E: key filter on vs off"},
	}, b.ratio)
	p("\nThe same ratios from CPU per request instead (the *ceilings* of the next section: what the cores would serve " +
		"at each scenario's CPU cost). They are less sensitive to what else the machine was doing during each cell, " +
		"but blind to waits (locks, fsync, retries' backoff):\n\n")
	b.ratioTable(p, "ratio of ceilings", [][3]string{
		{"B", "A-naive-http", "B / A-naive-http"}, {"B", "A-naive", "B / A-naive"}, {"B", "A-own", "B / A-own"}, {"C", "B", "C / B"}, {"B", "E", "B / E"},
	}, func(num, den string, c int) (float64, bool) {
		n, d := b.ceiling(num, c), b.ceiling(den, c)
		return n / d, n > 0 && d > 0
	})
	if b64, b16 := b.get("B", 64), b.get("B", 16); b64 != nil && b16 != nil && b16.rps > 0 {
		p("\nB at 64 clients / B at 16 clients: **%.2f**", b64.rps/b16.rps)
		if a64, a16 := b.get("A-naive", 64), b.get("A-naive", 16); a64 != nil && a16 != nil && a16.rps > 0 {
			p(" (A-naive: %.2f)", a64.rps/a16.rps)
		}
		p(".\n")
	}
	p("\n")
}

func (b *bench) writeGoals(p func(string, ...any)) {
	p("## The issue's goals\n\n| goal | measured | |\n|---|---|---|\n")
	verdict := func(ok bool) string {
		if ok {
			return "**pass**"
		}
		return "**FAIL**"
	}
	atLeast := func(got, want float64) string {
		if got >= want {
			return verdict(true)
		}
		return fmt.Sprintf("%s: short by %.2g %%", verdict(false), 100*(want-got)/want) // 7.2, 0.11
	}
	b.writeRequestGoals(p, verdict, atLeast)
	if b64, b16 := b.get("B", 64), b.get("B", 16); b64 != nil && b16 != nil {
		v := b64.rps / b16.rps
		p("| no collapse: B at 64 ≥ 0.9 × B at 16 | %.2f (%.0f vs %.0f req/s) | %s |\n", v, b64.rps, b16.rps, atLeast(v, 0.9))
	} else {
		p("| no collapse: B at 64 ≥ 0.9 × B at 16 | not measured in this run | – |\n")
	}
	if r := b.get("B", 16); r != nil {
		v := r.perReq(float64(r.retries))
		extra := ""
		if e := b.get("E", 16); e != nil {
			extra = fmt.Sprintf("; E: %.3f", e.perReq(float64(e.retries)))
		}
		if a := b.get("A-own", 16); a != nil {
			extra += fmt.Sprintf("; A-own: %.3f", a.perReq(float64(a.retries)))
		}
		if a := b.get("A-naive", 16); a != nil {
			extra += fmt.Sprintf("; A-naive: %.3f", a.perReq(float64(a.retries)))
		}
		ok := v <= 0.05
		msg := verdict(ok)
		if !ok {
			msg += fmt.Sprintf(": %.1f× the limit", v/0.05)
		}
		p("| serialization retries per new request ≤ 0.05 at 16 clients | B: %.3f%s | %s |\n", v, extra, msg)
	} else {
		p("| serialization retries per new request ≤ 0.05 at 16 clients | not measured in this run | – |\n")
	}
	// No failure may reach a client: every answer of B, C and E is the
	// expected one (D's 409s are the in-use answer the storm is about).
	var bad []string
	for _, r := range b.results {
		want := map[string]string{"B": "201", "B-young": "201", "E": "201", "C": "201 replayed", "A-own": "201"}[r.scenario]
		if want == "" {
			continue
		}
		if n := r.total - r.outcomes[want]; n > 0 {
			bad = append(bad, fmt.Sprintf("%s@%d: %d", r.scenario, r.clients, n))
		}
	}
	b.writeYoungGoal(p, verdict)
	b.writeYoungRetryGoals(p, verdict)
	b.writeStormGoal(p, verdict)
	if len(bad) == 0 {
		p("| no serialization failure reaches a client | every answer of A-own, B, B-young, C and E was the expected one | %s |\n", verdict(true))
	} else {
		p("| no serialization failure reaches a client | unexpected answers or errors: %s | %s |\n", strings.Join(bad, ", "), verdict(false))
	}
	if v, ok := b.ratio("C", "B", 16); ok {
		p("| replays C ≥ 4 × new payments B at 16 clients | C/B = %.2f (%.0f vs %.0f req/s) | %s |\n", v, b.get("C", 16).rps, b.get("B", 16).rps, atLeast(v, 4))
	} else {
		p("| replays C ≥ 4 × new payments B at 16 clients | not measured in this run | – |\n")
	}
	b.writeBackgroundGoals(p, verdict)
	b.writeFilterGoals(p, verdict)
	if bOn, bOff := b.get("B", 16), b.get("E", 16); bOn != nil && bOff != nil {
		p("| the filter's effect, reported honestly (16 clients) | with / without: %.0f / %.0f req/s (%.2f×), %.1f / %.1f statements, %.3f / %.3f retries per request | reported |\n",
			bOn.rps, bOff.rps, bOn.rps/bOff.rps, bOn.perReq(float64(bOn.client.statements)), bOff.perReq(float64(bOff.client.statements)),
			bOn.perReq(float64(bOn.retries)), bOff.perReq(float64(bOff.retries)))
	}
	p("\n")
}

// writeCPU sets each scenario's CPU per request against the machine: on a
// machine this small everything is CPU-bound, so CPU per request is what
// throughput is made of.
func (b *bench) writeCPU(p func(string, ...any)) {
	c := 16
	if !slices.Contains(b.o.clients, c) {
		c = b.o.clients[len(b.o.clients)-1]
	}
	p("## Where a request's time goes (%d clients)\n\n", c)
	p("CPU per request in the window: this process (for B to E that is the service, but also the benchmark's HTTP "+
		"clients and the Stripe simulator) and PostgreSQL. *Ceiling* is what %d cores would serve at that cost if "+
		"nothing else ran; *measured* falls short of it by the machine's other load and idle time.\n\n", b.machine.cores)
	p("| scenario | CPU ms here | CPU ms postgres | CPU ms total | ceiling req/s | measured req/s | stmts | write commits | WAL syncs | busy %% | others %% |\n")
	p("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, s := range allScenarios {
		r := b.get(s, c)
		if r == nil {
			continue
		}
		here, pg, busy, others, _ := r.cpuPerReq()
		total, ceiling := here+pg, b.ceiling(s, c)
		// Write commits: every commit but the read-only ones (a replay's
		// lookup, E's lookup of a new key, the API key lookup on a cache miss).
		p("| %s | %.2f | %.2f | %.2f | %.0f | %.0f | %.1f | %s | %.2f | %.0f | %.0f |\n", s, here, pg, total, ceiling, r.rps,
			r.perReq(float64(r.client.statements)), writeCommits(s), r.perReq(float64(r.server.walSyncs)), busy, others)
	}
	p("\n")
}

// ceiling is what the machine's cores would serve at the CPU cost per
// request of scenario s at c clients; 0 when unknown.
func (b *bench) ceiling(s string, c int) float64 {
	r := b.get(s, c)
	if r == nil {
		return 0
	}
	here, pg, _, _, _ := r.cpuPerReq()
	if here+pg <= 0 {
		return 0
	}
	return float64(b.machine.cores) * 1000 / (here + pg)
}

// writeCommits is how many of a scenario's commits write, by construction.
func writeCommits(s string) string {
	switch s {
	case "A-naive":
		return "4"
	case "A-own", "B", "B-young", "E":
		return "2"
	case "C":
		return "0 (one read, no transaction)"
	}
	return "–"
}

func (b *bench) writeNotes(p func(string, ...any)) {
	p("## Notes\n\n")
	p("- The load generator, the service and the Stripe simulator run in one process on the same cores as PostgreSQL; " +
		"their CPU is all in *CPU ms here*. The simulator keeps its state under one mutex; it is reset before each cell.\n")
	p("- No background worker runs but in F: elsewhere staged jobs are not drained into River, so the drain's own statements are not counted; in F the worker's statements are not counted either (its pool has no statement counter), though its CPU and PostgreSQL's are in F's CPU figures.\n")
	p("- Every cell starts right after a CHECKPOINT, so the first change of each page writes a full-page image: the WAL " +
		"per request is at its highest, more so for random keys (uuid, `pay_...`) that touch many pages than for " +
		"bigserial ones that append to the same pages.\n")
	p("- A 409 in D is the answer to a key in use; a request whose transaction still failed to serialize after its " +
		"retries gets 503 (no other request held its key), and any 5xx in D fails the goals' storm row.\n")
	p("- A-naive's transactions that still failed after %d attempts count as errors (pgbench, in the baseline, "+
		"counted them as failed scripts).\n", 5)
	p("- PostgreSQL listens on a unix socket here; the baseline's pgbench used TCP on 127.0.0.1.\n")
	p("- `go run ./cmd/paymentsbench -h` lists the knobs: `-rounds 3` repeats every cell and reports medians, " +
		"`-service-conns`, `-stripe-idle-conns`, `-preload 0`, `-cpuprofile-cell B:16`, " +
		"`-wal-compression lz4` (the server's setting, the same for every cell: the settings line above says which); " +
		"`BENCH_QUICK=1 make bench` is a short run.\n\n")
}

var (
	benchLine   = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op`)
	benchMetric = regexp.MustCompile(`([\d.]+) (bytes/key|fp%)`)
)

// writeFilterGoals reads the key filter's `go test -bench` output, when
// given, and judges the default layout (blocked, 4 slices) against issue
// 29's goals, on medians: ratios in one run (a check to one DRAM access, to
// bits-and-blooms at the same false-positive rate) and its memory. The old
// absolute limits (150 ns a check, 200 ns an add) are retired: they failed
// on a busy machine and passed on a quiet one; the times are reported.
func (b *bench) writeFilterGoals(p func(string, ...any), verdict func(bool) string) {
	if b.o.keyfilterBench == "" {
		return
	}
	raw, err := os.ReadFile(b.o.keyfilterBench)
	if err != nil {
		p("| the key filter's goals | could not read %s: %v | – |\n", b.o.keyfilterBench, err)
		return
	}
	ns, metric := map[string][]float64{}, map[string][]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		v, _ := strconv.ParseFloat(m[2], 64)
		ns[m[1]] = append(ns[m[1]], v)
		for _, mm := range benchMetric.FindAllStringSubmatch(line, -1) {
			v, _ := strconv.ParseFloat(mm[1], 64)
			metric[m[1]+" "+mm[2]] = append(metric[m[1]+" "+mm[2]], v)
		}
	}
	median := func(m map[string][]float64, name string) (float64, bool) {
		v := m[name]
		if len(v) == 0 {
			return math.NaN(), false
		}
		slices.Sort(v)
		return v[len(v)/2], true
	}
	const dram = "BenchmarkDRAMRead/latency-256MiB"
	for _, name := range []string{"BenchmarkCheckMember/blocked-4", "BenchmarkCheckNonMember/blocked-4", "BenchmarkCheckLatency/blocked-4",
		"BenchmarkAdd/blocked-4", "BenchmarkCheckAndAdd/blocked-4", dram, "BenchmarkDRAMRead/independent-256MiB"} {
		if v, ok := median(ns, name); ok {
			p("| reported: `%s` (no longer judged in ns) | %.0f ns (median of %d) | reported |\n", name, v, len(ns[name]))
		}
	}
	if check, ok := median(ns, "BenchmarkCheckLatency/blocked-4"); !ok {
		p("| reported: a check against one DRAM access | `BenchmarkCheckLatency/blocked-4` not in the output | – |\n")
	} else if d, ok := median(ns, dram); !ok {
		p("| reported: a check against one DRAM access | `%s` not in the output | – |\n", dram)
	} else {
		// Reported, no longer judged (issue 40): the yardstick is this
		// machine's DRAM of the moment, which moved 293 → 399 → 194 ns
		// between runs; the filter is judged against bits-and-blooms in
		// the same run, below.
		p("| reported: a check against one DRAM access (one at a time, each waiting for the last, as a random read of a 256 MiB array "+
			"that waits for the last; was judged ≤ 1.2 ×) | %.0f / %.0f ns = %.2f × | reported |\n", check, d, check/d)
	}
	for _, kind := range []string{"CheckMember", "CheckNonMember", "CheckLatency"} {
		ours, ok1 := median(ns, "Benchmark"+kind+"/blocked-4")
		theirs, ok2 := median(ns, "Benchmark"+kind+"/bloomv3-4")
		if !ok1 || !ok2 {
			p("| %s ahead of bits-and-blooms at the same false-positive rate (4 slices) | not both in the output | – |\n", kind)
			continue
		}
		p("| %s ahead of bits-and-blooms at the same false-positive rate (bloomv3-4: bloom/v3's bits, 4 slices) | "+
			"%.0f / %.0f ns = %.2f × | %s |\n", kind, ours, theirs, ours/theirs, verdict(ours < theirs))
		if single, ok := median(ns, "Benchmark"+kind+"/single"); ok {
			p("| yardstick: %s of one plain bloom/v3 filter, no slices (it cannot forget) | %.0f ns; blocked-4 takes %.2f × its time | – |\n",
				kind, single, ours/single)
		}
	}
	if bpk, ok := median(metric, "BenchmarkCheckNonMember/blocked-4 bytes/key"); ok {
		fp, _ := median(metric, "BenchmarkCheckNonMember/blocked-4 fp%")
		p("| the filter's memory ≤ 2.5 bytes per live key (10 M keys; measured false positives %.2f %%: that share of new keys takes E's careful path) | "+
			"%.3f | %s |\n", fp, bpk, verdict(bpk <= 2.5))
	} else {
		p("| the filter's memory ≤ 2.5 bytes per live key | `BenchmarkCheckNonMember/blocked-4` not in the output | – |\n")
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d.Microseconds())/1000) }

// writeYoungGoal is issue 14's row: on an empty database, where every index
// is a page or two and SERIALIZABLE's page-level predicate locks make new
// keys conflict, no new key gets 409 (rule 5); the retries that resolve
// those conflicts inside the request are reported.
func (b *bench) writeYoungGoal(p func(string, ...any), verdict func(bool) string) {
	var cells []string
	ok, measured := true, false
	for _, c := range []int{16, 64} {
		r := b.get("B-young", c)
		if r == nil {
			continue
		}
		measured = true
		conflicts := r.outcomes["409"]
		ok = ok && conflicts == 0
		cells = append(cells, fmt.Sprintf("%d clients: %d × 409 of %d, %.3f retries per request", c, conflicts, r.total, r.perReq(float64(r.retries))))
	}
	if !measured {
		p("| no 409 for new keys on a young database (B-young at 16 and 64 clients) | not measured in this run | – |\n")
		return
	}
	p("| no 409 for new keys on a young database (B-young at 16 and 64 clients) | %s | %s |\n", strings.Join(cells, "; "), verdict(ok))
}

// writeRequestGoals judges the request (issue 40): B against the
// like-for-like floor A-naive-http (the naive transactions served over the
// same HTTP, authentication and Stripe call) at 1.3 × at 16 clients and
// 1.6 × at 64; the service's own overhead, B against the engine's floor
// A-own at 16 clients, at least 0.75 ×; and, at each, PostgreSQL's CPU per
// request at most 0.8 × A-naive's and the WAL at most 2 × A-naive's. Each
// verdict is the medians'; beside it, the spread of the ratio round by
// round, and "within noise" when that spread straddles the limit. B against
// the SQL-only floor A-naive is reported, no longer judged: A-naive makes
// no HTTP exchange and no Stripe call.
func (b *bench) writeRequestGoals(p func(string, ...any), verdict func(bool) string, atLeast func(got, want float64) string) {
	atMost := func(got, limit float64) string {
		if got <= limit {
			return verdict(true)
		}
		return fmt.Sprintf("%s: %.2f× the limit", verdict(false), got/limit)
	}
	for _, g := range []struct {
		floor   string
		clients int
		want    float64
	}{{"A-naive-http", 16, 1.3}, {"A-naive-http", 64, 1.6}, {"A-own", 16, 0.75}} {
		goal := fmt.Sprintf("B ≥ %.2g × %s at %d clients", g.want, g.floor, g.clients)
		if v, ok := b.ratio("B", g.floor, g.clients); ok {
			p("| %s | B/%s = %.2f (%.0f vs %.0f req/s)%s | %s%s |\n", goal, g.floor, v, b.get("B", g.clients).rps, b.get(g.floor, g.clients).rps,
				spreadOf(b.roundRatios("B", g.floor, g.clients, rps)), atLeast(v, g.want), noise(b.roundRatios("B", g.floor, g.clients, rps), g.want, true))
		} else {
			p("| %s | not measured in this run | – |\n", goal)
		}
	}
	for _, c := range []int{16, 64} {
		if v, ok := b.ratio("B", "A-naive", c); ok {
			p("| B / A-naive at %d clients (the SQL-only floor: no HTTP, no Stripe) | %.2f (%.0f vs %.0f req/s)%s | reported |\n",
				c, v, b.get("B", c).rps, b.get("A-naive", c).rps, spreadOf(b.roundRatios("B", "A-naive", c, rps)))
		}
	}
	for _, c := range []int{16, 64} {
		goal := fmt.Sprintf("PostgreSQL CPU per request ≤ 0.8 × A-naive's at %d clients", c)
		bb, a := b.get("B", c), b.get("A-naive", c)
		if bb == nil || a == nil {
			p("| %s | not measured in this run | – |\n", goal)
			continue
		}
		// The medians of each scenario's own CPU per request, not of the
		// cells with the median throughput: CPU per request is the figure.
		bpg, apg := median(b.each("B", c, pgCPU)), median(b.each("A-naive", c, pgCPU))
		if apg <= 0 {
			p("| %s | A-naive's PostgreSQL CPU was not measured | – |\n", goal)
			continue
		}
		rounds := b.roundRatios("B", "A-naive", c, pgCPU)
		p("| %s | B / A-naive = %.2f (%.3f vs %.3f ms)%s | %s%s |\n", goal, bpg/apg, bpg, apg, spreadOf(rounds), atMost(bpg/apg, 0.8), noise(rounds, 0.8, false))
	}
	for _, c := range []int{16, 64} {
		goal := fmt.Sprintf("WAL per request ≤ 2 × A-naive's at %d clients", c)
		bb, a := b.get("B", c), b.get("A-naive", c)
		if bb == nil || a == nil || a.server.walBytes <= 0 {
			p("| %s | not measured in this run | – |\n", goal)
			continue
		}
		bw, aw := bb.perReq(bb.server.walBytes)/1024, a.perReq(a.server.walBytes)/1024
		p("| %s | B / A-naive = %.2f (%.1f vs %.1f KiB) | %s |\n", goal, bw/aw, bw, aw, atMost(bw/aw, 2))
	}
}

// rps and pgCPU are figures of a cell that the goals compare.
func rps(r *cellResult) float64 { return r.rps }

func pgCPU(r *cellResult) float64 { _, pg, _, _, _ := r.cpuPerReq(); return pg }

// each is f of every round's cell of s at c clients.
func (b *bench) each(s string, c int, f func(*cellResult) float64) []float64 {
	var out []float64
	for _, r := range b.all(s, c) {
		out = append(out, f(r))
	}
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// roundRatios is f(num) / f(den) at c clients, round by round: the cells
// of one round ran back to back, so each ratio is of two cells that shared
// the machine's state of the moment.
func (b *bench) roundRatios(num, den string, c int, f func(*cellResult) float64) []float64 {
	byRound := map[int]*cellResult{}
	for _, r := range b.all(den, c) {
		byRound[r.round] = r
	}
	var out []float64
	for _, n := range b.all(num, c) {
		if d, ok := byRound[n.round]; ok && f(d) > 0 {
			out = append(out, f(n)/f(d))
		}
	}
	slices.Sort(out)
	return out
}

// spreadOf says the range of the per-round ratios, when there are several.
func spreadOf(v []float64) string {
	if len(v) < 2 {
		return ""
	}
	return fmt.Sprintf("; rounds %.2f–%.2f (%d)", v[0], v[len(v)-1], len(v))
}

// noise says "within noise" when the per-round ratios fall on both sides
// of limit: the verdict is still the median's.
func noise(v []float64, limit float64, atLeast bool) string {
	if len(v) < 2 {
		return ""
	}
	lo, hi := v[0], v[len(v)-1]
	if (atLeast && lo < limit && hi >= limit) || (!atLeast && lo <= limit && hi > limit) {
		return " (within noise: the rounds straddle the limit)"
	}
	return ""
}

// writeYoungRetryGoals judges the young database (issue 29): B-young at 16
// and 64 clients makes at most 0.05 serialization retries per request, and
// its p99 latency is at most 2 × B's at the same number of clients.
func (b *bench) writeYoungRetryGoals(p func(string, ...any), verdict func(bool) string) {
	for _, c := range []int{16, 64} {
		goal := fmt.Sprintf("B-young ≤ 0.05 retries per request at %d clients", c)
		y := b.get("B-young", c)
		if y == nil {
			p("| %s | not measured in this run | – |\n", goal)
			continue
		}
		v := y.perReq(float64(y.retries))
		msg := verdict(v <= 0.05)
		if v > 0.05 {
			msg += fmt.Sprintf(": %.1f× the limit", v/0.05)
		}
		p("| %s | %.3f | %s |\n", goal, v, msg)
	}
	for _, c := range []int{16, 64} {
		goal := fmt.Sprintf("B-young p99 ≤ 2 × B's at %d clients", c)
		y, bb := b.get("B-young", c), b.get("B", c)
		if y == nil || bb == nil || bb.p99 <= 0 {
			p("| %s | not measured in this run | – |\n", goal)
			continue
		}
		v := float64(y.p99) / float64(bb.p99)
		msg := verdict(v <= 2)
		if v > 2 {
			msg += fmt.Sprintf(": %.2f× the limit", v/2)
		}
		p("| %s | %.2f (%s vs %s ms) | %s |\n", goal, v, ms(y.p99), ms(bb.p99), msg)
	}
}
