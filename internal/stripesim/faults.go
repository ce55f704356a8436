package stripesim

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// FaultKind is a failure the simulator can inject.
type FaultKind string

// The fault kinds, in the order a request meets them.
const (
	// FaultError500 answers 500 api_error before executing; nothing is stored.
	FaultError500 FaultKind = "error_500"
	// FaultRateLimit answers 429 lock_timeout before executing; nothing is stored.
	FaultRateLimit FaultKind = "rate_limit"
	// FaultDelay sleeps DelayMS after claiming the idempotency key, then executes.
	FaultDelay FaultKind = "delay"
	// FaultLostResponse executes and stores the result, then answers 500.
	FaultLostResponse FaultKind = "lost_response"
	// FaultDropConnection executes and stores the result, then closes the
	// connection without answering.
	FaultDropConnection FaultKind = "drop_connection"
	// FaultStoredError500 executes nothing, answers 500 api_error and
	// stores that answer under the idempotency key, as Stripe does when a
	// request fails after its execution began ("subsequent requests with
	// the same key return the same result, including 500 errors"): every
	// later request with the key gets the same 500, replayed. A request
	// without a key just gets the 500.
	FaultStoredError500 FaultKind = "stored_error_500"
	// FaultLate500 is a stored 500 whose request goes on executing: it
	// answers 500 api_error at once and stores that answer under the
	// idempotency key, as FaultStoredError500 does, and then executes the
	// request DelayMS later on the simulator's clock, its result lost (the
	// key keeps its 500). It is the 500 of a Stripe that stores a request's
	// result "after execution of an endpoint begins" and answered while the
	// work was still under way: the PaymentIntent appears after the client
	// was told 500, and after every retry with the key was told it again.
	FaultLate500 FaultKind = "late_500"
	// FaultProcessing makes a payment intent's confirmation answer
	// processing, as Stripe's asynchronous payment methods do: the charge
	// pends, and DelayMS later (on the simulator's clock) it goes through
	// and the payment intent becomes succeeded (requires_capture for
	// capture_method manual), with payment_intent.succeeded. A request
	// that confirms nothing is not changed by it.
	FaultProcessing FaultKind = "processing"
	// FaultEventsLag, on GET /v1/events, lists an event only DelayMS after
	// the simulator made it (on its clock), as Stripe's list of events may
	// trail the webhooks it sends (eventlist.go).
	FaultEventsLag FaultKind = "events_lag"
)

// Fault hits the next Count /v1 requests whose path starts with PathPrefix,
// whose method is Method (any method when empty) and whose Idempotency-Key
// ends with IdempotencyKeySuffix (any request, with a key or without, when
// empty). The suffix aims a fault at one step of a service whose child keys
// end with the step's name ("payments-<key id>-capture"), whatever else the
// service sends first.
type Fault struct {
	PathPrefix           string    `json:"path_prefix"`
	Method               string    `json:"method"`
	IdempotencyKeySuffix string    `json:"idempotency_key_suffix,omitempty"`
	Kind                 FaultKind `json:"kind"`
	Count                int       `json:"count"`    // 0 means 1
	DelayMS              int       `json:"delay_ms"` // for FaultDelay, FaultLate500, FaultProcessing and FaultEventsLag
}

// AddFault arms f after the faults already armed; a request meets the oldest
// matching fault first.
func (s *Simulator) AddFault(f Fault) error {
	if err := f.normalize(); err != nil {
		return err
	}
	s.arm(f)
	return nil
}

func (s *Simulator) arm(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state.faults = append(s.state.faults, &f)
}

// ClearFaults disarms every fault.
func (s *Simulator) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state.faults = nil
}

// Faults returns the faults still armed, with the requests they still hit.
func (s *Simulator) Faults() []Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	faults := make([]Fault, 0, len(s.state.faults))
	for _, f := range s.state.faults {
		faults = append(faults, *f)
	}
	return faults
}

func (f *Fault) normalize() error {
	switch f.Kind {
	case FaultError500, FaultRateLimit, FaultDelay, FaultLostResponse, FaultDropConnection, FaultStoredError500, FaultLate500,
		FaultProcessing, FaultEventsLag:
	default:
		return fmt.Errorf("unknown fault kind %q (want error_500, rate_limit, delay, lost_response, drop_connection, stored_error_500, late_500, processing or events_lag)", f.Kind)
	}
	if f.Count < 0 || f.DelayMS < 0 {
		return fmt.Errorf("count and delay_ms must not be negative")
	}
	if f.Count == 0 {
		f.Count = 1
	}
	f.Method = strings.ToUpper(f.Method)
	return nil
}

// takeFault returns the fault that hits c, counting the hit; the zero Fault
// when none does.
func (s *Simulator) takeFault(c *call) Fault {
	s.mu.Lock()
	defer s.mu.Unlock()

	for i, f := range s.state.faults {
		if (f.Method == "" || f.Method == c.method) && strings.HasPrefix(c.path, f.PathPrefix) &&
			(f.IdempotencyKeySuffix == "" || strings.HasSuffix(c.idempotencyKey, f.IdempotencyKeySuffix)) {
			f.Count--
			if f.Count == 0 {
				s.state.faults = slices.Delete(s.state.faults, i, i+1)
			}
			return *f
		}
	}
	return Fault{}
}

// errorBeforeExecuting is the error a fault answers instead of executing, if
// it is of that kind.
func (f Fault) errorBeforeExecuting() *apiError {
	switch f.Kind {
	case FaultError500:
		return internalError()
	case FaultRateLimit:
		return lockTimeout()
	}
	return nil
}

// storedError is the error a fault stores under the request's idempotency
// key instead of executing, if it is of that kind.
func (f Fault) storedError() *apiError {
	if f.Kind == FaultStoredError500 {
		return internalError()
	}
	return nil
}

// storeAndExecuteLater answers a 500 and stores it under the key c claimed,
// as storeWithoutExecuting does, and executes op on c d later on the
// simulator's clock, its result dropped (FaultLate500).
func (s *Simulator) storeAndExecuteLater(c *call, op operation, d time.Duration) response {
	s.mu.Lock()
	defer s.mu.Unlock()

	res := errorResponse(c, internalError())
	if c.claim != nil {
		s.state.settleKey(c, res, true)
	}
	s.state.lateRequests++
	s.later(d, func() {
		s.state.lateRequests--
		op(c)
	})
	s.changed()
	return res
}

// delay is how long the fault holds the request before it executes.
func (f Fault) delay() time.Duration {
	if f.Kind != FaultDelay {
		return 0
	}
	return time.Duration(f.DelayMS) * time.Millisecond
}

// LateRequests is how many requests a late_500 answered that the simulator
// has not executed yet (GET /_sim/late_requests): a harness waiting for
// Stripe to stand still waits for 0.
func (s *Simulator) LateRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applyDue()
	return s.state.lateRequests
}
