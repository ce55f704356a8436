package chaostest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/example/payments/internal/app"
	"github.com/example/payments/internal/worker"
)

// failpointNames are every failpoint of the service's flows, as their
// declarations give them (README, "Recovery points and failpoints of each
// flow"). before_commit:started and the others shared by flows fire in
// whichever flow reaches them first.
var failpointNames = func() []string {
	flows, err := app.DeclaredFlows()
	if err != nil {
		panic(err) // the service itself would refuse to start
	}
	var names []string
	for _, f := range flows {
		for _, name := range f.Failpoints() {
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	return names
}()

// crasher disturbs the service's processes every so often until ctx ends:
// it restarts an API instance with a failpoint and waits for it to fire,
// SIGKILLs an instance or the worker, or restarts one gracefully. Every
// process is started again at once (API instances on their address), and
// at most one event is under way at a time, so one instance is usually up.
type crasher struct {
	cluster  *Cluster
	cfg      Config
	rng      *rand.Rand
	stats    *Stats
	logf     func(string, ...any)
	mu       sync.Mutex
	problems []Violation // processes that died or stopped in a way no one asked for
	// cutSends is set when a worker's graceful stop reached its shutdown
	// timeout and cancelled the jobs still running: a receipt cut there,
	// after the mail server accepted it, is sent again, as after a SIGKILL.
	cutSends atomic.Bool
}

// terminate stops in with SIGTERM, which must drain and exit 0 within 15 s,
// and notes whether a worker had to cancel running jobs to do so.
func (cr *crasher) terminate(in *Instance) {
	if !in.Terminate(15 * time.Second) {
		cr.problem(in, "did not exit cleanly within 15s of SIGTERM")
	}
	if cr.cluster.IsWorker(in) && strings.Contains(in.LogTail(1000), worker.CancelledJobsMessage) {
		cr.cutSends.Store(true)
		cr.stats.Add("worker stops that cancelled running jobs", 1)
	}
	cr.stats.Add("graceful restarts: "+in.Name, 1)
}

// armFor is how long a failpoint may wait for a request to reach it.
const armFor = 10 * time.Second

func (cr *crasher) run(ctx context.Context) {
	if cr.cfg.CrashInterval <= 0 {
		return
	}
	for {
		wait := time.Duration((0.5 + cr.rng.Float64()) * float64(cr.cfg.CrashInterval))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		cr.reviveDead()
		serve := cr.cluster.Serve[cr.rng.IntN(len(cr.cluster.Serve))]
		switch r := cr.rng.Float64(); {
		case r < 0.45:
			cr.failpointRestart(ctx, serve, cr.failpointAction(serve))
		case r < 0.75:
			cr.sigkill(serve)
		case r < 0.88 && cr.cfg.KillWorker:
			if worker := cr.worker(); cr.rng.IntN(2) == 0 {
				cr.sigkill(worker)
			} else {
				cr.failpointRestart(ctx, worker, "crash")
			}
		case r < 0.88:
			// The completer drives flows in the workers: fail or stall it
			// there, restarting it gracefully (see Config.KillWorker).
			worker := cr.worker()
			cr.failpointRestart(ctx, worker, []string{"error", cr.sleepAction(worker)}[cr.rng.IntN(2)])
		default:
			all := cr.cluster.Instances()
			cr.gracefulRestart(all[cr.rng.IntN(len(all))])
		}
	}
}

// failpointAction is mostly a crash; sometimes an injected error, or a
// sleep longer than the lock timeout after which the holder must find its
// lock taken over and its commit fenced off.
func (cr *crasher) failpointAction(in *Instance) string {
	switch r := cr.rng.Float64(); {
	case r < 0.7:
		return "crash"
	case r < 0.85:
		return "error"
	default:
		return cr.sleepAction(in)
	}
}

// sleepAction stalls a holder in in past its own lock timeout.
func (cr *crasher) sleepAction(in *Instance) string {
	return fmt.Sprintf("sleep:%d", (in.LockTimeout + time.Second).Milliseconds())
}

// worker picks one of the workers.
func (cr *crasher) worker() *Instance {
	return cr.cluster.Workers[cr.rng.IntN(len(cr.cluster.Workers))]
}

// stop ends the process in in: a SIGKILL, or for the worker when it may
// not be killed, a graceful stop.
func (cr *crasher) stop(in *Instance) {
	if cr.cluster.IsWorker(in) && !cr.cfg.KillWorker {
		cr.terminate(in)
		return
	}
	in.Kill()
	cr.stats.Add("SIGKILLs: "+in.Name, 1)
}

// failpointRestart restarts in with a random failpoint and waits until it
// fires (a crash ends the process) or armFor passes, then restarts in clean.
func (cr *crasher) failpointRestart(ctx context.Context, in *Instance, action string) {
	name := failpointNames[cr.rng.IntN(len(failpointNames))]
	cr.stop(in)
	if !cr.start(in, name+"="+action) {
		return
	}
	fired := false
	select {
	case <-in.Exited():
		died, _, how := in.Died()
		if died && action == "crash" && in.DiedOfSIGKILL() {
			cr.stats.Add("crashes at failpoint: "+name, 1)
			fired = true
		} else {
			cr.problem(in, "exited with %s while running with failpoint %s=%s", how, name, action)
		}
	case <-time.After(armFor):
	case <-ctx.Done():
	}
	if !fired && action == "crash" {
		cr.stats.Add("failpoints armed but not reached in time", 1)
	}
	if !fired && action != "crash" {
		cr.stats.Add("failpoints armed: "+action[:min(len(action), 5)]+" ("+in.Name+")", 1)
	}
	if !fired {
		cr.stop(in)
	}
	cr.start(in, "")
}

// sigkill kills in outright and starts it again after a short outage.
func (cr *crasher) sigkill(in *Instance) {
	in.Kill()
	cr.stats.Add("SIGKILLs: "+in.Name, 1)
	time.Sleep(time.Duration(cr.rng.IntN(500)) * time.Millisecond)
	cr.start(in, "")
}

// gracefulRestart stops in with SIGTERM, which must drain and exit 0.
func (cr *crasher) gracefulRestart(in *Instance) {
	cr.terminate(in)
	cr.start(in, "")
}

// reviveDead restarts, clean, any process that died by itself: a crash
// failpoint that fired late (counted), or anything else (a problem).
func (cr *crasher) reviveDead() {
	for _, in := range cr.cluster.Instances() {
		died, fp, how := in.Died()
		if !died {
			continue
		}
		if name, action, _ := cutLast(fp, "="); action == "crash" && in.DiedOfSIGKILL() {
			cr.stats.Add("crashes at failpoint: "+name, 1)
		} else {
			cr.problem(in, "died by itself (%s) with failpoints %q", how, fp)
		}
		cr.start(in, "")
	}
}

// finish leaves every process up and without failpoints.
func (cr *crasher) finish() {
	cr.reviveDead()
	for _, in := range cr.cluster.Instances() {
		if in.Failpoint() != "" {
			cr.stop(in)
			cr.start(in, "")
		}
	}
}

func (cr *crasher) start(in *Instance, failpoint string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := in.Start(ctx, failpoint); err != nil {
		cr.problem(in, "could not be restarted: %v", err)
		return false
	}
	cr.stats.Add("restarts", 1)
	return true
}

func (cr *crasher) problem(in *Instance, format string, args ...any) {
	v := Violation{Rule: "process", Key: in.Name, Detail: fmt.Sprintf(format, args...) + "\n" + in.LogTail(8)}
	cr.logf("chaos: %s", v)
	cr.mu.Lock()
	defer cr.mu.Unlock()
	cr.problems = append(cr.problems, v)
}

func (cr *crasher) violations() []Violation {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	return append([]Violation(nil), cr.problems...)
}

// cutLast splits s around the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	for i := len(s) - len(sep); i >= 0; i-- {
		if s[i:i+len(sep)] == sep {
			return s[:i], s[i+len(sep):], true
		}
	}
	return s, "", false
}
