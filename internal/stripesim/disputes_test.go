package stripesim_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/example/payments/internal/stripesim"
)

// pm_card_createDispute, as in Stripe's test mode: charged normally, then
// the bank disputes the whole charge; a refund of it is refused with
// charge_disputed; the dispute closes lost, with its events.
func TestDisputes_aDisputedChargeIsChargedBackAndCannotBeRefunded(t *testing.T) {
	t.Parallel()
	f, rcv := setupWithReceiver(t, nil)

	pi, err := f.stripe.PaymentIntents.New(paymentIntent("dispute-1", "pm_card_createDispute"))
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, pi.Status, "charged normally")
	require.Empty(t, f.objects(t, "dispute"), "no dispute before the bank's")
	require.Equal(t, false, f.chargeOf(t, pi.ID)["disputed"])

	f.sim.Advance(2 * time.Second)
	disputes := f.objects(t, "dispute")
	require.Len(t, disputes, 1)
	dp, err := f.stripe.Disputes.Get(disputes[0]["id"].(string), nil)
	require.NoError(t, err)
	require.Equal(t, int64(2000), dp.Amount, "the whole amount")
	require.Equal(t, stripe.DisputeReasonFraudulent, dp.Reason)
	require.Equal(t, stripe.DisputeStatusNeedsResponse, dp.Status)
	require.Equal(t, pi.ID, dp.PaymentIntent.ID)
	require.Equal(t, pi.LatestCharge.ID, dp.Charge.ID)
	require.Equal(t, true, f.chargeOf(t, pi.ID)["disputed"])

	_, err = f.stripe.Refunds.New(refundParams(pi.ID, 0, "refund-disputed"))
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeChargeDisputed)
	require.Empty(t, f.objects(t, "refund"))

	f.control(t, http.MethodPost, "/_sim/disputes/"+dp.ID+"/close", map[string]string{"status": "lost"}, http.StatusOK, nil)
	f.control(t, http.MethodPost, "/_sim/disputes/"+dp.ID+"/close", map[string]string{"status": "won"}, http.StatusBadRequest, nil)
	f.control(t, http.MethodPost, "/_sim/disputes/dp_missing/close", map[string]string{"status": "won"}, http.StatusNotFound, nil)
	f.control(t, http.MethodPost, "/_sim/disputes/"+dp.ID+"/close", map[string]string{"status": "withdrawn"}, http.StatusBadRequest, nil)
	dp, err = f.stripe.Disputes.Get(dp.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.DisputeStatusLost, dp.Status)
	_, err = f.stripe.Refunds.New(refundParams(pi.ID, 0, "refund-lost"))
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeChargeDisputed)

	_, err = f.stripe.Disputes.Get("dp_missing", nil)
	requireStripeError(t, err, http.StatusNotFound, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing)

	require.Equal(t, []string{
		"payment_intent.created", "charge.succeeded", "payment_intent.succeeded",
		"charge.dispute.created", "charge.dispute.funds_withdrawn", "charge.dispute.closed",
	}, waitForEvents(t, rcv, 6))
}

// A dispute the merchant wins gives the money back (funds_reinstated), and
// the charge may be refunded again; a manual capture is disputed once
// captured, not while it is authorised.
func TestDisputes_aWonDisputeReinstatesTheFunds(t *testing.T) {
	t.Parallel()
	f, rcv := setupWithReceiver(t, nil)

	p := paymentIntent("dispute-won", "pm_card_createDispute")
	p.CaptureMethod = stripe.String("manual")
	pi, err := f.stripe.PaymentIntents.New(p)
	require.NoError(t, err)
	f.sim.Advance(time.Minute)
	require.Empty(t, f.objects(t, "dispute"), "an authorisation is not disputed")
	_, err = f.stripe.PaymentIntents.Capture(pi.ID, nil)
	require.NoError(t, err)
	f.sim.Advance(2 * time.Second)
	disputes := f.objects(t, "dispute")
	require.Len(t, disputes, 1)
	id := disputes[0]["id"].(string)

	require.NoError(t, f.sim.CloseDispute(id, "won"))
	dp, err := f.stripe.Disputes.Get(id, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.DisputeStatusWon, dp.Status)
	re, err := f.stripe.Refunds.New(refundParams(pi.ID, 500, "refund-won"))
	require.NoError(t, err)
	require.Equal(t, stripe.RefundStatusSucceeded, re.Status)

	types := waitForEvents(t, rcv, 11)
	require.Equal(t, []string{"charge.dispute.created", "charge.dispute.funds_withdrawn",
		"charge.dispute.closed", "charge.dispute.funds_reinstated"}, types[5:9])
}

