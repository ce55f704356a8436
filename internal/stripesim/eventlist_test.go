package stripesim_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/example/payments/internal/stripesim"
)

// events is every event stripe-go's iterator walks for params, as
// "type id" pairs' ids and types.
func events(t *testing.T, api *client.API, params *stripe.EventListParams) (ids, types []string) {
	t.Helper()
	it := api.Events.List(params)
	for it.Next() {
		ids = append(ids, it.Event().ID)
		types = append(types, string(it.Event().Type))
	}
	require.NoError(t, it.Err())
	return ids, types
}

// GET /v1/events is Stripe's event log: every event the simulator made
// (this one sends no webhooks at all), newest first, filtered by type,
// types[] and created, paged by limit and starting_after as stripe-go's
// iterator expects, for 30 days of the simulator's clock.
func TestListEvents(t *testing.T) {
	t.Parallel()
	f := setup(t)
	pi, err := f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_visa"))
	require.NoError(t, err)
	f.clock.Advance(10 * time.Second)
	re, err := f.stripe.Refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String(pi.ID), Amount: stripe.Int64(500)})
	require.NoError(t, err)

	ids, types := events(t, f.stripe, &stripe.EventListParams{})
	require.Equal(t, []string{"refund.created", "charge.refunded", "payment_intent.succeeded", "charge.succeeded",
		"payment_intent.created"}, types, "newest first, every event made")
	paged := &stripe.EventListParams{}
	paged.Limit = stripe.Int64(2)
	pagedIDs, _ := events(t, f.stripe, paged)
	require.Equal(t, ids, pagedIDs, "paged by starting_after")

	_, types = events(t, f.stripe, &stripe.EventListParams{Type: stripe.String("payment_intent.*")})
	require.Equal(t, []string{"payment_intent.succeeded", "payment_intent.created"}, types, "type, with a wildcard")
	_, types = events(t, f.stripe, &stripe.EventListParams{Types: stripe.StringSlice([]string{"refund.created", "charge.succeeded"})})
	require.Equal(t, []string{"refund.created", "charge.succeeded"}, types, "types[]")
	_, types = events(t, f.stripe, &stripe.EventListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: re.Created}})
	require.Equal(t, []string{"refund.created", "charge.refunded"}, types, "created[gte]")
	_, types = events(t, f.stripe, &stripe.EventListParams{CreatedRange: &stripe.RangeQueryParams{LesserThan: re.Created}})
	require.Len(t, types, 3, "created[lt]")

	before := &stripe.EventListParams{}
	before.EndingBefore = stripe.String(ids[2])
	before.Single = true
	_, types = events(t, f.stripe, before)
	require.Equal(t, []string{"charge.refunded", "refund.created"}, types,
		"ending_before: the newer ones (Stripe sends them newest first; stripe-go walks them back)")

	both := &stripe.EventListParams{Type: stripe.String("refund.created"), Types: stripe.StringSlice([]string{"refund.created"})}
	_, err = f.stripe.Events.List(both).EventList(), f.stripe.Events.List(both).Err()
	var se *stripe.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, http.StatusBadRequest, se.HTTPStatusCode, "type and types together")

	// 30 days of the simulator's clock: then the log has forgotten them.
	f.sim.Advance(30*24*time.Hour + time.Minute)
	ids2, _ := events(t, f.stripe, &stripe.EventListParams{})
	require.Empty(t, ids2)
	gone := &stripe.EventListParams{}
	gone.StartingAfter = stripe.String(ids[0])
	it := f.stripe.Events.List(gone)
	require.False(t, it.Next())
	require.ErrorAs(t, it.Err(), &se)
	require.Equal(t, http.StatusBadRequest, se.HTTPStatusCode)
}

// An event is listed for 30 days of the simulator's clock and not after:
// 31 days on, a payment's events are gone from the list, and a later
// payment's are still there.
func TestListEvents_keeps30Days(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_visa"))
	require.NoError(t, err)
	old, _ := events(t, f.stripe, &stripe.EventListParams{})
	require.Len(t, old, 3)
	f.sim.Advance(2 * 24 * time.Hour)
	_, err = f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_visa"))
	require.NoError(t, err)

	f.sim.Advance(29 * 24 * time.Hour) // the first payment's events are 31 days old, the second's 29
	ids, _ := events(t, f.stripe, &stripe.EventListParams{})
	require.Len(t, ids, 3)
	require.NotContains(t, ids, old[0])
	require.NotContains(t, ids, old[2])
	after := &stripe.EventListParams{}
	after.StartingAfter = stripe.String(old[0])
	it := f.stripe.Events.List(after)
	require.False(t, it.Next())
	var se *stripe.Error
	require.ErrorAs(t, it.Err(), &se, "a cursor 31 days old names no event")
	require.Equal(t, http.StatusBadRequest, se.HTTPStatusCode)
}

// events_lag: an event is listed only delay_ms after it was made, on the
// simulator's clock, as Stripe's list may trail the webhooks it sends.
func TestListEvents_eventsLag(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_visa"))
	require.NoError(t, err)
	require.NoError(t, f.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/events", Method: http.MethodGet,
		Kind: stripesim.FaultEventsLag, DelayMS: 5000, Count: 3}))

	ids, _ := events(t, f.stripe, &stripe.EventListParams{})
	require.Empty(t, ids, "made just now: not listed yet")
	f.sim.Advance(4 * time.Second)
	ids, _ = events(t, f.stripe, &stripe.EventListParams{})
	require.Empty(t, ids)
	f.sim.Advance(time.Second)
	ids, _ = events(t, f.stripe, &stripe.EventListParams{})
	require.Len(t, ids, 3, "listed delay_ms after")
}
