package stripesim

import (
	"fmt"
	"net/url"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// BenchmarkSeed_memoryPerPayment is what a payment costs the simulator's
// memory: the live heap, after a collection, that seeding 20,000 payments
// adds, by the reconciler's benchmark's own path (Seed, the form of
// cmd/paymentsbench/reconcile.go, 12 payments every 30 s of the clock),
// reported as live-B/payment. "file" is a simulator whose state lives in a
// file (Open, as `payments dev` runs it), measured after a save. It
// measures; it does not judge:
//
//	go test -run '^$' -bench Seed_memory -benchtime 3x ./internal/stripesim/
func BenchmarkSeed_memoryPerPayment(b *testing.B) {
	const n = 20000
	for _, inFile := range []bool{false, true} {
		name := "memory"
		if inFile {
			name = "file"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				start := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
				cfg := Config{Now: func() time.Time { return start }}
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				sim := New(cfg)
				if inFile {
					var err error
					if sim, err = Open(cfg, filepath.Join(b.TempDir(), "stripesim.json")); err != nil {
						b.Fatal(err)
					}
				}
				made := make([]string, 0, n)
				for i := range n {
					if i%12 == 0 && !inFile { // Advance saves a simulator's file: 1,667 saves of a growing file
						sim.Advance(30 * time.Second)
					}
					s, err := sim.Seed("/v1/payment_intents", url.Values{"amount": {"2000"}, "currency": {"usd"},
						"payment_method": {"pm_card_visa"}, "payment_method_types[0]": {"card"}, "confirm": {"true"},
						"metadata[payment]": {fmt.Sprintf("pay_%026d", i)}}) // as long as an ids.New("pay")
					if err != nil {
						b.Fatal(err)
					}
					made = append(made, s.ID)
				}
				sim.mu.Lock()
				sim.changed() // Seed writes no file: the save below does, as a request's would
				sim.mu.Unlock()
				sim.save()
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "live-B/payment")
				runtime.KeepAlive(made)
				runtime.KeepAlive(sim)
				sim.Close()
			}
		})
	}
}
