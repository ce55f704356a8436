package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// scaleReport is docs/BENCHMARKS-scale.md.
func (b *bench) scaleReport() string {
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format, args...) }
	m, o, sr := b.machine, b.o, b.scaleRun

	p("# Benchmarks at scale\n\n")
	p("Written on %s UTC by the command below (`make bench-scale` runs `scripts/bench-scale.sh`); the whole run took %s "+
		"(building the databases %s, the table %s, the start-ups %s, the churn %s). Do not edit by hand: run `make bench-scale` again. "+
		"`make bench` writes [BENCHMARKS.md](BENCHMARKS.md), on 100,000 keys and many client counts; this page is how the cost grows with the key store.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04"), b.elapsed.Round(time.Second),
		sr.buildDone.Sub(sr.started).Round(time.Second), sr.cellsDone.Sub(sr.buildDone).Round(time.Second),
		sr.startupDone.Sub(sr.cellsDone).Round(time.Second), time.Since(sr.startupDone).Round(time.Second))
	p("```\n%s\n```\n\n", o.command)
	p("## Machine\n\n| | |\n|---|---|\n")
	p("| CPU | %d × %s |\n| memory | %s |\n| kernel | Linux %s |\n", m.cores, m.cpu, m.memory, m.kernel)
	p("| Go | %s (GOMAXPROCS %d, GOGC %s) |\n", m.goVersion, runtime.GOMAXPROCS(0), gogc)
	p("| PostgreSQL | %s, a throwaway cluster started by the benchmark (pglocal, unix socket); %s |\n", m.pgVersion, strings.Join(m.pgSettings, ", "))
	p("| load average | %s before the run, %s after |\n\n", m.loadBefore, loadAverage())

	b.writeScaleBuild(p)
	if len(sr.cells) > 0 {
		b.writeScaleTable(p)
	}
	if len(sr.startups) > 0 {
		b.writeStartups(p)
	}
	if len(sr.churns) > 0 {
		b.writeChurn(p)
	}
	return w.String()
}

func (b *bench) writeScaleBuild(p func(string, ...any)) {
	sr := b.scaleRun
	p("## The databases\n\n")
	p("Each size is built once, into a database of its own, from the migrated schema with %d users: for request i, a finished "+
		"`POST /v1/payments` key (a UUID key, the request's parameters and fingerprint, its stored 201 with a Payment of the size the "+
		"service stores, about 430 bytes), its payment and its two audit records, spread round-robin over the users and evenly over "+
		"the last TTL (finished from 23 h ago up to now, so that none expires while the run lasts; the heap holds them in the order they "+
		"finished, as inserts leave them). The rows go in with `INSERT ... SELECT generate_series` into the tables stripped of their "+
		"indexes, constraints and foreign keys, which are built again after (foreign keys added `NOT VALID`, then validated in one pass), "+
		"then `VACUUM (FREEZE, ANALYZE)` and a `CHECKPOINT`.\n\n", b.o.users)
	p("The cells of a size reuse its database rather than a clone: cloning copies every file (for 10M keys, more than writing them again), "+
		"and each cell of B or E adds only a few thousand keys (the *keys* column counts them, read before each cell). The young database "+
		"(0) is a fresh clone per cell, so that it stays young; its C replays %d keys made once through the service.\n\n", b.o.replayKeys)
	p("| size | method | steps | total |\n|--:|---|---|--:|\n")
	for _, t := range sr.targets {
		if t.db == nil {
			continue
		}
		var steps []string
		for _, s := range t.db.steps {
			steps = append(steps, fmt.Sprintf("%s %s", s.name, s.took.Round(100*time.Millisecond)))
		}
		p("| %s | %s | %s | **%s** |\n", sizeName(t.size), t.db.method, strings.Join(steps, "; "), t.db.took.Round(time.Second))
	}
	p("\n")
}