// The processing fault: the confirmation answers processing, and delay_ms
// later the payment intent succeeds, with payment_intent.succeeded.
func TestFaults_processingSucceedsLater(t *testing.T) {
	t.Parallel()
	f, rcv := setupWithReceiver(t, nil)
	f.addFault(t, stripesim.Fault{PathPrefix: "/v1/payment_intents", Method: "POST", Kind: stripesim.FaultProcessing, DelayMS: 5000})

	pi, err := f.stripe.PaymentIntents.New(paymentIntent("processing-1", "pm_card_visa"))
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusProcessing, pi.Status)
	require.Equal(t, "pending", f.chargeOf(t, pi.ID)["status"])

	f.sim.Advance(4 * time.Second)
	got, err := f.stripe.PaymentIntents.Get(pi.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusProcessing, got.Status, "not before delay_ms")

	f.sim.Advance(time.Second)
	got, err = f.stripe.PaymentIntents.Get(pi.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, got.Status)
	require.Equal(t, int64(2000), got.AmountReceived)
	require.Equal(t, "succeeded", f.chargeOf(t, pi.ID)["status"])

	// The key replays the answer as it was given: processing.
	again, err := f.stripe.PaymentIntents.New(paymentIntent("processing-1", "pm_card_visa"))
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusProcessing, again.Status)

	require.Equal(t, []string{"payment_intent.created", "charge.pending", "payment_intent.processing",
		"charge.succeeded", "payment_intent.succeeded"}, waitForEvents(t, rcv, 5))
}

// late_500 on a refund, as section 4 of docs/API.md says: the 500 is
// stored under the key at once, and the refund is made delay_ms later,
// with its events; the key keeps answering 500. A retry under a new key
// meanwhile makes a second refund: Stripe then holds two.
func TestFaults_aLate500RefundsLater(t *testing.T) {
	t.Parallel()
	f, rcv := setupWithReceiver(t, nil)
	pi, err := f.stripe.PaymentIntents.New(paymentIntent("late-refund-pi", "pm_card_visa"))
	require.NoError(t, err)
	f.addFault(t, stripesim.Fault{PathPrefix: "/v1/refunds", Method: "POST", Kind: stripesim.FaultLate500, DelayMS: 100_000})

	p := refundParams(pi.ID, 500, "late-refund-1")
	p.AddMetadata("refund", "re_ours")
	_, err = f.stripe.Refunds.New(p)
	requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
	require.Empty(t, f.objects(t, "refund"), "nothing yet")
	_, err = f.stripe.Refunds.New(p)
	se := requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
	require.True(t, replayed(se.LastResponse), "the key keeps its 500")

	retry := refundParams(pi.ID, 500, "late-refund-2")
	retry.AddMetadata("refund", "re_ours")
	_, err = f.stripe.Refunds.New(retry)
	require.NoError(t, err)

	var late map[string]int
	f.control(t, http.MethodGet, "/_sim/late_requests", nil, http.StatusOK, &late)
	require.Equal(t, map[string]int{"late_requests": 1}, late, "the first attempt, not executed yet")
	f.sim.Advance(100 * time.Second)
	require.Zero(t, f.sim.LateRequests())
	refunds := f.objects(t, "refund")
	require.Len(t, refunds, 2, "the first attempt was executed too")
	for _, re := range refunds {
		require.Equal(t, "succeeded", re["status"])
		require.Equal(t, map[string]any{"refund": "re_ours"}, re["metadata"])
	}
	require.EqualValues(t, 1000, f.chargeOf(t, pi.ID)["amount_refunded"])
	types := waitForEvents(t, rcv, 7)
	require.Equal(t, []string{"charge.refunded", "refund.created", "charge.refunded", "refund.created"}, types[3:])
}
