package stripesim

import (
	"crypto/rand"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/example/payments/internal/currency"
)

// A payment intent moves through these statuses here:
//
//	created without confirm:  requires_payment_method or requires_confirmation
//	confirmed, approved:      succeeded (capture_method automatic)
//	                          requires_capture (capture_method manual) --capture--> succeeded
//	confirmed, under the processing fault:
//	                          processing, then succeeded (or requires_capture)
//	                          the fault's delay_ms later
//	confirmed, declined:      requires_payment_method, with last_payment_error
//	confirmed, needs 3-D Secure (pm_card_authenticationRequired):
//	                          requires_action, with a next_action; or, with
//	                          error_on_requires_action=true, a 402
//	                          authentication_required and requires_payment_method
//	canceled:                 canceled, from any status but succeeded; an
//	                          authorisation not captured within 7 days is
//	                          canceled by Stripe (cancellation_reason automatic)
//
// A confirmation that reaches the card creates a charge: the approved one is
// captured along with the payment intent, the declined one stays failed. One
// that stops for authentication creates none, as at Stripe: the customer has
// not authenticated, so nothing was sent to the card's issuer.

// cancelableStatuses are the statuses Stripe lets a payment intent be
// canceled from.
var cancelableStatuses = []string{
	statusRequiresPaymentMethod, statusRequiresCapture, statusRequiresConfirmation,
	statusRequiresAction, statusProcessing,
}

// createPaymentIntent is POST /v1/payment_intents.
func (s *Simulator) createPaymentIntent(c *call) outcome {
	p, e := s.paymentIntentParams(c)
	if e != nil {
		return rejected(e)
	}

	pi := s.newPaymentIntent(c, p)
	s.state.paymentIntents.add(pi.ID, pi)
	s.emit(c, "payment_intent.created", pi)
	if !p.confirm {
		return succeeded(pi)
	}
	return s.confirm(c, pi, p)
}

// paymentIntentParams are the validated parameters of a new payment intent.
type paymentIntentParams struct {
	amount        int64
	currency      string
	captureMethod string
	confirm       bool
	// errorOnRequiresAction: a payment that needs the customer (3-D Secure)
	// fails with a 402 instead of waiting in requires_action.
	errorOnRequiresAction bool
	paymentMethod         string
	card                  testCard // the card behind paymentMethod
	customer              string
}

func (s *Simulator) paymentIntentParams(c *call) (p paymentIntentParams, e *apiError) {
	if e = c.allowOnly("amount", "currency", "payment_method", "confirm", "capture_method",
		"metadata", "description", "customer", "payment_method_types", "automatic_payment_methods",
		"return_url", "receipt_email", "statement_descriptor", "statement_descriptor_suffix",
		"off_session", "error_on_requires_action", "expand"); e != nil {
		return p, e
	}
	if p.amount, e = c.amount("amount"); e != nil {
		return p, e
	}
	if p.amount == 0 {
		return p, missingParameter("amount")
	}
	if p.currency, e = c.currency(); e != nil {
		return p, e
	}
	if e = minimumCharge(p.currency, p.amount); e != nil {
		return p, e
	}
	if p.captureMethod, e = c.oneOf("capture_method", "automatic", "automatic", "automatic_async", "manual"); e != nil {
		return p, e
	}
	if p.confirm, e = c.boolean("confirm"); e != nil {
		return p, e
	}
	if p.errorOnRequiresAction, e = c.boolean("error_on_requires_action"); e != nil {
		return p, e
	}
	if p.paymentMethod, p.card, e = s.paymentMethodParam(c, p.confirm); e != nil {
		return p, e
	}
	p.customer = c.str("customer")
	if _, ok := s.state.customers.get(p.customer); p.customer != "" && !ok {
		return p, noSuchObject(http.StatusBadRequest, "customer", "customer", p.customer)
	}
	return p, nil
}

