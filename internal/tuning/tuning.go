// Package tuning holds the process-wide runtime settings the service runs
// with, so that its commands and its benchmark apply the same ones.
package tuning

import (
	"os"
	"runtime/debug"
	"strconv"
)

// GCPercent is the garbage collector's target, GOGC, unless the environment
// sets GOGC: collect when the heap has grown by four times the live heap
// (Go's default is once). The service's live heap is small (its key filter
// and caches: tens of MiB), and at Go's default the collector took about a
// fifth of the service's CPU on new payments (docs/BENCHMARKS.md); the
// price is memory, a few times that small heap.
const GCPercent = 400

// Apply sets GCPercent unless the environment sets GOGC, and returns the
// value in force.
func Apply() string {
	if v, ok := os.LookupEnv("GOGC"); ok {
		return v
	}
	debug.SetGCPercent(GCPercent)
	return strconv.Itoa(GCPercent)
}
