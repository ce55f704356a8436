package stripeclient

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/stripe/stripe-go/v76"
)

// EventsQuery is one page of Stripe's event log to read (GET /v1/events):
// the events created in [Since, Until] (a zero bound is open), newest
// first, the page after StartingAfter when it is set, 100 at most: the
// list's largest page (docs.stripe.com/api/events/list: "limit ... between
// 1 and 100"), of the given types.
type EventsQuery struct {
	Since, Until  time.Time
	StartingAfter string
	Types         []string // types[]: only these (Stripe takes up to 20); none: every type
	Limit         int      // the page's size; 0: 100
}

// EventsPage is one page of the log: each event as Stripe sent it (the
// bytes a webhook of it would carry), newest first, and whether older
// events in the range are left.
type EventsPage struct {
	Events  []json.RawMessage
	HasMore bool
}

// ListEvents reads one page of Stripe's event log. Stripe keeps events for
// 30 days and points an integration that missed webhooks to this list
// (docs.stripe.com/webhooks/process-undelivered-events). Each event is
// handed on as the bytes Stripe sent, so that it is applied exactly as
// its webhook would have been.
func (c *Client) ListEvents(ctx context.Context, q EventsQuery) (EventsPage, error) {
	params := &stripe.EventListParams{}
	params.Context = ctx
	params.Limit = stripe.Int64(100)
	if q.Limit > 0 {
		params.Limit = stripe.Int64(int64(q.Limit))
	}
	params.Single = true // this page only: the caller pages, at its own rate
	if !q.Since.IsZero() || !q.Until.IsZero() {
		params.CreatedRange = &stripe.RangeQueryParams{}
		if !q.Since.IsZero() {
			params.CreatedRange.GreaterThanOrEqual = q.Since.Unix()
		}
		if !q.Until.IsZero() {
			params.CreatedRange.LesserThanOrEqual = q.Until.Unix()
		}
	}
	params.Types = stripe.StringSlice(q.Types)
	if q.StartingAfter != "" {
		params.StartingAfter = stripe.String(q.StartingAfter)
	}
	it := c.api.Events.List(params)
	for it.Next() { // stripe-go decodes the page; its raw body is read below
	}
	if err := it.Err(); err != nil {
		return EventsPage{}, fmt.Errorf("stripe: list events: %w", err)
	}
	list := it.EventList()
	if list == nil || list.LastResponse == nil {
		return EventsPage{}, fmt.Errorf("stripe: list events: no response")
	}
	var raw struct {
		Data    []json.RawMessage `json:"data"`
		HasMore bool              `json:"has_more"`
	}
	if err := json.Unmarshal(list.LastResponse.RawJSON, &raw); err != nil {
		return EventsPage{}, fmt.Errorf("stripe: list events: decoding the page: %w", err)
	}
	return EventsPage{Events: raw.Data, HasMore: raw.HasMore}, nil
}