func (s *Simulator) newPaymentIntent(c *call, p paymentIntentParams) *paymentIntent {
	id := newID("pi")
	pi := &paymentIntent{
		ID:                 id,
		Object:             "payment_intent",
		Amount:             p.amount,
		CaptureMethod:      p.captureMethod,
		ClientSecret:       id + "_secret_" + rand.Text(),
		ConfirmationMethod: "automatic",
		Created:            s.now().Unix(),
		Currency:           p.currency,
		Customer:           nullable(p.customer),
		Description:        nullable(c.str("description")),
		Metadata:           c.metadata(),
		PaymentMethod:      nullable(p.paymentMethod),
		PaymentMethodTypes: []string{"card"},
		Status:             statusRequiresPaymentMethod,
	}
	if p.paymentMethod != "" {
		pi.Status = statusRequiresConfirmation
	}
	return pi
}

// paymentMethodParam resolves payment_method to a test card; confirming
// needs one.
func (s *Simulator) paymentMethodParam(c *call, confirm bool) (string, testCard, *apiError) {
	pmID := c.str("payment_method")
	if pmID == "" {
		if confirm {
			return "", testCard{}, invalidRequest(http.StatusBadRequest, "payment_intent_unexpected_state", "payment_method",
				"You cannot confirm this PaymentIntent because it's missing a payment method.")
		}
		return "", testCard{}, nil
	}
	card, ok := testCards[pmID]
	if !ok {
		return "", testCard{}, noSuchObject(http.StatusBadRequest, "PaymentMethod", "payment_method", pmID)
	}
	return pmID, card, nil
}

// currency returns the lower-cased currency parameter, which is required
// and must be one Stripe charges in (package currency's table).
func (c *call) currency() (string, *apiError) {
	cur := strings.ToLower(c.str("currency"))
	if cur == "" {
		return "", missingParameter("currency")
	}
	if _, ok := currency.Lookup(cur); !ok {
		return "", invalidParameter("currency", "Invalid currency: %s. Stripe currently supports the currencies listed "+
			"at https://stripe.com/docs/currencies.", cur)
	}
	return cur, nil
}

// minimumCharge refuses an amount under the currency's minimum charge, as
// Stripe does; cur is a supported currency.
func minimumCharge(cur string, amount int64) *apiError {
	c, _ := currency.Lookup(cur)
	if amount >= c.MinCharge {
		return nil
	}
	return invalidRequest(http.StatusBadRequest, "amount_too_small", "amount",
		"Amount must be at least %s", c.Format(c.MinCharge))
}

// confirm charges the payment intent's card: the decline is a stored 402,
// an approval succeeds or waits for capture; a card that needs 3-D Secure
// stops before the charge.
func (s *Simulator) confirm(c *call, pi *paymentIntent, p paymentIntentParams) outcome {
	card := p.card
	if card.needsAuthentication {
		return s.requireAction(c, pi, card, p.errorOnRequiresAction)
	}
	ch := s.newCharge(pi)
	pi.LatestCharge = &ch.ID

	if card.declineCode != "" {
		return s.decline(c, pi, ch, card)
	}

	if c.processingFor > 0 {
		// The processing fault: the payment method takes its time, as
		// Stripe's asynchronous ones do. The charge pends, and the payment
		// intent answers processing until the charge goes through.
		ch.Status = "pending"
		pi.Status = statusProcessing
		s.emit(c, "charge.pending", ch)
		s.emit(c, "payment_intent.processing", pi)
		s.later(c.processingFor, func() {
			if pi.Status == statusProcessing {
				s.approve(nil, pi, ch)
			}
		})
		return succeeded(pi)
	}
	s.approve(c, pi, ch)
	return succeeded(pi)
}

