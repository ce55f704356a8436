package recoverytest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// callLog is the Idempotency-Keys of the calls one Server took that change
// something, in order ("" for a call without one).
type callLog struct {
	mu   sync.Mutex
	keys []string
}

func (l *callLog) note(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keys = append(l.keys, key)
}

func (l *callLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

// serverLogs holds each test's Servers' logs, by test name.
type serverLogs struct {
	sync.Mutex
	logs map[string][]*callLog
}

var remotes = &serverLogs{logs: map[string][]*callLog{}}

func (r *serverLogs) add(t testing.TB, l *callLog) {
	r.Lock()
	defer r.Unlock()
	name := t.Name()
	if r.logs[name] == nil {
		t.Cleanup(func() { r.Lock(); defer r.Unlock(); delete(r.logs, name) })
	}
	r.logs[name] = append(r.logs[name], l)
}

// remoteCalls are the logs of the Servers a test (and its parents) made.
type remoteCalls struct {
	logs    []*callLog
	servers int
}

func remoteCallsOf(test string) remoteCalls {
	remotes.Lock()
	defer remotes.Unlock()
	var c remoteCalls
	for name, logs := range remotes.logs {
		if name == test || strings.HasPrefix(test, name+"/") {
			c.logs = append(c.logs, logs...)
		}
	}
	c.servers = len(c.logs)
	return c
}

// mark is where each log stands now.
func (c remoteCalls) mark() []int {
	m := make([]int, len(c.logs))
	for i, l := range c.logs {
		m[i] = l.len()
	}
	return m
}

// since returns the distinct keys the calls after mark carried, sorted,
// and how many calls carried none.
func (c remoteCalls) since(mark []int) (keys []string, missing int) {
	for i, l := range c.logs {
		l.mu.Lock()
		for _, k := range l.keys[mark[i]:] {
			switch {
			case k == "":
				missing++
			case !slices.Contains(keys, k):
				keys = append(keys, k)
			}
		}
		l.mu.Unlock()
	}
	slices.Sort(keys)
	return keys, missing
}

// verdict is one run's failures: its last line says it was proven only
// when nothing failed, and that it was not otherwise.
type verdict struct {
	t      testing.TB
	where  string
	failed bool
}

func (v *verdict) Errorf(format string, args ...any) {
	v.t.Helper()
	v.failed = true
	v.t.Errorf("recoverytest: %s: %s", v.where, fmt.Sprintf(format, args...))
}

func (v *verdict) end(start time.Time) {
	v.t.Helper()
	if v.failed {
		v.t.Logf("recoverytest: %s: NOT proven (the failures above)", v.where)
		return
	}
	v.t.Logf("recoverytest: %s: proven in %v", v.where, time.Since(start).Round(time.Millisecond))
}
