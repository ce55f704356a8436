package stripesim_test

import (
	"encoding/json"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/stripesim"
)

// Seed makes what a request would, and EventsSince shows the events Stripe
// made on its own afterwards (a dispute, laterDelay after the payment),
// from a moment on, by type, as a webhook would carry them.
func TestSeedAndEventsSince(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	sim := stripesim.New(stripesim.Config{Now: func() time.Time { return start }})
	t.Cleanup(sim.Close)
	s, err := sim.Seed("/v1/payment_intents", url.Values{"amount": {"2000"}, "currency": {"usd"},
		"payment_method": {"pm_card_createDispute"}, "confirm": {"true"}, "metadata[payment]": {"pay_1"}})
	require.NoError(t, err)
	require.Len(t, s.Events, 3, "payment_intent.created, charge.succeeded, payment_intent.succeeded")
	require.Empty(t, sim.EventsSince(start, "charge.dispute."), "the dispute comes later")

	mark := sim.Advance(time.Second)
	sim.Advance(2 * time.Second)
	evs := sim.EventsSince(mark, "charge.dispute.")
	require.Len(t, evs, 2)
	require.Equal(t, "charge.dispute.created", evs[0].Type)
	require.Equal(t, "charge.dispute.funds_withdrawn", evs[1].Type)
	var ev struct {
		ID   string `json:"id"`
		Data struct {
			Object struct {
				Status        string `json:"status"`
				PaymentIntent string `json:"payment_intent"`
			} `json:"object"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(evs[0].Payload, &ev))
	require.Equal(t, evs[0].ID, ev.ID)
	require.Equal(t, s.ID, ev.Data.Object.PaymentIntent)
	require.Equal(t, "needs_response", ev.Data.Object.Status)
	require.Empty(t, sim.EventsSince(sim.Advance(time.Second), "charge.dispute."), "nothing made since")
	require.Len(t, sim.EventsSince(start, ""), 5, "every event, without a prefix")
}
