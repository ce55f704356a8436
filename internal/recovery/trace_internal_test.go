package recovery

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/telemetry"
)

// With tracing off (no OTLP endpoint), the engine's tracing starts no span
// and allocates nothing: every phase of every request goes through these
// helpers, so they must cost nothing measurable (API.md section 9).
func TestTrace_offCostsNoSpanAndNoAllocation(t *testing.T) {
	// Not parallel: testing.AllocsPerRun counts the whole process's
	// allocations, so it runs while no parallel test does (the parallel
	// tests of a package wait until its serial ones are done). CI once
	// counted 148 allocations in 1000 runs when this test ran in parallel
	// and read runtime.MemStats itself: other tests' allocations.
	require.False(t, telemetry.Enabled(), "no test in this package sets tracing up")
	ctx := context.Background()
	a := &attempt{key: &Key{ID: uuid.New(), Flow: "create_payment", lockToken: 1, traceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	phase := Phase{step: "payment_intent"}
	started := time.Now()

	allocs := testing.AllocsPerRun(1000, func() {
		phaseCtx, end := a.tracePhase(ctx, Started, phase)
		end(nil)
		resumeCtx, endResume := traceResume(ctx, a.key, "completer", started)
		endResume(nil)
		if phaseCtx != ctx || resumeCtx != ctx {
			t.Fatal("a context was wrapped")
		}
	})
	require.Zero(t, allocs, "a phase and a resumption, untraced, allocate nothing")
}