// approve records the card's approval of ch: the payment intent waits for
// its capture (capture_method manual) or is captured whole. c is the
// request that confirmed it, nil when the approval comes later (the
// processing fault).
func (s *Simulator) approve(c *call, pi *paymentIntent, ch *charge) {
	ch.Status = "succeeded"
	ch.Paid = true
	s.emit(c, "charge.succeeded", ch)
	if pi.CaptureMethod == "manual" {
		pi.Status = statusRequiresCapture
		pi.AmountCapturable = pi.Amount
		s.emit(c, "payment_intent.amount_capturable_updated", pi)
		s.later(s.authorisationLifetime, func() { s.expireAuthorisation(pi) })
		return
	}
	s.captureCharge(pi, ch, pi.Amount)
	s.emit(c, "payment_intent.succeeded", pi)
}

// requireAction stops a confirmation that needs the customer to
// authenticate: the payment intent waits in requires_action, with the
// next_action Stripe.js would carry out, or, when the request asked for an
// error instead, goes back to requires_payment_method with a stored 402
// authentication_required, as Stripe does.
func (s *Simulator) requireAction(c *call, pi *paymentIntent, card testCard, errorOnRequiresAction bool) outcome {
	if errorOnRequiresAction {
		lastError := card.authenticationRequired(*pi.PaymentMethod, s.now().Unix())
		pi.Status = statusRequiresPaymentMethod
		pi.PaymentMethod = nil
		pi.LastPaymentError = lastError
		s.emit(c, "payment_intent.payment_failed", pi)
		response := *lastError
		response.PaymentIntent = snapshot(pi)
		return failed(&response)
	}
	source := newID("src")
	pi.Status = statusRequiresAction
	pi.NextAction = snapshot(map[string]any{
		"type": "use_stripe_sdk",
		"use_stripe_sdk": map[string]string{
			"type":      "three_d_secure_redirect",
			"source":    source,
			"stripe_js": "https://hooks.stripe.com/redirect/authenticate/" + source,
		},
	})
	s.emit(c, "payment_intent.requires_action", pi)
	return succeeded(pi)
}

func (s *Simulator) newCharge(pi *paymentIntent) *charge {
	ch := &charge{
		ID:            newID("ch"),
		Object:        "charge",
		Amount:        pi.Amount,
		Created:       s.now().Unix(),
		Currency:      pi.Currency,
		Customer:      pi.Customer,
		Description:   pi.Description,
		Metadata:      pi.Metadata,
		PaymentIntent: pi.ID,
		PaymentMethod: *pi.PaymentMethod,
	}
	s.state.charges.add(ch.ID, ch)
	return ch
}

// decline fails the charge and sends the payment intent back to
// requires_payment_method, as Stripe does.
func (s *Simulator) decline(c *call, pi *paymentIntent, ch *charge, card testCard) outcome {
	lastError := card.decline(*pi.PaymentMethod, ch.ID, ch.Created)

	ch.Status = "failed"
	ch.FailureCode = nullable(lastError.Code)
	ch.FailureMessage = nullable(lastError.Message)
	pi.Status = statusRequiresPaymentMethod
	pi.PaymentMethod = nil
	pi.LastPaymentError = lastError
	s.emit(c, "charge.failed", ch)
	s.emit(c, "payment_intent.payment_failed", pi)

	response := *lastError
	response.PaymentIntent = snapshot(pi)
	return failed(&response)
}

// captureCharge captures amount of the charge and releases the rest of the
// authorisation. Stripe counts a release in the charge's amount_refunded
// ("any additional amount is automatically refunded"), though no money went
// back to anyone: a partial capture of 4,000 out of 10,000 shows 6,000
// refunded.
func (s *Simulator) captureCharge(pi *paymentIntent, ch *charge, amount int64) {
	ch.Captured = true
	ch.AmountCaptured = amount
	ch.release(ch.Amount - amount)
	pi.Status = statusSucceeded
	pi.AmountCapturable = 0
	pi.AmountReceived = amount
	if testCards[ch.PaymentMethod].disputed {
		s.later(laterDelay, func() { s.openDispute(ch) })
	}
}

