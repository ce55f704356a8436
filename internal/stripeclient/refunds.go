package stripeclient

import (
	"context"
	"fmt"

	"github.com/stripe/stripe-go/v76"
)

// RefundRequest is a refund of a captured payment intent.
type RefundRequest struct {
	PaymentIntent string            // pi_...
	Amount        int64             // minor units; 0 refunds everything left
	Reason        string            // optional: duplicate, fraudulent or requested_by_customer
	Metadata      map[string]string // optional
}

// CreateRefund refunds part or all of a payment intent. Refunding more than
// is left, or a payment intent that was never captured, is a Terminal
// invalid request.
func (c *Client) CreateRefund(ctx context.Context, idempotencyKey string, req RefundRequest) (*stripe.Refund, error) {
	params := &stripe.RefundParams{
		PaymentIntent: stripe.String(req.PaymentIntent),
		Metadata:      req.Metadata,
	}
	if req.Amount > 0 {
		params.Amount = stripe.Int64(req.Amount)
	}
	if req.Reason != "" {
		params.Reason = stripe.String(req.Reason)
	}
	if err := withKey(ctx, &params.Params, idempotencyKey); err != nil {
		return nil, err
	}
	re, err := c.api.Refunds.New(params)
	if err != nil {
		return nil, fmt.Errorf("stripe: refund payment intent %s: %w", req.PaymentIntent, callError(err))
	}
	return re, nil
}

// GetRefund fetches a refund.
func (c *Client) GetRefund(ctx context.Context, id string) (*stripe.Refund, error) {
	params := &stripe.RefundParams{}
	params.Context = ctx
	re, err := c.api.Refunds.Get(id, params)
	if err != nil {
		return nil, fmt.Errorf("stripe: get refund %s: %w", id, err)
	}
	return re, nil
}

// ListRefunds returns every refund of a payment intent, newest first. It is
// how a refund is found again without its id (by the metadata the service
// gave it): unlike search, Stripe's lists show an object as soon as it is
// made.
func (c *Client) ListRefunds(ctx context.Context, paymentIntent string) ([]*stripe.Refund, error) {
	params := &stripe.RefundListParams{PaymentIntent: stripe.String(paymentIntent)}
	params.Context = ctx
	params.Limit = stripe.Int64(100)

	var found []*stripe.Refund
	it := c.api.Refunds.List(params)
	for it.Next() {
		found = append(found, it.Refund())
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("stripe: list refunds of payment intent %s: %w", paymentIntent, err)
	}
	return found, nil
}
