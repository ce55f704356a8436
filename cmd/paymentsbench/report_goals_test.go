package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// cell is a result with what the request goals read: throughput, p99,
// retries, WAL and PostgreSQL's CPU, per request over total requests.
func cell(scenario string, clients int, rps float64, p99 time.Duration, retries uint64, walKiB, pgMs float64) *cellResult {
	const n = 1000
	return &cellResult{
		scenario: scenario, clients: clients, rps: rps, p99: p99, total: n, requests: n, retries: retries,
		server: serverCounters{walBytes: walKiB * 1024 * n},
		cpu:    [2]cpuSample{{}, {postgres: time.Duration(pgMs * n * float64(time.Millisecond))}},
	}
}

func goalsOf(b *bench) map[string]string {
	var sb strings.Builder
	b.writeRequestGoals(func(f string, a ...any) { fmt.Fprintf(&sb, f, a...) }, func(ok bool) string {
		if ok {
			return "**pass**"
		}
		return "**FAIL**"
	}, func(got, want float64) string {
		if got >= want {
			return "**pass**"
		}
		return "**FAIL**"
	})
	b.writeYoungRetryGoals(func(f string, a ...any) { fmt.Fprintf(&sb, f, a...) }, func(ok bool) string {
		if ok {
			return "**pass**"
		}
		return "**FAIL**"
	})
	rows := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(sb.String()), "\n") {
		f := strings.Split(line, " | ")
		rows[strings.TrimPrefix(f[0], "| ")] = strings.TrimSuffix(f[len(f)-1], " |")
	}
	return rows
}

// Issue 40's request goals are rows of the goals table, each judged
// against its own limit, at 16 and 64 clients.
func TestWriteRequestGoals_judgesEachGoalAgainstItsLimit(t *testing.T) {
	b := &bench{results: []*cellResult{
		cell("A-naive", 16, 100, 100*time.Millisecond, 50, 4, 2),
		cell("A-naive", 64, 100, 100*time.Millisecond, 50, 4, 2),
		cell("A-naive-http", 16, 90, 100*time.Millisecond, 0, 4, 2),
		cell("A-naive-http", 64, 80, 100*time.Millisecond, 0, 4, 2),
		cell("A-own", 16, 150, 100*time.Millisecond, 0, 4, 2),
		// 16: 1.33 × A-naive-http (pass), 0.8 × A-own (pass), PostgreSQL CPU 0.75 × (pass), WAL 1.5 × (pass).
		cell("B", 16, 120, 50*time.Millisecond, 0, 6, 1.5),
		// 64: 1.5 × A-naive-http (FAIL: 1.6 wanted), CPU 0.9 × (FAIL), WAL 3 × (FAIL).
		cell("B", 64, 120, 50*time.Millisecond, 0, 12, 1.8),
		// 16: 0.04 retries (pass), p99 1.9 × B's (pass); 64: 0.2 (FAIL), 3 × (FAIL).
		cell("B-young", 16, 100, 95*time.Millisecond, 40, 2, 1),
		cell("B-young", 64, 100, 150*time.Millisecond, 200, 2, 1),
	}}
	want := map[string]string{
		"B ≥ 1.3 × A-naive-http at 16 clients":                               "**pass**",
		"B ≥ 1.6 × A-naive-http at 64 clients":                               "**FAIL**",
		"B ≥ 0.75 × A-own at 16 clients":                                     "**pass**",
		"B / A-naive at 16 clients (the SQL-only floor: no HTTP, no Stripe)": "reported",
		"PostgreSQL CPU per request ≤ 0.8 × A-naive's at 16 clients":         "**pass**",
		"PostgreSQL CPU per request ≤ 0.8 × A-naive's at 64 clients":         "**FAIL**",
		"WAL per request ≤ 2 × A-naive's at 16 clients":                      "**pass**",
		"WAL per request ≤ 2 × A-naive's at 64 clients":                      "**FAIL**",
		"B-young ≤ 0.05 retries per request at 16 clients":                   "**pass**",
		"B-young ≤ 0.05 retries per request at 64 clients":                   "**FAIL**",
		"B-young p99 ≤ 2 × B's at 16 clients":                                "**pass**",
		"B-young p99 ≤ 2 × B's at 64 clients":                                "**FAIL**",
	}
	got := goalsOf(b)
	for goal, verdict := range want {
		v, ok := got[goal]
		if !ok {
			t.Errorf("no row %q in %v", goal, got)
			continue
		}
		if !strings.HasPrefix(v, verdict) {
			t.Errorf("%s: %s, want %s", goal, v, verdict)
		}
	}

	// Without the cells, every row says so rather than judging.
	for goal, v := range goalsOf(&bench{}) {
		if v != "–" {
			t.Errorf("%s: %s without any cell, want –", goal, v)
		}
	}
}

// A goal's verdict is its medians', and the spread of its ratio round by
// round is beside it: "within noise" when the rounds fall on both sides of
// the limit.
func TestWriteRequestGoals_saysWhenTheRoundsStraddleTheLimit(t *testing.T) {
	var results []*cellResult
	for round, v := range []struct{ b, floor float64 }{{130, 100}, {125, 100}, {140, 100}, {131, 100}, {120, 100}} {
		bb, f := cell("B", 16, v.b, 0, 0, 1, 1), cell("A-naive-http", 16, v.floor, 0, 0, 1, 1)
		bb.round, f.round = round+1, round+1
		results = append(results, bb, f)
	}
	got := goalsOf(&bench{results: results})
	row := got["B ≥ 1.3 × A-naive-http at 16 clients"]
	if !strings.HasPrefix(row, "**pass**") || !strings.Contains(row, "within noise") {
		t.Errorf("the row's verdict: %q; want the median's pass (1.30), within noise (1.20 to 1.40)", row)
	}
	var sb strings.Builder
	b := &bench{results: results}
	b.writeRequestGoals(func(f string, a ...any) { fmt.Fprintf(&sb, f, a...) }, func(ok bool) string { return map[bool]string{true: "**pass**", false: "**FAIL**"}[ok] },
		func(got, want float64) string {
			return map[bool]string{true: "**pass**", false: "**FAIL**"}[got >= want]
		})
	if !strings.Contains(sb.String(), "rounds 1.20–1.40 (5)") {
		t.Errorf("no spread of the rounds in:\n%s", sb.String())
	}
}
