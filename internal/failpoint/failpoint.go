// Package failpoint lets crash tests stop the service at named places: around
// the commit that moves an idempotency key to a recovery point, and after an
// external call answered but before anything is recorded.
//
// PAYMENTS_FAILPOINTS is a comma-separated list of name=action, for example
// "after_stripe:payment_intent=crash,before_commit:finished=sleep:500".
// The names are those the flows' declarations give (recovery.Flow.Failpoints);
// the service refuses, at start-up, a set naming any other (CheckNames).
// Actions: crash (the process dies at once, as by SIGKILL), error (the step
// fails with an internal error), sleep:<ms>. A nil or empty *Set costs one
// nil check per point.
package failpoint

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Set is the failpoints in force.
type Set struct {
	actions map[string]action
	// beforeCrash, when set, runs just before a crash (BeforeCrash).
	beforeCrash func()
}

// BeforeCrash has f run just before a crash action kills the process. The
// one use: with tracing on, export the spans that had ended, so that the
// trace of a request crashed on purpose shows what it did up to the crash
// (docs/watch-a-crash-recover.md). A real SIGKILL would lose them; the
// spans still open (the request's, its phase's) are lost either way, as
// they would be.
func (s *Set) BeforeCrash(f func()) {
	if s != nil {
		s.beforeCrash = f
	}
}

type action struct {
	kind  string // crash, error, sleep
	sleep time.Duration
}

// ErrInjected is the error an "error" failpoint makes its step return.
var ErrInjected = errors.New("failpoint")

// Parse reads a PAYMENTS_FAILPOINTS value. An empty value gives nil.
func Parse(spec string) (*Set, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, nil
	}
	s := &Set{actions: map[string]action{}}
	for _, item := range strings.Split(spec, ",") {
		name, act, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("failpoint %q: want name=action", item)
		}
		a, err := parseAction(act)
		if err != nil {
			return nil, fmt.Errorf("failpoint %q: %w", item, err)
		}
		s.actions[name] = a
	}
	return s, nil
}

func parseAction(act string) (action, error) {
	switch {
	case act == "crash" || act == "error":
		return action{kind: act}, nil
	case strings.HasPrefix(act, "sleep:"):
		ms, err := strconv.Atoi(strings.TrimPrefix(act, "sleep:"))
		if err != nil || ms < 0 {
			return action{}, fmt.Errorf("sleep wants milliseconds, as sleep:250")
		}
		return action{kind: "sleep", sleep: time.Duration(ms) * time.Millisecond}, nil
	default:
		return action{}, fmt.Errorf("unknown action %q (crash, error or sleep:<ms>)", act)
	}
}

// ErrUnknown wraps the names CheckNames refuses.
var ErrUnknown = errors.New("unknown failpoint")

// CheckNames refuses a set that names a failpoint not among known (those
// the flows declare: the engine checks them as it is built, recovery.New),
// since it would never fire. A nil set names none.
func (s *Set) CheckNames(known []string) error {
	if s == nil {
		return nil
	}
	var unknown []string
	for name := range s.actions {
		if !slices.Contains(known, name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	known = slices.Compact(slices.Sorted(slices.Values(known))) // flows share points: each name once
	for i, name := range unknown {
		if near := nearest(name, known); near != "" {
			unknown[i] = fmt.Sprintf("%s (did you mean %s?)", name, near)
		}
	}
	return fmt.Errorf("%w: %s (known: %s)", ErrUnknown, strings.Join(unknown, ", "), strings.Join(known, ", "))
}

// nearest is the known name closest to name by edit distance, when it is
// close enough to be a typo of it (at most a third of its length); "".
func nearest(name string, known []string) string {
	best, bestD := "", len(name)/3+1
	for _, k := range known {
		if d := distance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// distance is the Levenshtein distance between a and b, in bytes.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// Fire runs the action of failpoint name, if one is set: it kills the
// process, returns an error wrapping ErrInjected, or sleeps.
func (s *Set) Fire(name string) error {
	if s == nil {
		return nil
	}
	a, ok := s.actions[name]
	if !ok {
		return nil
	}
	switch a.kind {
	case "crash":
		// SIGKILL ourselves: no deferred function, no graceful anything, just
		// as when the machine loses power under the process.
		if s.beforeCrash != nil {
			s.beforeCrash()
		}
		_ = syscall.Kill(syscall.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	case "error":
		return fmt.Errorf("%w %s", ErrInjected, name)
	case "sleep":
		time.Sleep(a.sleep)
	}
	return nil
}
