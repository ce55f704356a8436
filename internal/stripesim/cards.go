package stripesim

import (
	"net/http"
	"time"
)

// testCard is the behaviour of one of Stripe's test payment methods.
type testCard struct {
	brand       string
	last4       string
	declineCode string // empty: the card is approved
	message     string // the decline message Stripe shows
	// needsAuthentication: confirming needs 3-D Secure (requires_action).
	needsAuthentication bool
	refunds             refundBehaviour
	// disputed: the customer's bank disputes the charge laterDelay after
	// it is captured (disputes.go).
	disputed bool
}

// refundBehaviour is what becomes of a refund of a card's charge.
type refundBehaviour int

const (
	refundSucceeds          refundBehaviour = iota // succeeded at once, for good
	refundFailsLater                               // succeeded, then failed laterDelay later
	refundPendsThenSucceeds                        // pending, then succeeded laterDelay later
)

// testCards are the test payment methods the simulator knows, with Stripe's
// card numbers and decline messages.
var testCards = map[string]testCard{
	"pm_card_visa":       {brand: "visa", last4: "4242"},
	"pm_card_mastercard": {brand: "mastercard", last4: "4444"},
	"pm_card_chargeDeclined": {
		brand: "visa", last4: "0002",
		declineCode: "generic_decline", message: "Your card was declined.",
	},
	"pm_card_chargeDeclinedInsufficientFunds": {
		brand: "visa", last4: "9995",
		declineCode: "insufficient_funds", message: "Your card has insufficient funds.",
	},
	"pm_card_chargeDeclinedLostCard": {
		brand: "visa", last4: "9987",
		declineCode: "lost_card", message: "Your card was declined.",
	},
	"pm_card_authenticationRequired": {brand: "visa", last4: "3184", needsAuthentication: true},
	"pm_card_refundFail":             {brand: "visa", last4: "5126", refunds: refundFailsLater},
	"pm_card_pendingRefund":          {brand: "visa", last4: "7726", refunds: refundPendsThenSucceeds},
	"pm_card_createDispute":          {brand: "visa", last4: "0259", disputed: true},
}

// paymentMethod describes the card as Stripe embeds it in a card error: the
// payment method created (at created, Unix seconds) for the test card. A
// test card has no billing details, expires a year after it was created
// (any future date will do for Stripe's test cards) and is a credit card
// (Stripe lists its debit and prepaid test cards apart); the simulator does
// not model the issuing country, which Stripe's schema allows to be null.
func (tc testCard) paymentMethod(id string, created int64) *paymentMethod {
	expires := time.Unix(created, 0).UTC().AddDate(1, 0, 0)
	return &paymentMethod{
		ID:     id,
		Object: "payment_method",
		Card: paymentMethodCard{
			Brand:    tc.brand,
			ExpMonth: int64(expires.Month()),
			ExpYear:  int64(expires.Year()),
			Funding:  "credit",
			Last4:    tc.last4,
		},
		Created:  created,
		Metadata: metadata{},
		Type:     "card",
	}
}

// authenticationRequired is the card_error Stripe reports when a payment
// that needs 3-D Secure is confirmed with error_on_requires_action=true, at
// now (Unix seconds). No charge was attempted, so none is named.
func (tc testCard) authenticationRequired(pmID string, now int64) *apiError {
	return &apiError{
		status:        http.StatusPaymentRequired,
		Type:          typeCard,
		Code:          "authentication_required",
		DeclineCode:   "authentication_required",
		DocURL:        "https://stripe.com/docs/error-codes/authentication-required",
		Message:       "Your card was declined. This transaction requires authentication.",
		PaymentMethod: tc.paymentMethod(pmID, now),
	}
}

// decline is the card_error Stripe reports for a declined charge, made at
// now (Unix seconds).
func (tc testCard) decline(pmID, chargeID string, now int64) *apiError {
	return &apiError{
		status:        http.StatusPaymentRequired,
		Type:          typeCard,
		Code:          "card_declined",
		DeclineCode:   tc.declineCode,
		DocURL:        "https://stripe.com/docs/error-codes/card-declined",
		Message:       tc.message,
		Charge:        chargeID,
		PaymentMethod: tc.paymentMethod(pmID, now),
	}
}
