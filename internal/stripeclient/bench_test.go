package stripeclient_test

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// BenchmarkCreatePaymentIntent is a new payment's one call to Stripe, as B
// makes it: stripe-go through this package's backend, over loopback HTTP, to
// the simulator in the same process (whose own cost is in the figures, the
// same before and after a change here). Its allocations per call and its
// CPU time per call (cpu-ns/op: the process's user and system time, which
// other processes on a shared machine move far less than the wall clock's
// ns/op) measure the client's waste (issue 40).
func BenchmarkCreatePaymentIntent(b *testing.B) {
	f := setup(b)
	ctx := context.Background()
	b.ReportAllocs()
	n := 0
	cpu0 := processCPU(b)
	for b.Loop() {
		n++
		if _, err := f.client.CreatePaymentIntent(ctx, "bench-"+strconv.Itoa(n), payment("pm_card_visa")); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(n), "cpu-ns/op")
}

// processCPU is the CPU time the process has used, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
