package stripesim

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Seeded is what Seed made: the object's id and the ids of the events it
// caused, oldest first.
type Seeded struct {
	ID     string
	Events []string
}

// Seed runs one Stripe API operation at the simulator's time, without an
// HTTP request, the request log or an idempotency key: POST
// /v1/payment_intents or POST /v1/refunds with the given form, through the
// same code an HTTP request runs, so that the objects and events are the
// ones a request would make. It is for benchmarks that make weeks of
// history in bulk (cmd/paymentsbench -reconcile); tests use HTTP.
func (s *Simulator) Seed(path string, form url.Values) (Seeded, error) {
	var op operation
	switch path {
	case "/v1/payment_intents":
		op = s.createPaymentIntent
	case "/v1/refunds":
		op = s.createRefund
	default:
		return Seeded{}, fmt.Errorf("stripesim: Seed does not run %s", path)
	}
	c := &call{requestID: newID("req"), method: "POST", path: path, apiKey: "sk_test_seed", form: form}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applyDue()
	before := len(s.state.events.order)
	out := op(c)
	if out.status != 200 {
		return Seeded{}, fmt.Errorf("stripesim: Seed %s: %d %s", path, out.status, out.body)
	}
	var obj struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(out.body, &obj); err != nil {
		return Seeded{}, err
	}
	seeded := Seeded{ID: obj.ID}
	for _, ev := range s.state.events.order[before:] {
		seeded.Events = append(seeded.Events, ev.ID)
	}
	return seeded, nil
}

// SeededEvent is an event as EventsSince returns it: its id, its type and
// its JSON, as a webhook would carry it.
type SeededEvent struct {
	ID, Type string
	Payload  json.RawMessage
	Made     time.Time // when the simulator made it, on its clock
}

// EventsSince returns the events made at or after t whose type starts
// with prefix ("charge.dispute." for the disputes), oldest first, after
// applying the later changes due. It is for benchmarks that make history in
// bulk and decide which webhooks were delivered of the events Stripe made
// on its own (a dispute's opening, laterDelay after a payment): the bench
// sees them without a request that Stripe calls would count.
func (s *Simulator) EventsSince(t time.Time, prefix string) []SeededEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applyDue()
	all := s.state.events.order
	i, _ := slices.BinarySearchFunc(all, t, func(e *event, t time.Time) int { return e.made.Compare(t) })
	var out []SeededEvent
	for _, ev := range all[i:] {
		if strings.HasPrefix(ev.Type, prefix) {
			out = append(out, SeededEvent{ID: ev.ID, Type: ev.Type, Payload: snapshot(ev), Made: ev.made})
		}
	}
	return out
}
