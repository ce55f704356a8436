package stripesim

import (
	"net/http"
	"path"
	"slices"
	"strings"
	"time"
)

// eventRetention is how far back GET /v1/events reaches: Stripe's List
// Events goes "back up to 30 days" (docs.stripe.com/api/events/list), and
// it is where Stripe sends an integration whose webhooks were not
// delivered (docs.stripe.com/webhooks/process-undelivered-events: "Stripe
// only returns events created in the last 30 days").
const eventRetention = 30 * 24 * time.Hour

// listEvents is GET /v1/events: Stripe's event log. Every event the
// simulator made in the last 30 days of its clock, whether its webhook was
// delivered, dropped by a webhook fault, or never sent (no webhook URL),
// newest first, filtered by created (created=T, or created[gt], [gte],
// [lt], [lte]), type (an event type, or a group with * as a wildcard:
// "charge.dispute.*") and types[] (any of several exact types; not with
// type), and paged by limit (default 10, at most 100) and one cursor,
// starting_after (older than an event) or ending_before (newer), as
// Stripe's list endpoints are. Under an events_lag fault an event is
// listed only delay_ms after it was made, as Stripe's list may trail the
// webhooks it sends.
func (s *Simulator) listEvents(c *call) outcome {
	q, e := c.readListQuery("type", "types", "delivery_success")
	if e != nil {
		return rejected(e)
	}
	created := q.created
	if c.str("delivery_success") != "" {
		// Stripe filters on whether the webhook reached every endpoint;
		// the simulator does not track delivery per event, so it says so
		// rather than answer a list that is not filtered.
		return rejected(invalidParameter("delivery_success", "The simulator does not filter events by delivery_success."))
	}
	typ, types := c.str("type"), c.list("types")
	if typ != "" && len(types) > 0 {
		return rejected(invalidRequest(http.StatusBadRequest, "", "types",
			"You may only specify one of these parameters: type, types."))
	}
	now := s.now()
	oldest := now.Add(-eventRetention)
	var lag time.Duration
	if c.fault.Kind == FaultEventsLag {
		lag = time.Duration(c.fault.DelayMS) * time.Millisecond
	}
	matches := func(ev *event) bool {
		if ev.made.Before(oldest) || now.Sub(ev.made) < lag || !created.contains(ev.Created) {
			return false
		}
		switch {
		case typ != "":
			ok, _ := path.Match(typ, ev.Type) // a bad pattern matches nothing
			return ok
		case len(types) > 0:
			return slices.Contains(types, ev.Type)
		}
		return true
	}

	all := s.state.events.order // oldest first
	var older, newer []*event   // what lies each side of the cursor
	switch cursor, param := q.cursor(); cursor {
	case "":
		older = all
	default:
		ev, ok := s.state.events.get(cursor)
		if !ok || ev.made.Before(oldest) {
			return rejected(noSuchObject(http.StatusBadRequest, "event", param, cursor))
		}
		// Events are appended as they are made: the table's order is
		// their order, and a binary search on made finds the cursor's
		// neighbourhood without walking 30 days of events.
		i := indexOfEvent(all, ev)
		older, newer = all[:i], all[i+1:]
	}

	// The walk back stops at the first event past the log's 30 days or
	// under created's lower bound (events are in order of made, and so of
	// created): without the bound, a reader asking for the last minutes
	// (the reconciler's window, created[gte]) walked every event of the 30
	// days whenever the window held less than a page, and a month's
	// benchmark slowed with every payment.
	page, hasMore := listPage(older, newer, q.before, q.limit, matches,
		func(ev *event) bool { return ev.made.Before(oldest) || created.below(ev.Created) })
	return listAnswer(c, page, hasMore)
}

// forgetExpiredEvents drops the events older than eventRetention, as the
// simulator's clock passes them: Stripe lists no older ones, and a
// simulator that kept them would hold every event of a long benchmark in
// memory (cmd/paymentsbench -reconcile). Events are appended as they are
// made, so the expired ones are at the front, and a call costs only what it
// drops. A webhook already queued keeps its own encoding (emit).
func (st *state) forgetExpiredEvents(now time.Time) {
	oldest := now.Add(-eventRetention)
	n := 0
	for _, ev := range st.events.order {
		if !ev.made.Before(oldest) {
			break
		}
		delete(st.events.byID, ev.ID)
		n++
	}
	if n > 0 {
		clear(st.events.order[:n]) // no pointer kept alive by the slice's array
		st.events.order = st.events.order[n:]
	}
}

// indexOfEvent is ev's place in all. Events are appended as they are made,
// so the table is in order of made and a binary search finds ev's
// neighbourhood without walking 30 days of events; a scan is the fallback
// should a clock have stepped back.
func indexOfEvent(all []*event, ev *event) int {
	i, _ := slices.BinarySearchFunc(all, ev.made, func(e *event, t time.Time) int { return e.made.Compare(t) })
	for ; i < len(all) && !all[i].made.After(ev.made); i++ {
		if all[i] == ev {
			return i
		}
	}
	return slices.Index(all, ev)
}

// list returns an array parameter's values: name[]=a&name[]=b, or
// name[0]=a&name[1]=b as stripe-go sends it (order does not matter to
// its one user, types[]).
func (c *call) list(name string) []string {
	var keys []string
	for param := range c.form {
		if param == name+"[]" || (strings.HasPrefix(param, name+"[") && strings.HasSuffix(param, "]")) {
			keys = append(keys, param)
		}
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		out = append(out, c.form[k]...)
	}
	return out
}
