// Package claimloop is the loop of a table-driven worker: the rows due in
// a table are claimed (FOR UPDATE SKIP LOCKED, each with a lease) as many
// at a time as there are free slots, each is worked in a goroutine of its
// own, and when fewer were due than there were slots the loop waits for
// its poll or a Wake (a writer says new rows are due); when no slot is
// free, for one to be freed. At the end the work in flight gets a grace to
// finish, then is cancelled: a row whose work was cut off is due again
// when its lease lapses. The webhook dispatcher (internal/merchanthooks)
// and the receipt sender (internal/stagedjobs) run on it; what a row is,
// how it is claimed and what counts as a free slot are theirs.
package claimloop

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Loop is one worker's loop. Make it with New.
type Loop struct {
	name            string // in its log lines: "webhook dispatcher"
	log             *slog.Logger
	pollInterval    time.Duration
	shutdownTimeout time.Duration
	wake, freed     chan struct{} // buffered, 1: a signal waits for the loop, never the signaller
}

// New is the loop of the worker called name, which polls every
// pollInterval and gives its work in flight shutdownTimeout at the end.
func New(name string, log *slog.Logger, pollInterval, shutdownTimeout time.Duration) *Loop {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Loop{name: name, log: log, pollInterval: pollInterval, shutdownTimeout: shutdownTimeout,
		wake: make(chan struct{}, 1), freed: make(chan struct{}, 1)}
}

// Wake makes the loop claim at once instead of at its next poll. It never
// blocks.
func (l *Loop) Wake() { signal(l.wake) }

// Freed tells the loop a slot was freed. It never blocks.
func (l *Loop) Freed() { signal(l.freed) }

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Run runs l until ctx ends: free says how many rows may be claimed now,
// claim claims up to n (and counts them in flight), and work works one,
// freeing its slot (and calling Freed) when done. The work runs on a
// context that outlives ctx by the shutdown timeout at most. Run returns
// once every work it started has returned.
func Run[T any](ctx context.Context, l *Loop, free func() int, claim func(ctx context.Context, n int) ([]T, error),
	work func(ctx context.Context, row T)) {
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	var inFlight sync.WaitGroup
	for ctx.Err() == nil {
		n := free()
		if n <= 0 {
			select {
			case <-ctx.Done():
			case <-l.freed:
			}
			continue
		}
		claimed, err := claim(ctx, n)
		if err != nil && ctx.Err() == nil {
			l.log.Warn(l.name+": claiming due work failed; trying again", slog.String("error", err.Error()))
		}
		for _, row := range claimed {
			inFlight.Go(func() { work(workCtx, row) })
		}
		if len(claimed) < n { // nothing more is due now
			l.wait(ctx)
		}
	}

	finished := make(chan struct{})
	go func() { inFlight.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(l.shutdownTimeout):
		l.log.Warn(l.name + ": shutdown timeout reached: cancelling the work in flight (it is done again)")
		cancelWork()
		<-finished
	}
}

// wait sleeps for the poll interval, or until ctx ends or Wake is called.
func (l *Loop) wait(ctx context.Context) {
	t := time.NewTimer(l.pollInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-l.wake:
	}
}

// Batches hands write the values sent on c, as many at once as have
// gathered (at most max), until c is closed and drained: how a worker
// records its outcomes in one statement a batch, off the work's path.
func Batches[T any](c <-chan T, max int, write func([]T)) {
	batch := make([]T, 0, max)
	for v := range c {
		batch = append(batch[:0], v)
	gather:
		for len(batch) < max {
			select {
			case v, ok := <-c:
				if !ok {
					break gather
				}
				batch = append(batch, v)
			default:
				break gather
			}
		}
		write(batch)
	}
}