// getPaymentIntent is GET /v1/payment_intents/{id}.
func (s *Simulator) getPaymentIntent(c *call) outcome {
	pi, ok := s.state.paymentIntents.get(c.id)
	if !ok {
		return rejected(noSuchObject(http.StatusNotFound, "payment_intent", "intent", c.id))
	}
	return succeeded(pi)
}

// defaultAuthorisationLifetime is how long Stripe keeps an uncaptured card
// authorisation before canceling it.
const defaultAuthorisationLifetime = 7 * 24 * time.Hour

// expireAuthorisation cancels an authorisation nobody captured or canceled
// in time, as Stripe does (cancellation_reason automatic).
func (s *Simulator) expireAuthorisation(pi *paymentIntent) {
	if pi.Status != statusRequiresCapture {
		return
	}
	s.cancel(nil, pi, "automatic")
}

// capturePaymentIntent is POST /v1/payment_intents/{id}/capture.
func (s *Simulator) capturePaymentIntent(c *call) outcome {
	if e := c.allowOnly("amount_to_capture", "final_capture", "metadata", "expand",
		"statement_descriptor", "statement_descriptor_suffix"); e != nil {
		return rejected(e)
	}
	pi, ok := s.state.paymentIntents.get(c.id)
	if !ok {
		return rejected(noSuchObject(http.StatusNotFound, "payment_intent", "intent", c.id))
	}
	amount, e := c.amount("amount_to_capture")
	if e != nil {
		return rejected(e)
	}

	if pi.Status != statusRequiresCapture {
		return failed(unexpectedState(pi, "captured", statusRequiresCapture))
	}
	if amount == 0 {
		amount = pi.AmountCapturable
	}
	if amount > pi.AmountCapturable {
		return failed(invalidRequest(http.StatusBadRequest, "amount_too_large", "amount_to_capture",
			"The amount to capture (%d) is greater than the amount capturable (%d).", amount, pi.AmountCapturable))
	}

	ch, _ := s.state.charges.get(*pi.LatestCharge)
	s.captureCharge(pi, ch, amount)
	s.emit(c, "charge.captured", ch)
	s.emit(c, "payment_intent.succeeded", pi)
	return succeeded(pi)
}

// cancelPaymentIntent is POST /v1/payment_intents/{id}/cancel.
func (s *Simulator) cancelPaymentIntent(c *call) outcome {
	if e := c.allowOnly("cancellation_reason", "expand"); e != nil {
		return rejected(e)
	}
	pi, ok := s.state.paymentIntents.get(c.id)
	if !ok {
		return rejected(noSuchObject(http.StatusNotFound, "payment_intent", "intent", c.id))
	}
	reason, e := c.oneOf("cancellation_reason", "",
		"duplicate", "fraudulent", "requested_by_customer", "abandoned")
	if e != nil {
		return rejected(e)
	}

	if !slices.Contains(cancelableStatuses, pi.Status) {
		return failed(unexpectedState(pi, "canceled", strings.Join(cancelableStatuses, ", ")))
	}
	s.cancel(c, pi, reason)
	return succeeded(pi)
}

// cancel cancels pi; c is the request, nil when Stripe does it on its own.
func (s *Simulator) cancel(c *call, pi *paymentIntent, reason string) {
	if pi.Status == statusRequiresCapture {
		// The authorisation is released whole: Stripe shows the uncaptured
		// charge as refunded.
		ch, _ := s.state.charges.get(*pi.LatestCharge)
		ch.release(ch.Amount)
	}
	canceledAt := s.now().Unix()
	pi.Status = statusCanceled
	pi.CanceledAt = &canceledAt
	pi.CancellationReason = nullable(reason)
	pi.AmountCapturable = 0
	pi.NextAction = nil
	s.emit(c, "payment_intent.canceled", pi)
}
