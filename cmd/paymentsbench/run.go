package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/example/payments/internal/db"
)

// cellResult is one scenario at one client count.
type cellResult struct {
	scenario string
	clients  int
	conns    int // database pool size
	round    int

	// The measured window (after the warm-up).
	window    time.Duration
	requests  int // completed in the window
	rps       float64
	p50, p95  time.Duration
	p99, pmax time.Duration
	cpu       [2]cpuSample // at the window's start and end

	// The whole cell, warm-up included: per-request costs divide by total.
	total    int
	outcomes map[string]int
	errs     map[string]int    // unexpected errors, by message (first 120 characters)
	client   clientCounts      // statements, round trips, transactions, as the client sent them
	server   serverCounters    // deltas
	retries  uint64            // db.WithTx retries after serialization failures or deadlocks
	bg       *backgroundResult // F only

	// The scale run's cells (scale.go): the preloaded size, the keys the
	// database held when the cell began, buffers and sizes.
	size     int
	liveKeys int64
	scale    scaleCounters
}

func (r *cellResult) perReq(n float64) float64 {
	if r.total == 0 {
		return 0
	}
	return n / float64(r.total)
}

func (r *cellResult) outcomeString() string {
	keys := make([]string, 0, len(r.outcomes))
	for k := range r.outcomes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, r.outcomes[k]))
	}
	return strings.Join(parts, ", ")
}

// op runs one request for a client and says how it ended ("201",
// "201 replayed", "409", "ok", ...). An error is a failure of the
// benchmark or of the service, counted apart.
type op func(ctx context.Context, client int, rng *rand.Rand) (string, error)

// sample is one completed request.
type sample struct {
	end     time.Duration // since the cell started
	latency time.Duration
}

// load is what a cell's clients recorded.
type load struct {
	start    time.Time
	mu       sync.Mutex
	samples  [][]sample // per client
	outcomes map[string]int
	errs     map[string]int
}

func newLoad(clients int) *load {
	return &load{start: time.Now(), samples: make([][]sample, clients), outcomes: map[string]int{}, errs: map[string]int{}}
}

func (l *load) record(outcome string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		msg := err.Error()
		if len(msg) > 120 {
			msg = msg[:120]
		}
		l.errs[msg]++
		l.outcomes["error"]++
		return
	}
	l.outcomes[outcome]++
}

// driveClosedLoop runs clients that each send a request, wait for its
// answer and send the next, until the warm-up and the window have passed.
// onWindow is called when the window starts and when it ends.
func driveClosedLoop(ctx context.Context, clients int, warmup, window time.Duration, do op, onWindow func()) *load {
	l := newLoad(clients)
	start := l.start
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			labelGoroutine(ctx, partLoad)
			rng := rand.New(rand.NewPCG(uint64(i)+1, uint64(start.UnixNano())))
			for !stop.Load() && ctx.Err() == nil {
				t0 := time.Now()
				outcome, err := do(ctx, i, rng)
				t1 := time.Now()
				l.samples[i] = append(l.samples[i], sample{end: t1.Sub(start), latency: t1.Sub(t0)})
				l.record(outcome, err)
			}
		}()
	}
	sleepCtx(ctx, warmup)
	onWindow()
	sleepCtx(ctx, window)
	onWindow()
	stop.Store(true)
	wg.Wait()
	return l
}

// driveRounds is the same-key storm: in each round every client sends the
// same new key at once; the next round starts when all have answered.
func driveRounds(ctx context.Context, clients int, warmup, window time.Duration, do func(ctx context.Context, client, round int, rng *rand.Rand) (string, error), onWindow func()) *load {
	l := newLoad(clients)
	start := l.start
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		labelGoroutine(ctx, partLoad)
		rngs := make([]*rand.Rand, clients)
		for i := range rngs {
			rngs[i] = rand.New(rand.NewPCG(uint64(i)+1, uint64(start.UnixNano())))
		}
		for round := 0; !stop.Load() && ctx.Err() == nil; round++ {
			var wg sync.WaitGroup
			for i := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					t0 := time.Now()
					outcome, err := do(ctx, i, round, rngs[i])
					t1 := time.Now()
					l.samples[i] = append(l.samples[i], sample{end: t1.Sub(start), latency: t1.Sub(t0)})
					l.record(outcome, err)
				}()
			}
			wg.Wait()
		}
	}()
	sleepCtx(ctx, warmup)
	onWindow()
	sleepCtx(ctx, window)
	onWindow()
	stop.Store(true)
	<-done
	return l
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// scenario is what a cell needs from a scenario: a database, a set-up that
// returns the load (and how it ends), and a teardown that closes its pool.
type scenario struct {
	dbname string
	conns  int
	tracer *sqlCounter
	// do or doRound (D) is the request.
	do      op
	doRound func(ctx context.Context, client, round int, rng *rand.Rand) (string, error)
	close   func()
	// background is F's worker and receiver, measured after the window.
	background *background
}

