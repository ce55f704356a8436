package stripesim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// Stripe delivers every event at least once, in no guaranteed order, and
// sometimes late (its guide to webhooks says so, and asks receivers to
// cope). The simulator's deliverer sends events once, in order; a webhook
// fault makes it behave as Stripe may:
//
//	duplicate  the event is sent twice, under its one id
//	reorder    the event is held back until the next event about the same
//	           object was sent (or the webhook faults are cleared)
//	delay      the event is held delay_ms, while later events go out
//	drop       the event is never sent (Stripe gave up on it, or it was lost)
//
// A fault hits the next Count events (of Type, when given) that are sent; a
// drop fault with Count 0 hits every event from now on, until the webhook
// faults are cleared.

// WebhookFaultKind is what a webhook fault does to an event.
type WebhookFaultKind string

// The webhook fault kinds.
const (
	WebhookDuplicate WebhookFaultKind = "duplicate"
	WebhookReorder   WebhookFaultKind = "reorder"
	WebhookDelay     WebhookFaultKind = "delay"
	WebhookDrop      WebhookFaultKind = "drop"
)

// WebhookFault garbles the delivery of the next Count events whose type is
// Type (any type when empty).
type WebhookFault struct {
	Kind  WebhookFaultKind `json:"kind"`
	Type  string           `json:"type,omitempty"`
	Count int              `json:"count"` // 0 means 1; for drop, every event from now on
	// Forever: the fault never wears out (a drop fault armed with Count 0).
	Forever bool `json:"forever,omitempty"`
	DelayMS int  `json:"delay_ms"` // for WebhookDelay
}

var errNoWebhooks = errors.New("the simulator sends no webhooks (no webhook URL is configured)")

func (f *WebhookFault) normalize() error {
	switch f.Kind {
	case WebhookDuplicate, WebhookReorder:
	case WebhookDrop:
		if f.Count == 0 {
			f.Forever = true
		}
	case WebhookDelay:
		if f.DelayMS <= 0 {
			return fmt.Errorf("a delay fault needs delay_ms > 0")
		}
	default:
		return fmt.Errorf("unknown webhook fault kind %q (want duplicate, reorder, delay or drop)", f.Kind)
	}
	if f.Count < 0 || f.DelayMS < 0 {
		return fmt.Errorf("count and delay_ms must not be negative")
	}
	if f.Count == 0 && !f.Forever {
		f.Count = 1
	}
	return nil
}

// AddWebhookFault arms f after the webhook faults already armed; an event
// meets the oldest matching fault first.
func (s *Simulator) AddWebhookFault(f WebhookFault) error {
	if s.webhooks == nil {
		return errNoWebhooks
	}
	if err := f.normalize(); err != nil {
		return err
	}
	d := s.webhooks
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faults = append(d.faults, &f)
	return nil
}

// ClearWebhookFaults disarms every webhook fault and sends the events a
// reorder fault still holds back. Delayed events go out when their delay
// ends.
func (s *Simulator) ClearWebhookFaults() {
	if s.webhooks == nil {
		return
	}
	d := s.webhooks
	d.mu.Lock()
	d.faults = nil
	var held []outgoing
	for _, events := range d.held {
		held = append(held, events...)
	}
	d.held = nil
	d.mu.Unlock()
	d.enqueue(held...)
}

// WebhookFaults returns the webhook faults still armed, with the events they
// still hit.
func (s *Simulator) WebhookFaults() []WebhookFault {
	if s.webhooks == nil {
		return nil
	}
	d := s.webhooks
	d.mu.Lock()
	defer d.mu.Unlock()
	faults := make([]WebhookFault, 0, len(d.faults))
	for _, f := range d.faults {
		faults = append(faults, *f)
	}
	return faults
}

// send queues ev for delivery as the first matching webhook fault says.
func (d *deliverer) send(ev outgoing) {
	d.mu.Lock()
	f := d.takeFault(ev)
	switch f.Kind {
	case WebhookDrop:
		d.mu.Unlock()
		return
	case WebhookReorder:
		if d.held == nil {
			d.held = make(map[string][]outgoing)
		}
		d.held[ev.object] = append(d.held[ev.object], ev)
		d.mu.Unlock()
		return
	case WebhookDelay:
		era := d.era
		d.mu.Unlock()
		time.AfterFunc(time.Duration(f.DelayMS)*time.Millisecond, func() {
			d.mu.Lock()
			if d.era != era || d.ctx.Err() != nil { // reset or closed meanwhile
				d.mu.Unlock()
				return
			}
			events := d.withHeld(ev)
			d.mu.Unlock()
			d.enqueue(events...)
		})
		return
	}
	events := d.withHeld(ev)
	if f.Kind == WebhookDuplicate {
		events = slices.Insert(events, 1, ev)
	}
	d.mu.Unlock()
	d.enqueue(events...)
}

// withHeld returns ev followed by the events held back until an event about
// its object was sent, and forgets them. It runs with d.mu held.
func (d *deliverer) withHeld(ev outgoing) []outgoing {
	events := append([]outgoing{ev}, d.held[ev.object]...)
	delete(d.held, ev.object)
	return events
}

// takeFault returns the fault that hits ev, counting the hit; the zero
// WebhookFault when none does. It runs with d.mu held.
func (d *deliverer) takeFault(ev outgoing) WebhookFault {
	for i, f := range d.faults {
		if f.Type == "" || f.Type == ev.eventType {
			if f.Forever {
				return *f
			}
			f.Count--
			if f.Count == 0 {
				d.faults = slices.Delete(d.faults, i, i+1)
			}
			return *f
		}
	}
	return WebhookFault{}
}

// serveWebhookFaults is GET /_sim/webhook_faults.
func (s *Simulator) serveWebhookFaults(w http.ResponseWriter, _ *http.Request) {
	writeControl(w, http.StatusOK, s.WebhookFaults())
}

// serveAddWebhookFault is POST /_sim/webhook_faults; it answers the fault as
// armed.
func (s *Simulator) serveAddWebhookFault(w http.ResponseWriter, r *http.Request) {
	var f WebhookFault
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		writeControlError(w, http.StatusBadRequest, "invalid webhook fault: "+err.Error())
		return
	}
	if err := f.normalize(); err != nil {
		writeControlError(w, http.StatusBadRequest, "invalid webhook fault: "+err.Error())
		return
	}
	if err := s.AddWebhookFault(f); err != nil {
		writeControlError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeControl(w, http.StatusOK, f)
}

// serveClearWebhookFaults is DELETE /_sim/webhook_faults.
func (s *Simulator) serveClearWebhookFaults(w http.ResponseWriter, _ *http.Request) {
	s.ClearWebhookFaults()
	writeControl(w, http.StatusOK, map[string]bool{"cleared": true})
}
