package claimloop_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/claimloop"
)

// queue is a table of due rows, as a worker claims them.
type queue struct {
	mu             sync.Mutex
	due            []int
	inflight, max  int
	loop           *claimloop.Loop
	done, canceled atomic.Int32
}

func (q *queue) free() int { q.mu.Lock(); defer q.mu.Unlock(); return q.max - q.inflight }

func (q *queue) claim(_ context.Context, n int) ([]int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n = min(n, len(q.due))
	rows := q.due[:n]
	q.due, q.inflight = q.due[n:], q.inflight+n
	return rows, nil
}

func (q *queue) add(rows ...int) { q.mu.Lock(); q.due = append(q.due, rows...); q.mu.Unlock() }

func (q *queue) release() {
	q.mu.Lock()
	q.inflight--
	q.mu.Unlock()
	q.loop.Freed()
}

// Every due row is worked, no more than max at once; a row added later is
// claimed on Wake, long before the poll; at the end, work past the
// shutdown timeout is cancelled and Run returns only once it has returned.
func TestRun_claimsWithinItsSlotsWakesAndCancelsLateWorkAtTheEnd(t *testing.T) {
	t.Parallel()
	q := &queue{max: 3, loop: claimloop.New("test", nil, time.Hour, 100*time.Millisecond)}
	q.add(1, 2, 3, 4, 5, 6, 7)
	var peak, now atomic.Int32
	block := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		claimloop.Run(ctx, q.loop, q.free, q.claim, func(ctx context.Context, row int) {
			defer q.release()
			n := now.Add(1)
			defer now.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			if row == 99 { // held until cancelled
				select {
				case <-block:
				case <-ctx.Done():
					q.canceled.Add(1)
					return
				}
			}
			q.done.Add(1)
		})
	}()
	require.Eventually(t, func() bool { return q.done.Load() == 7 }, 5*time.Second, time.Millisecond)
	require.LessOrEqual(t, peak.Load(), int32(3))

	q.add(99) // the poll is an hour away: only Wake finds it
	q.loop.Wake()
	require.Eventually(t, func() bool { return now.Load() == 1 }, 5*time.Second, time.Millisecond, "claimed on Wake")

	cancel()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its shutdown timeout")
	}
	require.EqualValues(t, 1, q.canceled.Load(), "the held work was cancelled past the shutdown timeout")
}