func (b *bench) writeScaleTable(p func(string, ...any)) {
	sr, o := b.scaleRun, b.o
	p("## B, C and E as the key store grows\n\n")
	p("B is `POST /v1/payments` with a new key (filter on), C a replay of a random finished key (for 100k and up: any of the preloaded "+
		"ones, so the lookups range over the whole index), E is B with the key filter off (scenarios as in BENCHMARKS.md). The service "+
		"sizes its key filter for the live keys as an operator would (`PAYMENTS_KEYFILTER_EXPECTED_KEYS` = a third of them, never below "+
		"the default 1,048,576). Each cell: %s warm-up, %s window, closed loop; %d round(s), interleaved over every size and scenario; "+
		"each row is the median round by throughput, with the range.\n\n", o.warmup, o.duration, o.rounds)
	p("Columns: *keys* are the rows of `idempotency_keys` when the cell began; *stmts* are statements per request as the client sent them, "+
		"*server* as PostgreSQL counted them (pg_stat_statements); *hits* and *reads* are shared-buffer block hits and reads per request "+
		"over the cell (`pg_stat_database`; a read is a block not in shared_buffers, %s, served by the OS page cache or the disk), *key reads* "+
		"the reads of `idempotency_keys`' heap + indexes (`pg_statio_user_tables`); sizes are after the cell, in MiB: the key table, its "+
		"indexes, and payments + audit_records (heap and indexes), the other tables a request writes.\n\n", b.setting("shared_buffers"))
	p("| keys (size) | scenario | clients | req/s | p50 ms | p99 ms | stmts | server | hits | reads | hit %% | key reads | keys MiB | key indexes MiB | payments+audit MiB | outcomes |\n")
	p("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, c := range o.clients {
		for _, t := range sr.targets {
			for _, s := range o.scaleScenarios {
				r := sr.median(s, t.size, c)
				if r == nil {
					continue
				}
				rs := sr.cellsOf(s, t.size, c)
				rps := fmt.Sprintf("**%.0f**", r.rps)
				if len(rs) > 1 {
					rps += fmt.Sprintf(" (%.0f–%.0f)", rs[0].rps, rs[len(rs)-1].rps)
				}
				server := "–"
				if r.server.statements >= 0 {
					server = fmt.Sprintf("%.1f", r.perReq(float64(r.server.statements)))
				}
				sc := r.scale
				hitPct := 100 * float64(sc.blksHit) / math.Max(1, float64(sc.blksHit+sc.blksRead))
				p("| %d (%s) | %s | %d | %s | %s | %s | %.1f | %s | %.1f | %.2f | %.2f | %.2f | %s | %s | %s | %s |\n",
					r.liveKeys, sizeName(t.size), s, c, rps, ms(r.p50), ms(r.p99), r.perReq(float64(r.client.statements)), server,
					r.perReq(float64(sc.blksHit)), r.perReq(float64(sc.blksRead)), hitPct, r.perReq(float64(sc.keyHeapRd+sc.keyIdxRd)),
					mib(sc.keyTable), mib(sc.keyIndexes), mib(sc.otherTables), r.outcomeString())
			}
		}
	}
	var errs []string
	for _, r := range sr.cells {
		for msg, n := range r.errs {
			errs = append(errs, fmt.Sprintf("- %s at %s keys, %d clients (round %d), %d×: `%s`", r.scenario, sizeName(r.size), r.clients, r.round, n, msg))
		}
	}
	if len(errs) > 0 {
		p("\nErrors:\n\n%s\n", strings.Join(errs, "\n"))
	}
	p("\n### Goals\n\n| goal | measured | |\n|---|---|---|\n")
	verdict := func(ok bool) string {
		if ok {
			return "**pass**"
		}
		return "**FAIL**"
	}
	for _, s := range []string{"B", "C"} {
		for _, c := range o.clients {
			big, small := sr.median(s, 10_000_000, c), sr.median(s, 100_000, c)
			if big == nil || small == nil {
				continue
			}
			ratio := big.rps / small.rps
			p("| %s at 10M ≥ 0.85 × %s at 100k (%d clients) | %.2f (%.0f vs %.0f req/s) | %s |\n", s, s, c, ratio, big.rps, small.rps, verdict(ratio >= 0.85))
		}
	}
	p("\n")
}

func (b *bench) setting(name string) string {
	for _, s := range b.machine.pgSettings {
		if v, ok := strings.CutPrefix(s, name+" "); ok {
			return v
		}
	}
	return "?"
}

