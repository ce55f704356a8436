// Package stripesimtest gives recoverytest the Stripe simulator's faults,
// for a flow whose external calls go to the simulator:
//
//	recoverytest.Prove(t, recoverytest.Case{..., Faults: stripesimtest.Faults(sim)})
//
// It is a package of its own so that the simulator, a program too, does
// not link the testing package.
package stripesimtest

import (
	"slices"
	"time"

	"github.com/example/payments/internal/recovery/recoverytest"
	"github.com/example/payments/internal/stripesim"
)

// Kinds are the simulator's faults that a call to Stripe can meet, as
// recoverytest meets them (docs/API.md section 4): the answer lost after
// the work (lost_response, drop_connection), a failure before it
// (error_500, rate_limit), a 500 Stripe stores under the key
// (stored_error_500), the same 500 with the work done Late500 after it
// (late_500), and a call held past the lock timeout (delay).
var Kinds = []stripesim.FaultKind{
	stripesim.FaultLostResponse, stripesim.FaultDropConnection,
	stripesim.FaultError500, stripesim.FaultRateLimit,
	stripesim.FaultStoredError500, stripesim.FaultLate500, stripesim.FaultDelay,
}

// Late500 is how long after its stored 500 a late_500's request executes,
// on the simulator's clock: well within the spent-key grace recoverytest
// gives the engine (200 ms, unless the Case sets its own), which must
// keep the engine from renewing the child key, and charging again,
// before the work lands.
const Late500 = 50 * time.Millisecond

// Faults are sim's faults of Kinds. Each is armed for the next request
// whose Idempotency-Key ends with "-<step>": the step's child key
// (recovery.Key.ChildKey), whatever the flow sends first.
//
// drop_connection is armed for two requests: Go's transport silently
// resends a request that carries an Idempotency-Key once when a reused
// keep-alive connection closes before answering, and the resent request,
// on a new connection, is dropped too, so that the flow sees the dropped
// connection whichever connection its call went out on. Disarm, after the
// attempt, clears what the attempt left of it (and every other fault the
// simulator holds: a test that arms its own does so outside recoverytest).
func Faults(sim *stripesim.Simulator) []recoverytest.Fault {
	faults := make([]recoverytest.Fault, 0, len(Kinds))
	for _, kind := range Kinds {
		var armed stripesim.Fault
		left := func() bool { // what the attempt left of the fault armed
			return slices.ContainsFunc(sim.Faults(), func(f stripesim.Fault) bool {
				return f.IdempotencyKeySuffix == armed.IdempotencyKeySuffix && f.Kind == armed.Kind
			})
		}
		faults = append(faults, recoverytest.Fault{
			Name:  string(kind),
			Holds: kind == stripesim.FaultDelay,
			Lag:   late500Lag(kind),
			Arm: func(step string, hold time.Duration) error {
				armed = stripesim.Fault{IdempotencyKeySuffix: "-" + step, Kind: kind, Count: 1}
				switch kind {
				case stripesim.FaultDelay:
					armed.DelayMS = int(hold.Milliseconds())
				case stripesim.FaultDropConnection:
					armed.Count = 2
				case stripesim.FaultLate500:
					armed.DelayMS = int(Late500.Milliseconds())
				}
				return sim.AddFault(armed)
			},
			Armed: func() bool { return slices.Contains(sim.Faults(), armed) }, // untouched
			Disarm: func() {
				if left() {
					sim.ClearFaults()
				}
			},
		})
	}
	return faults
}

// late500Lag is how long after a fault of kind its request may still
// execute: Late500 for late_500 (and as long again, for the clock's
// rounding and the request's way in), nothing for the others.
func late500Lag(kind stripesim.FaultKind) time.Duration {
	if kind == stripesim.FaultLate500 {
		return 2 * Late500
	}
	return 0
}
