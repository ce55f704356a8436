package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/example/payments/internal/keyfilter"
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
		b.writeFilterSizes(p)
	}
	if len(sr.churns) > 0 {
		b.writeChurn(p)
	}
	b.writeScaleNotes(p)
	return w.String()
}

func (b *bench) writeScaleBuild(p func(string, ...any)) {
	sr := b.scaleRun
	p("## The databases\n\n")
	p("Each size is built once, into a database of its own, from the migrated schema with %d users: for request i, a finished "+
		"`POST /v1/payments` key (a UUID key, the request's parameters and fingerprint, its stored 201 with a Payment of the size the "+
		"service stores, about 430 bytes), its payment and its two audit records, spread round-robin over the users and evenly over "+
		"the last TTL (finished from 23 h ago up to now, so that none expires while the run lasts; the heap holds them in the order they "+
		"finished, as inserts leave them). The tables are stripped of their indexes, constraints and foreign keys first, and they are "+
		"built again after (foreign keys added `NOT VALID`, then validated in one pass), then a `VACUUM (ANALYZE)` and a `CHECKPOINT`. "+
		"Method *copy* (the default, `-scale-load copy`): the benchmark writes the rows as COPY text, the three tables at once, each "+
		"`COPY ... FREEZE` after a `TRUNCATE` in its transaction, so the rows go in frozen and their pages all-visible. Method *insert* "+
		"(`-scale-load insert`): `INSERT ... SELECT generate_series`, one table after the other, then `VACUUM (FREEZE, ANALYZE)`; "+
		"for 1M keys it took 51 s to insert and 8.7 s to vacuum where copy takes about 27 s and 2 s (two runs on 2026-11-23).\n\n", b.o.users)
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
	p("Columns: *keys* are the rows of `idempotency_keys` when the cell began (*young*: a new clone of the migrated database, whose C "+
		"replays the keys made for it); *stmts* are statements per request as the client sent them, "+
		"*server* as PostgreSQL counted them (pg_stat_statements); *hits* and *reads* are shared-buffer block hits and reads per request "+
		"over the cell (`pg_stat_database`; a read is a block not in shared_buffers, %s, served by the OS page cache or the disk), *key reads* "+
		"the reads of `idempotency_keys`' heap + indexes (`pg_statio_user_tables`); *WAL KiB* the WAL written per request, with the "+
		"full-page images in it (`pg_stat_wal`; the first change of a page after a checkpoint writes all 8 KiB of it); sizes are after the cell, in MiB: the key table, its "+
		"indexes, and payments + audit_records (heap and indexes), the other tables a request writes; *others* is the share of the "+
		"machine's CPU that other processes used during the window (the machine is shared: a high figure marks a disturbed cell).\n\n", b.setting("shared_buffers"))
	p("| keys (size) | scenario | clients | req/s | p50 ms | p99 ms | stmts | server | hits | reads | hit %% | key reads | WAL KiB (full pages) | keys MiB | key indexes MiB | payments+audit MiB | others %% | outcomes |\n")
	p("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
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
				_, _, _, others, _ := r.cpuPerReq()
				p("| %d (%s) | %s | %d | %s | %s | %s | %.1f | %s | %.1f | %.2f | %.2f | %.2f | %.1f (%.2f) | %s | %s | %s | %.0f | %s |\n",
					r.liveKeys, sizeName(t.size), s, c, rps, ms(r.p50), ms(r.p99), r.perReq(float64(r.client.statements)), server,
					r.perReq(float64(sc.blksHit)), r.perReq(float64(sc.blksRead)), hitPct, r.perReq(float64(sc.keyHeapRd+sc.keyIdxRd)),
					r.perReq(r.server.walBytes)/1024, r.perReq(float64(r.server.walFPI)),
					mib(sc.keyTable), mib(sc.keyIndexes), mib(sc.otherTables), others, r.outcomeString())
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
		"rebuild's end); *rebuild* is the time that line reports. With the filter on, the service starts twice: first with no snapshot " +
		"of the filter stored (*from rebuild*: it reads every live key), then after that start stored one as it stopped (*from snapshot*: " +
		"it loads the snapshot and reads the keys made since). Memory is the process's VmRSS and VmHWM (`/proc/PID/status`) once " +
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
			if r.from != "" { // a binary from before issue 29 does not say
				on += ", from " + r.from
			}
			ready, rebuild = fmt.Sprintf("%.2f s", r.filterReady.Seconds()), fmt.Sprintf("%.2f s", r.rebuildTook.Seconds())
			fb = fmt.Sprintf("%.1f", float64(r.filterBytes)/(1<<20))
			perKey = fmt.Sprintf("%.2f", float64(r.filterBytes)/float64(r.liveKeys))
		}
		p("| %d | %s | %s | %.2f s | %s | %s | %d | %s | %s | %s | %s |\n", r.liveKeys, bin, on, r.readyz.Seconds(), ready, rebuild, r.keysAdded,
			mib(r.rss), mib(r.hwm), fb, perKey)
	}
	p("\n")
	b.writeStartupGoals(p)
}

