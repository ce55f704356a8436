package stripeclient

import (
	"context"
	"fmt"
	"time"

	"github.com/stripe/stripe-go/v76"
)

// PaymentIntentRequest is a payment to create and confirm in one call.
type PaymentIntentRequest struct {
	Amount          int64             // minor units, e.g. 2000 for $20.00
	Currency        string            // lower-case ISO 4217, e.g. "usd"
	PaymentMethod   string            // e.g. "pm_card_visa"
	CaptureManually bool              // authorise only; capture or cancel later
	Description     string            // optional
	Metadata        map[string]string // optional; found again with ListPaymentIntentsByMetadata
}

// CreatePaymentIntent creates and confirms a payment intent. A declined card
// is a Terminal error (see AsDecline); an approved one comes back succeeded,
// or requires_capture when CaptureManually is set. A card that needs the
// customer to authenticate (3-D Secure) is a decline too, with the code
// authentication_required: the service has no customer at hand to send
// through the challenge, so it asks Stripe for the error
// (error_on_requires_action) rather than a payment intent stuck in
// requires_action.
func (c *Client) CreatePaymentIntent(ctx context.Context, idempotencyKey string, req PaymentIntentRequest) (*stripe.PaymentIntent, error) {
	captureMethod := stripe.PaymentIntentCaptureMethodAutomatic
	if req.CaptureManually {
		captureMethod = stripe.PaymentIntentCaptureMethodManual
	}
	params := &stripe.PaymentIntentParams{
		Amount:        stripe.Int64(req.Amount),
		Currency:      stripe.String(req.Currency),
		PaymentMethod: stripe.String(req.PaymentMethod),
		// Naming the card type keeps API 2023-10-16 from turning on
		// automatic payment methods, which would require a return_url.
		PaymentMethodTypes:    stripe.StringSlice([]string{"card"}),
		CaptureMethod:         stripe.String(string(captureMethod)),
		Confirm:               stripe.Bool(true),
		ErrorOnRequiresAction: stripe.Bool(true),
		Metadata:              req.Metadata,
	}
	if req.Description != "" {
		params.Description = stripe.String(req.Description)
	}
	if err := withKey(ctx, &params.Params, idempotencyKey); err != nil {
		return nil, err
	}
	pi, err := c.api.PaymentIntents.New(params)
	if err != nil {
		return nil, fmt.Errorf("stripe: create payment intent: %w", callError(err))
	}
	return pi, nil
}

// CapturePaymentIntent captures an authorised payment intent: amount minor
// units of it, or everything authorised when amount is 0.
func (c *Client) CapturePaymentIntent(ctx context.Context, idempotencyKey, id string, amount int64) (*stripe.PaymentIntent, error) {
	params := &stripe.PaymentIntentCaptureParams{}
	if amount > 0 {
		params.AmountToCapture = stripe.Int64(amount)
	}
	if err := withKey(ctx, &params.Params, idempotencyKey); err != nil {
		return nil, err
	}
	pi, err := c.api.PaymentIntents.Capture(id, params)
	if err != nil {
		return nil, fmt.Errorf("stripe: capture payment intent %s: %w", id, callError(err))
	}
	return pi, nil
}

// CancelPaymentIntent cancels a payment intent that has not succeeded,
// releasing any authorisation.
func (c *Client) CancelPaymentIntent(ctx context.Context, idempotencyKey, id string) (*stripe.PaymentIntent, error) {
	params := &stripe.PaymentIntentCancelParams{}
	if err := withKey(ctx, &params.Params, idempotencyKey); err != nil {
		return nil, err
	}
	pi, err := c.api.PaymentIntents.Cancel(id, params)
	if err != nil {
		return nil, fmt.Errorf("stripe: cancel payment intent %s: %w", id, callError(err))
	}
	return pi, nil
}

// GetPaymentIntent fetches a payment intent.
func (c *Client) GetPaymentIntent(ctx context.Context, id string) (*stripe.PaymentIntent, error) {
	params := &stripe.PaymentIntentParams{}
	params.Context = ctx
	pi, err := c.api.PaymentIntents.Get(id, params)
	if err != nil {
		return nil, fmt.Errorf("stripe: get payment intent %s: %w", id, err)
	}
	return pi, nil
}

// ListPaymentIntentsByMetadata returns every payment intent created from
// from to to (both included; a zero to: until now) whose metadata has key
// set to value, newest first. It pages through Stripe's list of payment
// intents (GET /v1/payment_intents with created[gte] and created[lte]),
// which, unlike Stripe's search, shows a payment intent as soon as it is
// made, so an empty answer proves there is none. The list cannot filter on
// metadata: every payment intent created in the span is read, 100 a page,
// so the caller narrows the span to what it must see. Stripe's created is
// in whole seconds, so both bounds are taken to theirs.
func (c *Client) ListPaymentIntentsByMetadata(ctx context.Context, from, to time.Time, key, value string) ([]*stripe.PaymentIntent, error) {
	created := &stripe.RangeQueryParams{GreaterThanOrEqual: from.Unix()}
	if !to.IsZero() {
		created.LesserThanOrEqual = to.Unix()
	}
	params := &stripe.PaymentIntentListParams{CreatedRange: created}
	params.Context = ctx
	params.Limit = stripe.Int64(100)

	var found []*stripe.PaymentIntent
	it := c.api.PaymentIntents.List(params)
	for it.Next() {
		if pi := it.PaymentIntent(); pi.Metadata[key] == value {
			found = append(found, pi)
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("stripe: list payment intents with metadata %q: %w", key, err)
	}
	return found, nil
}
