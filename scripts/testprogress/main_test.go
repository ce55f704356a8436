package main

import (
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// syncBuffer is the report's output, read while it is written.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s.b.String(), "\n"), "\n")
}

// The report says what is going on at every tick, from before the first
// package starts (go test -json is silent while it builds) to the end: a
// tick while building, while a package runs, between packages.
func TestReport_saysAtEveryTickWhatIsGoingOn(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	in, feed := io.Pipe()
	ticks := make(chan time.Time)
	out := &syncBuffer{}
	exit := make(chan int)
	go func() { exit <- report(in, out, ticks, clock) }()

	// waitForLine waits until the report has printed n lines and returns the last.
	waitForLine := func(n int) string {
		t.Helper()
		require.Eventually(t, func() bool { return len(out.lines()) >= n }, 5*time.Second, time.Millisecond,
			"want %d lines: %q", n, out.lines())
		lines := out.lines()
		require.Len(t, lines, n, "%q", lines)
		return lines[n-1]
	}
	send := func(line string) {
		t.Helper()
		_, err := io.WriteString(feed, line+"\n")
		require.NoError(t, err)
	}
	tick := func() {
		advance(20 * time.Second)
		ticks <- clock()
	}

	require.Contains(t, waitForLine(1), "go test builds the test binaries first", "a line at once")
	tick()
	require.Equal(t, "...  20s in all; go test is still building: no package's tests have begun yet", waitForLine(2))
	tick()
	require.Equal(t, "...  40s in all; go test is still building: no package's tests have begun yet", waitForLine(3))

	send(`{"Action":"start","Package":"example/a"}`)
	send("go: a line that is not JSON") // printed once the start before it was handled
	require.Equal(t, "go: a line that is not JSON", waitForLine(4))
	tick()
	require.Equal(t, "...  1m0s in all; still running: example/a (20s)", waitForLine(5))

	send(`{"Action":"output","Package":"example/a","Output":"=== RUN TestA\n"}`)
	send(`{"Action":"pass","Package":"example/a","Elapsed":19.5}`)
	require.Regexp(t, `^ok   example/a\s+19\.5s   \(1m0s in all\)$`, waitForLine(6))
	tick()
	require.Equal(t, "...  1m20s in all; 1 package(s) done; go test is building the next test binaries", waitForLine(7))

	require.NoError(t, feed.Close())
	require.Equal(t, 0, <-exit)
	require.Equal(t, "PASS: 1 packages in 1m20s", waitForLine(8))
}