func (b *bench) writeStartups(p func(string, ...any)) {
	sr := b.scaleRun
	p("## Start-up\n\n")
	p("The real binary (`payments serve`, built by the script) started against each database, with the key filter on (sized for the " +
		"live keys with `PAYMENTS_KEYFILTER_EXPECTED_KEYS`) and off (`PAYMENTS_KEYFILTER=false`), after a `CHECKPOINT`; the database's " +
		"files are in the OS page cache (the cells above just read them). Times are from the fork to `/readyz` answering 200 (it answers " +
		"as soon as the database does; claims meanwhile take the careful path) and to the process's log line `key filter ready` (the " +
		"rebuild's end); *rebuild* is the time that line reports. Memory is the process's VmRSS and VmHWM (`/proc/PID/status`) once " +
		"ready; *filter bytes* are the filter's bits (`keyfilter.Stats().Bytes` for the same configuration), per live key.\n\n")
	p("| keys | binary | filter | to /readyz | to filter ready | rebuild | keys added | VmRSS MiB | VmHWM MiB | filter MiB | filter bytes per key |\n")
	p("|--:|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range sr.startups {
		bin := "this branch"
		if r.baseline {
			bin = "baseline (`-startup-baseline-bin`)"
		}
		on, ready, rebuild, fb, perKey := "off", "–", "–", "–", "–"
		if r.filterOn {
			on = "on"
			ready, rebuild = fmt.Sprintf("%.2f s", r.filterReady.Seconds()), fmt.Sprintf("%.2f s", r.rebuildTook.Seconds())
			fb = fmt.Sprintf("%.1f", float64(r.filterBytes)/(1<<20))
			perKey = fmt.Sprintf("%.2f", float64(r.filterBytes)/float64(r.liveKeys))
		}
		p("| %d | %s | %s | %.2f s | %s | %s | %d | %s | %s | %s | %s |\n", r.liveKeys, bin, on, r.readyz.Seconds(), ready, rebuild, r.keysAdded,
			mib(r.rss), mib(r.hwm), fb, perKey)
	}
	p("\n")
	for _, r := range sr.startups {
		if r.filterOn && !r.baseline && r.size == 10_000_000 {
			p("Goals at 10M: ready with the filter rebuilt in %.2f s (goal ≤ 15 s): %s; the filter holds %.2f bytes per live key (goal ≤ 2.5): %s.\n\n",
				r.filterReady.Seconds(), passFail(r.filterReady <= 15*time.Second), float64(r.filterBytes)/float64(r.liveKeys),
				passFail(float64(r.filterBytes)/float64(r.liveKeys) <= 2.5))
		}
	}
}

func passFail(ok bool) string {
	if ok {
		return "**pass**"
	}
	return "**FAIL**"
}

func (b *bench) writeChurn(p func(string, ...any)) {
	sr, o := b.scaleRun, b.o
	p("## Churn\n\n")
	p("`payments serve` and `payments worker` (the real binaries; the worker runs the reaper and the completer) on a young database, "+
		"with `PAYMENTS_IDEMPOTENCY_KEY_TTL=%s` and `PAYMENTS_REAPER_INTERVAL=%s`, under new payments at a fixed rate (an open loop: "+
		"request n is sent at n/rate, spread over users) for %d TTLs, sampled every second. Time is compressed, and so are the clocks "+
		"that keep the table in shape: the reaper's interval (production: 1 min of a 24 h TTL) and autovacuum's naptime (`%s` for the run "+
		"instead of 1 min). *rows* are the rows present (`count(*)`), *unexpired* those a claim can still find, *dead* "+
		"`pg_stat_user_tables.n_dead_tup`, *lag* the age past expiry of the oldest expired key still present. The goals read the TTLs "+
		"after the first: rows within 10 %% of rate × TTL (rate: the 201s per second achieved), table + indexes at most 20 %% over their "+
		"size at the first TTL's end.\n\n", o.churnTTL, o.churnReaper, o.churnTTLs, churnNaptime)
	if o.churnSVG != "" {
		p("![churn](%s)\n\n", filepath.Base(o.churnSVG))
	}
	for _, r := range sr.churns {
		target := r.achieved * r.ttl.Seconds()
		p("### %s\n\n", r.variant)
		p("Storage settings of idempotency_keys and its indexes: %s. Rate: %.0f/s asked, %.1f/s answered 201 (rate × TTL = %.0f rows); outcomes: %s.\n\n",
			r.reloptions, r.rate, r.achieved, target, outcomes(r.outcomes))
		p("| TTL | rows mean | rows min–max | vs rate × TTL | unexpired mean | dead max | table + indexes at end MiB | max MiB | lag max s |\n")
		p("|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, q := range r.periods() {
			p("| %d | %.0f | %.0f–%.0f | %+.1f %% … %+.1f %% | %.0f | %d | %.2f | %.2f | %.1f |\n", q.n, q.rowsMean, q.rowsMin, q.rowsMax,
				100*(q.rowsMin/target-1), 100*(q.rowsMax/target-1), q.unexpiredMean, q.deadMax,
				float64(q.sizeEnd)/(1<<20), float64(q.sizeMax)/(1<<20), q.lagMax)
		}
		dev, growth := r.goals()
		p("\nGoals: rows within %.1f %% of rate × TTL after the first TTL (goal ≤ 10 %%): %s; table + indexes grew by %.1f %% after the first TTL (goal ≤ 20 %%): %s.\n\n",
			100*dev, passFail(dev <= 0.10), 100*growth, passFail(growth <= 0.20))
	}
}

