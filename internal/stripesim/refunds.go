package stripesim

import "net/http"

// createRefund is POST /v1/refunds. It refunds part or all of what a payment
// intent's charge captured, never more:
//
//	nothing captured (authorised only, declined, canceled): 400 charge_not_refundable
//	everything already refunded:                            400 charge_already_refunded
//	more than what is left:                                 400 amount_too_large
//	charged back (a dispute the merchant has not won):      400 charge_disputed
//
// These are decided against the charge's state, so they are stored under the
// idempotency key like a success.
//
// Most refunds succeed at once. As in Stripe's test mode, a refund of
// pm_card_pendingRefund answers pending and succeeds laterDelay later, and one
// of pm_card_refundFail answers succeeded and fails laterDelay later
// (failure_reason expired_or_canceled_card); each later change sends
// charge.refund.updated. A refund sends charge.refunded and refund.created. The charge's amount_refunded counts every refund
// that has not failed, pending ones included, and what a partial capture
// released, as Stripe's does: a refund that fails gives its amount back to
// the charge. What may be refunded is what was captured less those refunds.
func (s *Simulator) createRefund(c *call) outcome {
	pi, amount, reason, e := s.refundParams(c)
	if e != nil {
		return rejected(e)
	}

	ch, e := refundableCharge(s.state, pi)
	if e != nil {
		return failed(e)
	}
	if s.refusesRefunds(ch) {
		return failed(chargeDisputed(ch))
	}
	if amount == 0 {
		amount = ch.refundable()
	}
	if amount > ch.refundable() {
		return failed(invalidRequest(http.StatusBadRequest, "amount_too_large", "amount",
			"Refund amount (%d %s) is greater than unrefunded amount on charge (%d %s).",
			amount, ch.Currency, ch.refundable(), ch.Currency))
	}

	re := &refund{
		ID:            newID("re"),
		Object:        "refund",
		Amount:        amount,
		Charge:        ch.ID,
		Created:       s.now().Unix(),
		Currency:      ch.Currency,
		Metadata:      c.metadata(),
		PaymentIntent: pi.ID,
		Reason:        nullable(reason),
		Status:        refundSucceeded,
	}
	s.state.refunds.add(re.ID, re)
	ch.refund(amount)
	switch testCards[ch.PaymentMethod].refunds {
	case refundPendsThenSucceeds:
		re.Status = refundPending
		s.later(laterDelay, func() { s.settleRefund(re) })
	case refundFailsLater:
		s.later(laterDelay, func() { s.failRefund(re, ch, "expired_or_canceled_card") })
	}
	// Stripe sends both for every refund, however it was made (the API,
	// the dashboard): docs.stripe.com/api/refunds lists refund.created
	// among a refund's events. At this API version the charge does not
	// list its refunds, so refund.created is the event that names it.
	s.emit(c, "charge.refunded", ch)
	s.emit(c, "refund.created", re)
	return succeeded(re)
}

// Refund statuses used by the simulator.
const (
	refundPending   = "pending"
	refundSucceeded = "succeeded"
	refundFailed    = "failed"
)

// settleRefund is the later success of a pending refund.
func (s *Simulator) settleRefund(re *refund) {
	if re.Status != refundPending {
		return
	}
	re.Status = refundSucceeded
	s.emit(nil, "charge.refund.updated", re)
}

// failRefund is the later failure of a refund: its amount goes back to the
// charge, which may be refunded again.
func (s *Simulator) failRefund(re *refund, ch *charge, reason string) {
	if re.Status == refundFailed {
		return
	}
	re.Status = refundFailed
	re.FailureReason = reason
	ch.refund(-re.Amount)
	s.emit(nil, "charge.refund.updated", re)
}

// refundParams validates a refund's parameters and finds its payment intent,
// named directly or through its charge.
func (s *Simulator) refundParams(c *call) (pi *paymentIntent, amount int64, reason string, e *apiError) {
	if e := c.allowOnly("payment_intent", "charge", "amount", "reason", "metadata", "expand",
		"instructions_email", "refund_application_fee", "reverse_transfer"); e != nil {
		return nil, 0, "", e
	}
	if amount, e = c.amount("amount"); e != nil {
		return nil, 0, "", e
	}
	if reason, e = c.oneOf("reason", "", "duplicate", "fraudulent", "requested_by_customer"); e != nil {
		return nil, 0, "", e
	}
	piID := c.str("payment_intent")
	if chID := c.str("charge"); chID != "" && piID == "" {
		ch, ok := s.state.charges.get(chID)
		if !ok {
			return nil, 0, "", noSuchObject(http.StatusBadRequest, "charge", "charge", chID)
		}
		piID = ch.PaymentIntent
	}
	if piID == "" {
		return nil, 0, "", invalidRequest(http.StatusBadRequest, "parameter_missing", "payment_intent",
			"One of the following params should be provided for this request: payment_intent or charge.")
	}
	pi, ok := s.state.paymentIntents.get(piID)
	if !ok {
		return nil, 0, "", noSuchObject(http.StatusBadRequest, "payment_intent", "payment_intent", piID)
	}
	return pi, amount, reason, nil
}

// refundableCharge is the captured charge of pi with something left to
// refund.
func refundableCharge(st *state, pi *paymentIntent) (*charge, *apiError) {
	var ch *charge
	if pi.LatestCharge != nil {
		ch, _ = st.charges.get(*pi.LatestCharge)
	}
	if pi.Status != statusSucceeded || ch == nil || !ch.Captured {
		return nil, invalidRequest(http.StatusBadRequest, "charge_not_refundable", "payment_intent",
			"This PaymentIntent (status %s) does not have a captured charge to refund. "+
				"Cancel it instead to release an authorisation.", pi.Status)
	}
	if ch.refundable() == 0 {
		return nil, invalidRequest(http.StatusBadRequest, "charge_already_refunded", "",
			"Charge %s has already been refunded.", ch.ID)
	}
	return ch, nil
}

// getRefund is GET /v1/refunds/{id}.
func (s *Simulator) getRefund(c *call) outcome {
	re, ok := s.state.refunds.get(c.id)
	if !ok {
		return rejected(noSuchObject(http.StatusNotFound, "refund", "id", c.id))
	}
	return succeeded(re)
}