// writeStartupGoals is issue 29's goal table for the start-up at 10
// million keys: a ready filter within 5 s from the snapshot and the keys
// made since (the full rebuild, its fallback, reported), and at most 2.5
// bytes of filter per live key.
func (b *bench) writeStartupGoals(p func(string, ...any)) {
	var fromSnapshot, rebuilt *startupResult
	for _, r := range b.scaleRun.startups {
		if r.filterOn && !r.baseline && r.size == 10_000_000 {
			switch r.from {
			case "snapshot":
				fromSnapshot = r
			case "rebuild":
				rebuilt = r
			}
		}
	}
	p("| goal (issue 29, at 10M live keys) | measured | verdict |\n|---|---|---|\n")
	if fromSnapshot == nil && rebuilt == nil {
		p("| start-up to a ready key filter ≤ 5 s | not measured at 10M in this run (`-startup 10000000`) | – |\n\n")
		return
	}
	if fromSnapshot != nil {
		p("| start-up to a ready key filter ≤ 5 s (from its snapshot and the keys made since) | %.2f s (%d keys read) | %s |\n",
			fromSnapshot.filterReady.Seconds(), fromSnapshot.keysAdded, passFail(fromSnapshot.filterReady <= 5*time.Second))
	} else {
		p("| start-up to a ready key filter ≤ 5 s (from its snapshot) | no start loaded a snapshot | **FAIL** |\n")
	}
	if rebuilt != nil {
		p("| the fallback: a start without a usable snapshot, from every live key | %.2f s | reported |\n", rebuilt.filterReady.Seconds())
	}
	r := fromSnapshot
	if r == nil {
		r = rebuilt
	}
	perKey := float64(r.filterBytes) / float64(r.liveKeys)
	p("| the filter's memory ≤ 2.5 bytes per live key | %.2f | %s |\n\n", perKey, passFail(perKey <= 2.5))
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
		"`pg_stat_user_tables.n_dead_tup`, *lag* the age past expiry of the oldest expired key still present; every user has a webhook "+
		"endpoint (a loopback receiver answering 204), so each payment's event adds a row to `webhook_deliveries`, and *delivery rows "+
		"scanned* are the rows of that table read by sequential scans per second (`seq_tup_read`): the reaper's deletions look up the "+
		"deliveries that refer to each key. The goals read the TTLs "+
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
		p("| TTL | rows mean | rows min–max | vs rate × TTL | unexpired mean | dead max | table + indexes at end MiB | of which the table | max MiB | lag max s | deliveries at end | delivery rows scanned per s |\n")
		p("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, q := range r.periods() {
			p("| %d | %.0f | %.0f–%.0f | %+.1f %% … %+.1f %% | %.0f | %d | %.2f | %.2f | %.2f | %.1f | %d | %.0f |\n", q.n, q.rowsMean, q.rowsMin, q.rowsMax,
				100*(q.rowsMin/target-1), 100*(q.rowsMax/target-1), q.unexpiredMean, q.deadMax,
				float64(q.sizeEnd)/(1<<20), float64(q.tableEnd)/(1<<20), float64(q.sizeMax)/(1<<20), q.lagMax, q.deliveriesEnd, q.scanRowsPerSecond)
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
	scans := svgPanel{title: "Rows of webhook_deliveries read by sequential scans", ylabel: "rows per second"}
	xmax := 0.0
	for i, r := range sr.churns {
		dashed := i > 0
		var pr, pu, pd, pt, pi, pl, ps []svgPoint
		for j, s := range r.samples {
			if j > 0 {
				prev := r.samples[j-1]
				ps = append(ps, svgPoint{s.at.Seconds(), float64(s.deliveryScanRows-prev.deliveryScanRows) / (s.at - prev.at).Seconds()})
			}
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
				scans.marks = append(scans.marks, t)
			}
		}
		sizes.series = append(sizes.series,
			svgSeries{name: "table" + tag, color: colors[3], dashed: dashed, points: pt},
			svgSeries{name: "indexes" + tag, color: colors[4], dashed: dashed, points: pi})
		lags.series = append(lags.series, svgSeries{name: "lag" + tag, color: colors[5], dashed: dashed, points: pl})
		scans.series = append(scans.series, svgSeries{name: "scanned" + tag, color: colors[0], dashed: dashed, points: ps})
	}
	title := fmt.Sprintf("Churn: TTL %s, %d new payments/s, reaper every %s (make bench-scale)", b.o.churnTTL, b.o.churnRate, b.o.churnReaper)
	return os.WriteFile(path, []byte(renderSVG(title, "seconds since the load began (dotted lines: each TTL)", xmax, []svgPanel{rows, sizes, lags, scans})), 0o644)
}

