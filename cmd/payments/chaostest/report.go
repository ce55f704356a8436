package chaostest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// Stats are named counters, safe for concurrent use.
type Stats struct {
	mu sync.Mutex
	n  map[string]int64
}

// Add adds d to the counter name.
func (s *Stats) Add(name string, d int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[string]int64{}
	}
	s.n[name] += d
}

// Snapshot returns a copy of the counters.
func (s *Stats) Snapshot() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.n)
}

// Report is what a run did and found.
type Report struct {
	Config     Config
	Started    time.Time
	Chaos      time.Duration // clients starting requests, faults, crashes
	Drain      time.Duration // clients finishing their last requests, the replay sweep
	Settle     time.Duration // the background work settling
	Total      time.Duration
	LogDir     string
	Counters   map[string]int64 // from the clients, faults and crashes
	World      map[string]int64 // counted in the end state
	Violations []Violation
}

// Failed tells whether the run found any violation.
func (r *Report) Failed() bool { return len(r.Violations) > 0 }

// countWorld counts the end state for the report.
func countWorld(s *Snapshot, records []Record) map[string]int64 {
	w := map[string]int64{}
	for _, p := range s.Payments {
		w["payments: "+p.Status]++
		w["payments"]++
		w["money captured (minor units)"] += p.AmountCaptured
		w["money refunded (minor units)"] += p.AmountRefunded
	}
	for _, re := range s.Refunds {
		w["refunds: "+re.Status]++
	}
	for _, pi := range s.Sim.PaymentIntents {
		w["Stripe PaymentIntents: "+pi.Status]++
	}
	w["Stripe refunds"] = int64(len(s.Sim.Refunds))
	w["merchant events"] = int64(len(s.Events))
	w["receipts sent"] = 0
	for _, re := range s.Receipts {
		if re.Sent {
			w["receipts sent"]++
		}
	}
	for _, j := range s.RiverJobs {
		w["River jobs"]++
		if j.Attempt > 1 {
			w["River jobs run more than once (idempotent workers)"]++
		}
	}
	w["idempotency keys"] = int64(len(s.Keys))
	for _, r := range s.Sim.Requests {
		w["Stripe requests"]++
		if r.Replayed {
			w["Stripe requests answered as replays"]++
		}
		if r.Fault != "" {
			w["Stripe requests hit by a fault: "+string(r.Fault)]++
		}
	}
	for _, r := range records {
		w["logical requests"]++
		w["replays checked"] += int64(len(r.Replays))
		w["double-click answers checked"] += int64(max(len(r.Finals)-1, 0))
		w["reuses checked (422)"] += int64(len(r.Reuses))
		if len(r.Finals) > 0 {
			w[fmt.Sprintf("final answers: %d", r.Finals[0].Status)]++
		}
	}
	return w
}

// String renders the report for a person: the run's settings, the counts,
// and every violation.
func (r *Report) String() string {
	var b strings.Builder
	cfg := r.Config
	fmt.Fprintf(&b, "chaos run, seed %d (replay with CHAOS_SEED=%d)\n", cfg.Seed, cfg.Seed)
	fmt.Fprintf(&b, "  duration %v, %d clients (think %v), %.1f faults/s, crash event every ~%v, lock timeout %v, worker kills %v\n",
		cfg.Duration, cfg.Clients, cfg.Think, cfg.FaultRate, cfg.CrashInterval, cfg.LockTimeout, cfg.KillWorker)
	fmt.Fprintf(&b, "  chaos %v, drain %v, settle %v, total %v\n", r.Chaos.Round(time.Millisecond), r.Drain.Round(time.Millisecond),
		r.Settle.Round(time.Millisecond), r.Total.Round(time.Millisecond))
	if r.LogDir != "" {
		fmt.Fprintf(&b, "  process logs: %s\n", r.LogDir)
	}
	fmt.Fprintf(&b, "\nsummary\n")
	for _, row := range r.summary() {
		fmt.Fprintf(&b, "  %-46s %d\n", row.name, row.n)
	}
	section := func(title string, m map[string]int64) {
		fmt.Fprintf(&b, "\n%s\n", title)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			fmt.Fprintf(&b, "  %-70s %d\n", k, m[k])
		}
	}
	section("counters (clients, faults, crashes)", r.Counters)
	section("end state", r.World)
	fmt.Fprintf(&b, "\nviolations: %d\n", len(r.Violations))
	for i, v := range r.Violations {
		if i == 200 {
			fmt.Fprintf(&b, "  ... and %d more\n", len(r.Violations)-i)
			break
		}
		fmt.Fprintf(&b, "  %s\n", v)
	}
	return b.String()
}

// Markdown is the summary as a table for the docs.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| %s, %d clients, seed %d | |\n|---|---:|\n", r.Config.Duration, r.Config.Clients, r.Config.Seed)
	for _, row := range r.summary() {
		fmt.Fprintf(&b, "| %s | %d |\n", row.name, row.n)
	}
	return b.String()
}

type summaryRow struct {
	name string
	n    int64
}

// summary is the few figures that tell what a run survived and found.
func (r *Report) summary() []summaryRow {
	c, w := r.Counters, r.World
	sum := func(m map[string]int64, prefix string) int64 {
		var n int64
		for k, v := range m {
			if strings.HasPrefix(k, prefix) {
				n += v
			}
		}
		return n
	}
	return []summaryRow{
		{"logical requests", w["logical requests"]},
		{"HTTP attempts", c["attempts"]},
		{"retries", c["retries"]},
		{"409 (key in use)", c["retriable: 409 in use"]},
		{"503 (Stripe unavailable)", c["retriable: 503 unavailable"]},
		{"other retriable (5xx, 429, connection lost)", sum(c, "retriable: ") - c["retriable: 409 in use"] - c["retriable: 503 unavailable"]},
		{"faults injected", sum(c, "faults armed: ") - c["faults armed: delay longer than the lock timeout"]},
		{"Stripe requests hit by a fault", sum(w, "Stripe requests hit by a fault: ")},
		{"crashes at a failpoint", sum(c, "crashes at failpoint: ")},
		{"SIGKILLs", sum(c, "SIGKILLs: ")},
		{"graceful restarts", sum(c, "graceful restarts: ")},
		{"restarts", c["restarts"]},
		{"payments made", w["payments"]},
		{"refunds made", w["refunds: succeeded"]},
		{"replays checked (byte-identical)", w["replays checked"] + w["double-click answers checked"]},
		{"duplicate charges or refunds found", r.duplicates()},
		{"customers charged twice without their money back", r.violationsOf("charged-twice")},
		{"violations", int64(len(r.Violations))},
	}
}

// duplicates counts the violations that mean money moved more (or other)
// than once: a request executed twice, a payment with more than one
// PaymentIntent or a PaymentIntent without a payment, refunds that disagree
// with Stripe's, a race with two winners.
func (r *Report) duplicates() int64 {
	var n int64
	for _, v := range r.Violations {
		switch v.Rule {
		case "executed-twice", "stripe-pi", "refund", "race", "charged-twice", "duplicate-refund":
			n++
		}
	}
	return n
}

// violationsOf counts the violations of one rule.
func (r *Report) violationsOf(rule string) int64 {
	var n int64
	for _, v := range r.Violations {
		if v.Rule == rule {
			n++
		}
	}
	return n
}
