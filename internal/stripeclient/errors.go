package stripeclient

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/stripe/stripe-go/v76"
)

// ErrorClass says what a failed call means for the caller; the package
// comment lists what falls in each class.
type ErrorClass int

const (
	// Transient: the call may or may not have taken effect at Stripe. Retry
	// later with the same idempotency key; never store it as final. It is the
	// zero value because it is the safe default: a retry with the same key
	// can never charge twice.
	Transient ErrorClass = iota
	// Terminal: Stripe's final answer for this idempotency key. Store it.
	Terminal
)

func (c ErrorClass) String() string {
	if c == Terminal {
		return "terminal"
	}
	return "transient"
}

// Classify sorts an error returned by a Client call. It is meant for
// non-nil errors; nil is Transient like anything unrecognised.
func Classify(err error) ErrorClass {
	var stripeErr *stripe.Error
	switch {
	case errors.Is(err, ErrNoIdempotencyKey):
		return Terminal // a bug in the caller: retrying cannot help
	case errors.As(err, &stripeErr):
		return classifyStatus(stripeErr.HTTPStatusCode)
	default:
		// Network errors, timeouts, context errors, a body that is not
		// Stripe's JSON (a proxy's error page): the call's fate is unknown.
		return Transient
	}
}

// classifyStatus classifies an error Stripe answered with.
func classifyStatus(status int) ErrorClass {
	switch {
	case status == http.StatusConflict, // idempotency_key_in_use: the first attempt still runs
		status == http.StatusTooManyRequests, // rate limit or lock_timeout
		status == http.StatusUnauthorized,    // bad or revoked key: the operator's to fix
		status == http.StatusForbidden,       // key lacks a permission: likewise
		status >= 500:
		return Transient
	case status >= 400:
		return Terminal // 400 (invalid request, idempotency_error), 402 (card), 404...
	default:
		return Transient
	}
}

// ErrChildKeySpent: Stripe answered a 5xx from its idempotency store
// (Idempotent-Replayed: true). Stripe stores a request's result once its
// execution began, 500s included, and replays it to every later request
// with the key for 24 hours: retrying the same key can never get past it.
// The call is still Transient (the object may or may not exist at Stripe);
// the caller must find out, and then carry on with another key.
var ErrChildKeySpent = errors.New("stripeclient: Stripe replayed a stored 5xx for this idempotency key; the key is spent")

// callError is the error of a call made with an idempotency key: err,
// marked ErrChildKeySpent when it is a replayed 5xx. The stripe.Error stays
// reachable with errors.As.
func callError(err error) error {
	var stripeErr *stripe.Error
	if errors.As(err, &stripeErr) && stripeErr.HTTPStatusCode >= 500 &&
		stripeErr.LastResponse != nil && stripeErr.LastResponse.Header.Get("Idempotent-Replayed") == "true" {
		return fmt.Errorf("%w: %w", ErrChildKeySpent, err)
	}
	return err
}

// Decline is a card decline, from the card_error Stripe returned.
type Decline struct {
	Code          string // "card_declined", or e.g. "expired_card", "incorrect_cvc"
	DeclineCode   string // the issuer's reason, e.g. "insufficient_funds"; may be empty
	Message       string // Stripe's message, fit to show the customer
	PaymentIntent string // the declined payment intent's id, when Stripe sent it
	Charge        string // the failed charge's id, when Stripe sent it
}

// AsDecline returns the decline err carries, if it is a card error.
func AsDecline(err error) (Decline, bool) {
	var stripeErr *stripe.Error
	if !errors.As(err, &stripeErr) || stripeErr.Type != stripe.ErrorTypeCard {
		return Decline{}, false
	}
	d := Decline{
		Code:        string(stripeErr.Code),
		DeclineCode: string(stripeErr.DeclineCode),
		Message:     stripeErr.Msg,
		Charge:      stripeErr.ChargeID,
	}
	if stripeErr.PaymentIntent != nil {
		d.PaymentIntent = stripeErr.PaymentIntent.ID
	}
	return d, true
}