// writeFilterSizes is the key filter's memory per live key at 10 million
// keys for each layout, slice count and false-positive rate, from the
// package's own sizing (keyfilter.New and Stats, nothing measured).
func (b *bench) writeFilterSizes(p func(string, ...any)) {
	const live = 10_000_000
	p("### The filter's memory per live key\n\n")
	p("What the filter allocates for %d live keys (sized as above: a slice holds the keys of TTL/(slices−1)), by layout, number "+
		"of slices and false-positive rate, from `keyfilter.New` and `Stats().Bytes` (the package's sizing, not a measurement). "+
		"The service runs blocked, 4 slices, 0.5 %% (since issue 29; a line of 512 bits per slice, where it was 128 bits of a shared line at 0.1 %%).\n\n", live)
	rates := []float64{0.001, 0.002, 0.005, 0.01}
	p("| layout | slices |")
	for _, fp := range rates {
		p(" %.1f %% |", 100*fp)
	}
	p("\n|---|--:|%s\n", strings.Repeat("--:|", len(rates)))
	for _, layout := range []keyfilter.Layout{keyfilter.LayoutBlocked, keyfilter.LayoutBloomV3} {
		for _, slices := range []int{3, 4} {
			p("| %s | %d |", layout, slices)
			for _, fp := range rates {
				f, err := keyfilter.New(keyfilter.Config{Layout: layout, Slices: slices, FalsePositiveRate: fp, ExpectedKeysPerSlice: uint(live / (slices - 1))})
				if err != nil {
					p(" %v |", err)
					continue
				}
				p(" %.2f |", float64(f.Stats().Bytes)/live)
			}
			p("\n")
		}
	}
	p("\nA Bloom filter needs at least 1.44 × log2(1/ε) bits per key; a time-sliced one holds slices/(slices−1) TTLs of keys, " +
		"each slice at ε/slices: at 0.1 %%, at least 2.87 bytes per live key with 4 slices, 3.12 with 3, 2.67 with 8 (the least), " +
		"before blocking adds its share. So 2.5 bytes per live key at 0.1 %% is out of this design's reach whatever the layout: " +
		"it takes a rate of about 0.5 %% (bloomv3, 4 slices: see the table) or 1 %% (blocked, 3 slices), where one new key in " +
		"100 to 200 takes the careful path (one lookup more: E's cost instead of B's for that request), or another structure " +
		"(a filter that can delete, such as a cuckoo filter, needs no slices).\n\n")
}

