package chaostest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// The bounds of docs/API.md section 11.
const (
	haMaxGap       = 15 * time.Second // writes start again
	haMaxLocked    = 5 * time.Second  // a key in flight is free again after the new primary takes writes
	haMaxReadyDown = 5 * time.Second  // /readyz answers 503 after the process cannot commit
)

// HAPromise is one row of docs/CHAOS-HA.md's table: a promise, what the run
// measured, and whether that keeps it.
type HAPromise struct {
	Promise  string
	Measured string
	Pass     bool
}

// Promises judges the run against section 11.
func (h *HA) Promises(rep *Report) []HAPromise {
	var out []HAPromise
	count := func(rules ...string) (n int, first string) {
		for _, v := range rep.Violations {
			if slices.Contains(rules, v.Rule) {
				if n == 0 {
					first = v.String()
				}
				n++
			}
		}
		return n, first
	}
	row := func(promise string, n int, first, what string) {
		m := fmt.Sprintf("%d violations %s", n, what)
		if n > 0 {
			m += "; the first: " + first
		}
		out = append(out, HAPromise{Promise: promise, Measured: m, Pass: n == 0})
	}
	n, first := count("final-answer", "stored-answer", "replay-identical", "expected-answer", "key-echo", "api-budget")
	row("no request answered 201 (or any stored answer) is lost", n, first,
		fmt.Sprintf("(final-answer, stored-answer, replay-identical, expected-answer, key-echo, api-budget); %d payments, %d attempts",
			rep.World["payments"], rep.Counters["attempts"]))
	n, first = count("executed-twice", "race", "refund")
	row("none is executed twice", n, first, "(executed-twice, race, refund)")
	n, first = count("stripe-pi", "stripe-request")
	row("one PaymentIntent per payment, Stripe called once per child key", n, first, "(stripe-pi, stripe-request)")
	out = append(out, HAPromise{Promise: "the invariant checker, every rule", Measured: fmt.Sprintf("%d violations", len(rep.Violations)),
		Pass: len(rep.Violations) == 0})

	n500, byCode := h.total500()
	unavailable, other503 := h.total503()
	m := fmt.Sprintf("%d answers 500 in the run", n500)
	if n500 > 0 {
		var codes []string
		for _, c := range slices.Sorted(maps.Keys(byCode)) {
			codes = append(codes, fmt.Sprintf("%s: %d", c, byCode[c]))
		}
		m += " (" + strings.Join(codes, ", ") + ")"
	}
	m += fmt.Sprintf("; %d answers 503 service_unavailable, %d other 503s", unavailable, other503)
	out = append(out, HAPromise{Promise: "while no commit is possible: 503 service_unavailable, never a 500", Measured: m, Pass: n500 == 0})

	for _, r := range h.Results {
		if r.Err != "" {
			out = append(out, HAPromise{Promise: r.Fault, Measured: "not carried out: " + r.Err})
			continue
		}
		gap := r.ServiceBack.Sub(r.Reference)
		probeGap := r.ProbeBack.Sub(r.Reference)
		out = append(out, HAPromise{
			Promise: fmt.Sprintf("%s: writes start again within %v of %s", r.Fault, haMaxGap, refWord(r)),
			Measured: fmt.Sprintf("first 2xx of the service %s after it, first commit through haproxy %s (%s on %s; new primary %s); during it %d x 503 service_unavailable, %d other 503s, %d x 5xx, %d connection errors, %d x 409",
				secs(gap), secs(probeGap), r.Fault, r.Node, r.NewPrimary, r.Unavailable503, r.Other503, r.Status500, r.ConnErrors, r.InUse409),
			Pass: !r.ServiceBack.IsZero() && gap <= haMaxGap && r.WritesBack.Sub(r.Reference) <= haMaxGap,
		})
		lm := fmt.Sprintf("%d keys locked across the outage; the last free %s after the first commit (the probe's or the service's)", r.LockedKeys, secs(r.LongestLocked))
		if r.LockCutOff {
			lm = fmt.Sprintf("%d keys locked across the outage; some still locked %s after the first commit (the measurement's end)", r.LockedKeys, secs(r.LongestLocked))
		}
		out = append(out, HAPromise{Promise: fmt.Sprintf("%s: a key in flight is free within %v of the new primary taking writes", r.Fault, haMaxLocked),
			Measured: lm, Pass: !r.LockCutOff && r.LongestLocked <= haMaxLocked})
		// /readyz: 503 within 5 s of the process becoming unable to commit,
		// unless writes came back within those 5 s.
		outage := r.WritesBack.Sub(r.OutageStart)
		var parts []string
		pass := true
		for _, name := range slices.Sorted(maps.Keys(r.ReadyDown)) {
			down, up := r.ReadyDown[name], r.ReadyUp[name]
			ok := (down >= 0 && down <= haMaxReadyDown) || outage <= haMaxReadyDown
			pass = pass && ok && up >= 0
			d := "never"
			if down >= 0 {
				d = secs(down)
			}
			u := "not seen"
			if up >= 0 {
				u = secs(up)
			}
			parts = append(parts, fmt.Sprintf("%s: 503 %s after the commits stopped, 200 again %s after the first commit", name, d, u))
		}
		out = append(out, HAPromise{Promise: fmt.Sprintf("%s: /readyz answers 503 within %v of the process being unable to commit, 200 again once it can", r.Fault, haMaxReadyDown),
			Measured: fmt.Sprintf("no commit for %s (from %s after the fault); %s", secs(outage), secs(r.OutageStart.Sub(r.At)), strings.Join(parts, "; ")), Pass: pass && len(parts) > 0})
	}
	return out
}

