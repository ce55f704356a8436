package main

import (
	"context"
	"net/http"
	"runtime/pprof"
)

// The parts of the benchmark's process, as the "part" label of its CPU
// profiles, so that `go tool pprof -tags` splits a profile's CPU between
// them (make bench prints it under "Where the CPU goes"): the service under
// test, the Stripe simulator, the load generator, and F's and G's worker
// and merchant receiver. A goroutine inherits the labels of the one that
// starts it: the connections stripeclient dials from a request are the
// service's, those the load generator dials are its own. No label covers
// the HTTP servers' reading of each request and their last write after the
// handler returns, pgxpool's own goroutines, and the Go runtime (the
// garbage collector, the scheduler). Labels cost one small allocation per
// request in a handler and nothing in a client's loop.
const (
	partService   = "service"
	partSimulator = "stripe simulator"
	partLoad      = "load generator"
	partWorker    = "worker"
	partReceiver  = "merchant receiver"
)

// labelled runs h with its goroutine labelled part.
func labelled(part string, h http.Handler) http.Handler {
	labels := pprof.Labels("part", part)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pprof.Do(r.Context(), labels, func(context.Context) { h.ServeHTTP(w, r) })
	})
}

// labelGoroutine labels the calling goroutine, and those it starts, part.
func labelGoroutine(ctx context.Context, part string) {
	pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels("part", part)))
}