// writeScaleNotes says what the measurements showed and what was changed
// for them (issue 19), for the reader of the tables above.
func (b *bench) writeScaleNotes(p func(string, ...any)) {
	p("## What the measurements showed, and what changed\n\n")
	p("- **The reaper and the webhook deliveries.** Deleting a key sets `webhook_deliveries.idempotency_key_id` to NULL where it " +
		"points at the key; PostgreSQL looks those rows up once per deleted key, and that column had no index: every reaped key " +
		"scanned every delivery ever made. In the churn's `before-000017` run the rows scanned per second grow with the table " +
		"and the reaper falls behind (its lag and the rows present climb); migration 000017 adds a partial index (the rows that " +
		"have a key), and `TestReaper_everyReferenceToAKeyIsFoundThroughAnIndex` holds every reference to a key to an index.\n")
	p("- **Autovacuum on the key table** was tried and not kept. Each request leaves two dead row versions (its finish, a " +
		"HOT update since migration 000026, and its deletion). With the TTL compressed to " +
		"seconds, what the table holds beyond its live keys is set by the reaper's lag and by the dead versions of the last " +
		"second or two (autovacuum's naptime cannot go below 1 s), a share of the TTL that a 24 h TTL makes negligible; a " +
		"per-table `autovacuum_vacuum_scale_factor` of 0.01 changed nothing measurable there, so migration 000017 does not set " +
		"it. At 10M live keys PostgreSQL's default (a vacuum " +
		"once a fifth of the rows are dead) lets the table carry up to that much dead space between vacuums; that is not measured here.\n")
	p("- **The key table's fillfactor** (70, migration 000026, room for the HOT finish) is not what grows it after the first " +
		"TTL: in one run on 2026-11-27 the churn as migrated grew 18.2 %% and the `default-autovacuum` variant (`-churn-variants`, " +
		"the table's storage settings reset, fillfactor 100) 24.4 %%, each by about 1.4 MiB, most of it the heap (dead versions " +
		"between vacuums); the denser the table at the first TTL's end, the larger the same growth in per cent. The same build " +
		"as migrated grew 25.4 %% in `make bench-scale` the same day: this goal's row moves by more than its margin from run to " +
		"run.\n")
	p("- **The filter's rebuild.** It paged through the keys by their random UUID: one random heap page per key, at 10M keys " +
		"mostly outside shared_buffers. It now pages through the finished keys in creation order (their index, in about the heap's " +
		"order; before migration 000026, in expiry order) and the unfinished ones through their own table, and reads the next page while the filter takes in the last. The " +
		"start-up table compares it with a binary built before the change when the run is given `-startup-baseline-bin`. What " +
		"is left at 10M is reading 10M rows of a table of some 6.5 GB with two cores: PostgreSQL spends about 7 ms per page of " +
		"5,000 (index scan and heap fetches, by hand with `EXPLAIN ANALYZE`), the service as long decoding them and setting bits, " +
		"and the two overlap. A covering expiry index (index-only scans: about 5.6 ms per page by hand) or a snapshot of the " +
		"filter's bits written now and then and read at start-up are the ways below 15 s. Issue 29 built the snapshot: `serve` " +
		"stores the bits in `keyfilter_snapshots` every 10 minutes and at shutdown, and a start loads them and reads only the keys " +
		"created in the 10 minutes before the snapshot's time or since, and the unfinished ones; the full rebuild is the fallback " +
		"(the start-up table has both).\n")
	p("- **Memory after the rebuild.** The rebuild's pages are garbage once read, and the service's GOGC of 400 let the heap " +
		"grow to five times what it keeps; `payments serve` now hands that memory back once the filter is ready " +
		"(`debug.FreeOSMemory`), so VmRSS once ready is the filter and the service, and VmHWM the peak of the rebuild.\n")
	p("- **B as the store grows.** A new key's row is inserted once, at the b-trees' right-hand edge (time-ordered ids, "+
		"`internal/ids`), and its finish is a HOT update (migration 000026: no index names a column it changes), so a request "+
		"writes few pages of the big indexes on idempotency_keys whatever their size; what it still reads at random is the "+
		"unique index `(user_id, idempotency_key)`, by its key, for the insert's uniqueness check. At 10M keys those pages "+
		"are rarely in shared_buffers (%s): compare *reads*, *key reads* and *WAL KiB (full pages)* across the sizes.\n",
		b.setting("shared_buffers"))
	p("- **C as the store grows.** A replay reads its key through the unique index and the heap: at 10M keys about two blocks " +
		"from outside shared_buffers per replay (*reads*), all in the OS page cache on this machine (24 GB).\n\n")
}