func refWord(r FaultResult) string {
	if r.LeaseExpiry.IsZero() {
		return "the fault"
	}
	return "the lease running out"
}

// HAFailed tells whether a promise failed.
func HAFailed(ps []HAPromise) bool {
	return slices.ContainsFunc(ps, func(p HAPromise) bool { return !p.Pass })
}

// HAMarkdown is docs/CHAOS-HA.md: how the run was made, the table, and each
// fault's timeline.
func (h *HA) HAMarkdown(rep *Report, ps []HAPromise, formation string) string {
	var b strings.Builder
	b.WriteString("# Chaos against a highly available PostgreSQL (`make chaos-ha`)\n\n")
	b.WriteString("Written by `make chaos-ha` (cmd/payments/chaos_ha_test.go, cmd/payments/chaostest/ha.go); do not edit by hand.\n\n")
	fmt.Fprintf(&b, "The chaos suite's clients, two `payments serve`, two `payments worker` and the Stripe simulator ran against "+
		"`make ha`'s formation (deploy/ha: three etcd members, three PostgreSQL 15 nodes under Patroni with "+
		"`synchronous_mode_strict`, haproxy on Patroni's `OPTIONS /primary`), %s. During the load, one fault after the other, "+
		"each once the formation was whole again (a leader, a synchronous standby, a third node): %s. "+
		"A probe committed a row through haproxy every 200 ms (an upsert into a table of its own, 1 s deadline); every attempt of the clients, "+
		"every process's `/readyz` (every 250 ms) and the live key locks (every 200 ms) were recorded. PASS and FAIL are computed "+
		"by the program from these records against docs/API.md section 11.\n\n",
		formation, strings.Join(h.Faults, "; "))
	fmt.Fprintf(&b, "Run: %s; seed %d; %d clients, think %v, lock timeout %v (serve-a; the others x2, x0.5, x1.5), simulator faults %v/s, "+
		"no service crashes (the faults are the database's); load for %s, %s in all.\n\n",
		rep.Started.UTC().Format("2006-01-02 15:04 UTC"), rep.Config.Seed, rep.Config.Clients, rep.Config.Think, rep.Config.LockTimeout,
		rep.Config.FaultRate, rep.Chaos.Round(time.Second), rep.Total.Round(time.Second))
	b.WriteString("| promise (docs/API.md section 11) | measured | verdict |\n|---|---|---|\n")
	for _, p := range ps {
		v := "FAIL"
		if p.Pass {
			v = "PASS"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", mdCell(p.Promise), mdCell(p.Measured), v)
	}
	b.WriteString("\n## Each fault\n\n")
	for _, r := range h.Results {
		fmt.Fprintf(&b, "- %s\n", mdCell(r.Summary()))
	}
	b.WriteString("\n## The run's counts\n\n")
	b.WriteString(rep.Markdown())
	b.WriteString("\n")
	return b.String()
}

func mdCell(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", "\\|"), "\n", " ") }