func outcomes(m map[string]int) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s: %d", k, v))
	}
	return strings.Join(parts, ", ")
}

// writeChurnSVG plots the churn runs.
func (b *bench) writeChurnSVG(path string) error {
	sr := b.scaleRun
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}
	var rows, sizes, lags svgPanel
	rows = svgPanel{title: "Rows of idempotency_keys", ylabel: "rows"}
	sizes = svgPanel{title: "Size of idempotency_keys", ylabel: "MiB"}
	lags = svgPanel{title: "Reaper lag: oldest expired key still present", ylabel: "seconds past expiry"}
	xmax := 0.0
	for i, r := range sr.churns {
		dashed := i > 0
		var pr, pu, pd, pt, pi, pl []svgPoint
		for _, s := range r.samples {
			x := s.at.Seconds()
			xmax = math.Max(xmax, x)
			pr = append(pr, svgPoint{x, float64(s.rows)})
			pu = append(pu, svgPoint{x, float64(s.unexpired)})
			pd = append(pd, svgPoint{x, float64(s.nDead)})
			pt = append(pt, svgPoint{x, float64(s.table) / (1 << 20)})
			pi = append(pi, svgPoint{x, float64(s.indexes) / (1 << 20)})
			pl = append(pl, svgPoint{x, s.lag})
		}
		tag := ""
		if len(sr.churns) > 1 {
			tag = " (" + r.variant + ")"
		}
		target := r.achieved * r.ttl.Seconds()
		rows.series = append(rows.series,
			svgSeries{name: "rows" + tag, color: colors[0], dashed: dashed, points: pr},
			svgSeries{name: "unexpired" + tag, color: colors[2], dashed: dashed, points: pu},
			svgSeries{name: "dead tuples" + tag, color: colors[1], dashed: dashed, points: pd})
		if i == 0 {
			rows.series = append(rows.series, svgSeries{name: "rate × TTL", color: "#888", dashed: true,
				points: []svgPoint{{0, target}, {r.load.Seconds(), target}}})
			for t := r.ttl.Seconds(); t < r.load.Seconds(); t += r.ttl.Seconds() {
				rows.marks, sizes.marks, lags.marks = append(rows.marks, t), append(sizes.marks, t), append(lags.marks, t)
			}
		}
		sizes.series = append(sizes.series,
			svgSeries{name: "table" + tag, color: colors[3], dashed: dashed, points: pt},
			svgSeries{name: "indexes" + tag, color: colors[4], dashed: dashed, points: pi})
		lags.series = append(lags.series, svgSeries{name: "lag" + tag, color: colors[5], dashed: dashed, points: pl})
	}
	title := fmt.Sprintf("Churn: TTL %s, %d new payments/s, reaper every %s (make bench-scale)", b.o.churnTTL, b.o.churnRate, b.o.churnReaper)
	return os.WriteFile(path, []byte(renderSVG(title, "seconds since the load began (dotted lines: each TTL)", xmax, []svgPanel{rows, sizes, lags})), 0o644)
}
