package stripesim

import (
	"slices"
	"time"
)

// Stripe decides some outcomes after the request that caused them: a
// refund of pm_card_pendingRefund settles, one of pm_card_refundFail fails,
// about two seconds later. Such an outcome is a laterChange, due at a time
// of the simulator's clock. Due changes are applied, in the order they fall
// due, before every API request and control-surface read, when Advance moves
// the clock, and by a timer on the wall clock (so a simulator nobody calls
// still sends their webhooks). All of it under s.mu, so the result is the
// same whichever of them applies a change first.

// laterDelay is how long after the request Stripe's later outcome comes.
const laterDelay = 2 * time.Second

// laterChange is a state change the simulator makes on its own at a time.
type laterChange struct {
	at    time.Time
	apply func() // runs with s.mu held
}

// now is the simulator's clock: Config.Now plus what Advance added; while a
// later change is applied, the time it fell due, so that its objects and
// events say when it happened even when Advance jumped past it. It runs
// with s.mu held.
func (s *Simulator) now() time.Time {
	if !s.applyingAt.IsZero() {
		return s.applyingAt
	}
	return s.clock().Add(time.Duration(s.offset.Load()))
}

// Advance moves the simulator's clock forward by d and applies every change
// that falls due meanwhile (as POST /_sim/advance does). It returns the new
// time.
func (s *Simulator) Advance(d time.Duration) time.Time {
	s.mu.Lock()
	if d > 0 {
		s.offset.Add(int64(d))
		s.changed()
	}
	s.applyDue()
	now := s.now()
	s.mu.Unlock()
	s.save()
	return now
}

// later schedules apply for d from now. It runs with s.mu held.
func (s *Simulator) later(d time.Duration, apply func()) {
	at := s.now().Add(d)
	// Keep the list ordered by due time, and in scheduling order for ties.
	i, _ := slices.BinarySearchFunc(s.state.later, at, func(c laterChange, at time.Time) int {
		if c.at.After(at) {
			return 1
		}
		return -1
	})
	s.state.later = slices.Insert(s.state.later, i, laterChange{at: at, apply: apply})
	s.armTimer()
}

// applyDue applies the changes due by now, oldest first. It runs with s.mu
// held.
func (s *Simulator) applyDue() {
	now := s.now()
	s.state.forgetExpiredEvents(now)
	s.state.forgetExpiredKeys(now)
	for len(s.state.later) > 0 && !s.state.later[0].at.After(now) {
		c := s.state.later[0]
		s.state.later = s.state.later[1:]
		s.applyingAt = c.at
		c.apply()
		s.applyingAt = time.Time{}
		s.changed()
	}
	s.armTimer()
}

// armTimer sets the wall-clock timer to the next due change, or stops it.
// It runs with s.mu held. The timer's function runs on its own goroutine
// only while it fires, and Close stops it: nothing outlives the simulator.
func (s *Simulator) armTimer() {
	if s.closed || len(s.state.later) == 0 {
		if s.timer != nil {
			s.timer.Stop()
		}
		return
	}
	// With an injected clock that does not move, the timer fires, finds
	// nothing due and waits again; Advance is what applies changes then.
	wait := s.state.later[0].at.Sub(s.now())
	if s.timer == nil {
		s.timer = time.AfterFunc(wait, s.onTimer)
		return
	}
	s.timer.Reset(wait)
}

func (s *Simulator) onTimer() {
	s.mu.Lock()
	if !s.closed {
		s.applyDue()
	}
	s.mu.Unlock()
	s.save()
}