// runCell resets the database, sets the scenario up, runs its load and
// collects every counter.
func (b *bench) runCell(ctx context.Context, name string, clients int) (*cellResult, error) {
	b.log.Info("running", "scenario", name, "clients", clients)
	var sc *scenario
	var err error
	if b.scaleTarget != nil {
		sc, err = b.setupScale(ctx, b.scaleTarget, name, clients)
	} else {
		sc, err = b.setup(ctx, name, clients)
	}
	if err != nil {
		return nil, err
	}
	closed := false
	defer func() {
		if !closed {
			sc.close()
		}
	}()
	res := &cellResult{scenario: name, clients: clients, conns: sc.conns, window: b.o.duration}
	before, err := b.serverCounters(ctx, sc.dbname)
	if err != nil {
		return nil, err
	}
	var scaleBefore scaleCounters
	if b.scaleTarget != nil {
		if scaleBefore, err = b.readScaleCounters(ctx, sc.dbname); err != nil {
			return nil, err
		}
	}
	clientBefore := sc.tracer.snapshot()
	retriesBefore := db.SerializationRetries()

	profiling := b.o.profileCell == fmt.Sprintf("%s:%d", name, clients)
	if profiling && sc.background != nil && sc.background.deferred {
		// G's window is B's request (B's profile shows it): G's profile
		// is of its drain, the background work alone (measureAlone).
		sc.background.profileOut, profiling = b.o.profileOut, false
	}
	windows := 0
	var windowEdges [2]time.Time
	onWindow := func() {
		res.cpu[windows] = sampleCPU(b.server.PID())
		windowEdges[windows] = time.Now()
		if profiling {
			// The allocations so far, at the window's edges: the window's
			// own are their difference (go tool pprof -diff_base).
			writeAllocs(fmt.Sprintf("%s.allocs%d", b.o.profileOut, windows))
		}
		if profiling && windows == 0 {
			if f, err := os.Create(b.o.profileOut); err == nil {
				if pprof.StartCPUProfile(f) != nil {
					f.Close()
					profiling = false
				}
			}
		}
		if profiling && windows == 1 {
			pprof.StopCPUProfile()
			b.log.Info("wrote a CPU profile", "file", b.o.profileOut)
		}
		windows++
	}
	var l *load
	if sc.doRound != nil {
		l = driveRounds(ctx, clients, b.o.warmup, b.o.duration, sc.doRound, onWindow)
	} else {
		l = driveClosedLoop(ctx, clients, b.o.warmup, b.o.duration, sc.do, onWindow)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if sc.background != nil {
		if res.bg, err = sc.background.measure(ctx, windowEdges[0], windowEdges[1]); err != nil {
			return nil, fmt.Errorf("measuring the background work: %w", err)
		}
	}
	res.retries = db.SerializationRetries() - retriesBefore
	clientAfter := sc.tracer.snapshot()
	res.client = clientCounts{
		statements:   clientAfter.statements - clientBefore.statements,
		roundTrips:   clientAfter.roundTrips - clientBefore.roundTrips,
		transactions: clientAfter.transactions - clientBefore.transactions,
	}
	sc.close()
	closed = true
	if err := b.settle(ctx, sc.dbname); err != nil {
		return nil, err
	}
	after, err := b.serverCounters(ctx, sc.dbname)
	if err != nil {
		return nil, err
	}
	res.server = serverCounters{
		statements: after.statements - before.statements,
		commits:    after.commits - before.commits,
		rollbacks:  after.rollbacks - before.rollbacks,
		walSyncs:   after.walSyncs - before.walSyncs,
		walRecords: after.walRecords - before.walRecords,
		walFPI:     after.walFPI - before.walFPI,
		walBytes:   after.walBytes - before.walBytes,
	}
	if !b.pgss {
		res.server.statements = -1
	}
	if b.scaleTarget != nil {
		scaleAfter, err := b.readScaleCounters(ctx, sc.dbname)
		if err != nil {
			return nil, err
		}
		res.scale = scaleAfter.minus(scaleBefore)
	}
	res.outcomes, res.errs = l.outcomes, l.errs
	res.summarize(l, b.o.duration)
	if b.o.topSQL > 0 && b.pgss {
		b.logTopSQL(ctx, sc.dbname, b.o.topSQL, res.total)
	}
	return res, nil
}

// summarize computes throughput and latency over the window.
func (r *cellResult) summarize(l *load, window time.Duration) {
	from, to := r.cpu[0].at.Sub(l.start), r.cpu[1].at.Sub(l.start)
	var lat []time.Duration
	for _, s := range l.samples {
		r.total += len(s)
		for _, x := range s {
			if x.end >= from && x.end < to {
				lat = append(lat, x.latency)
			}
		}
	}
	r.requests = len(lat)
	if r.window = to - from; r.window <= 0 {
		r.window = window
	}
	r.rps = float64(r.requests) / r.window.Seconds()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	r.p50, r.p95, r.p99, r.pmax = q(0.50), q(0.95), q(0.99), lat[len(lat)-1]
}

func fmtMs(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000) }

// writeAllocs writes the process's allocation profile so far to file,
// after a collection (the profile is as of the last one).
func writeAllocs(file string) {
	runtime.GC()
	f, err := os.Create(file)
	if err != nil {
		return
	}
	defer f.Close()
	_ = pprof.Lookup("allocs").WriteTo(f, 0)
}
