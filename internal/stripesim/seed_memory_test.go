package stripesim_test

import (
	"fmt"
	"net/url"
	"runtime"
	"testing"
	"time"

	"github.com/example/payments/internal/stripesim"
)

// BenchmarkSeed_memoryPerPayment is what a payment costs the simulator's
// memory: the live heap, after a collection, that seeding 20,000 payments
// adds, by the reconciler's benchmark's own path (Seed, the form of
// cmd/paymentsbench/reconcile.go, 12 payments every 30 s of the clock),
// reported as live-B/payment. It measures; it does not judge (go test
// -run '^$' -bench Seed_memory ./internal/stripesim/).
func BenchmarkSeed_memoryPerPayment(b *testing.B) {
	const n = 20000
	for b.Loop() {
		start := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
		sim := stripesim.New(stripesim.Config{Now: func() time.Time { return start }})
		made := make([]string, 0, n)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range n {
			if i%12 == 0 {
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
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "live-B/payment")
		runtime.KeepAlive(made)
		runtime.KeepAlive(sim)
		sim.Close()
	}
}
