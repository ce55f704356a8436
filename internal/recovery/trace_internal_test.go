package recovery

import (
	"context"
	"runtime"
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
	t.Parallel()
	require.False(t, telemetry.Enabled(), "no test in this package sets tracing up")
	ctx := context.Background()
	a := &attempt{key: &Key{ID: uuid.New(), Flow: "create_payment", lockToken: 1, traceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	phase := Phase{step: "payment_intent"}
	started := time.Now()

	// testing.AllocsPerRun refuses to run in a package whose tests run in
	// parallel; the process's count is read instead, to which other
	// goroutines can only add.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 1000 {
		phaseCtx, end := a.tracePhase(ctx, Started, phase)
		end(nil)
		resumeCtx, endResume := traceResume(ctx, a.key, "completer", started)
		endResume(nil)
		if phaseCtx != ctx || resumeCtx != ctx {
			t.Fatal("a context was wrapped")
		}
	}
	runtime.ReadMemStats(&after)
	require.Less(t, after.Mallocs-before.Mallocs, uint64(100), "1000 phases and resumptions, untraced, allocate (next to) nothing")
}
