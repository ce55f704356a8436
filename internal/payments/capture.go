package payments

import (
	"context"

	"github.com/stripe/stripe-go/v76"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/recovery"
)

// The capture flow, POST /v1/payments/{id}/capture, for a payment made with
// capture=false (status requires_capture):
//
//	started
//	  │ Stripe: capture the PaymentIntent, child key "capture_payment"
//	  │ tx: record it (succeeded, amount_captured; payment.captured and the
//	  │     receipt staged); a refusal is final: 400 stored
//	  │ (a payment still processing is refused before the call, with
//	  │ ErrPaymentProcessing: 409, nothing stored, the key stays resumable)
//	  ▼
//	payment_captured
//	  │ tx: store 200
//	  ▼
//	finished
const (
	PaymentCaptured recovery.RecoveryPoint = "payment_captured"
	stepCapture                            = "capture_payment" // the Stripe call, its child key and failpoint
)

// Capture runs the capture flow for req.
func (s *Service) Capture(ctx context.Context, req KeyedRequest, p ActionParams) (recovery.Response, error) {
	return s.execute(ctx, req, s.capture, p)
}

func (s *Service) captureFlow() *recovery.Flow {
	findCapture := func(ctx context.Context, k *recovery.Key) (actionResult, bool, error) {
		return s.findActionResult(ctx, k, stripe.PaymentIntentStatusSucceeded)
	}
	return s.flow("capture_payment",
		recovery.From(recovery.Started, recovery.WithReconcile(
			recovery.ExternalPhase(stepCapture, s.capturePaymentIntent, s.recordCapture), findCapture),
			PaymentCaptured, recovery.Finished), // Finished: a refusal, stored
		recovery.From(PaymentCaptured, recovery.LocalPhase(s.finishCapture),
			recovery.Finished),
	)
}

// capturePaymentIntent: the Stripe call of started.
func (s *Service) capturePaymentIntent(ctx context.Context, k *recovery.Key) (actionResult, error) {
	return s.callOnIntent(ctx, k, stepCapture, stripe.PaymentIntentStatusSucceeded, func(ctx context.Context, childKey, intent string, p ActionParams) (*stripe.PaymentIntent, error) {
		return s.stripe.CapturePaymentIntent(ctx, childKey, intent, p.Amount)
	})
}

// recordCapture: started -> payment_captured, or finished on a refusal.
// Stripe answers a capture with the PaymentIntent succeeded, which the
// payment follows; any other status (processing, say) is not acted on, and
// the answer shows the payment as it stands.
func (s *Service) recordCapture(ctx context.Context, tx *db.Tx, k *recovery.Key, res actionResult) (recovery.Outcome, error) {
	return recordAction(ctx, tx, k, res, "payment.captured", PaymentCaptured, func(pi *stripe.PaymentIntent) (transition, bool) {
		switch pi.Status {
		case stripe.PaymentIntentStatusSucceeded:
			return transition{to: StatusSucceeded, amountCaptured: pi.AmountReceived}, true
		case stripe.PaymentIntentStatusCanceled:
			return transition{to: StatusCanceled}, true
		case stripe.PaymentIntentStatusProcessing, stripe.PaymentIntentStatusRequiresCapture,
			stripe.PaymentIntentStatusRequiresAction, stripe.PaymentIntentStatusRequiresConfirmation,
			stripe.PaymentIntentStatusRequiresPaymentMethod:
			return transition{}, false
		default:
			return transition{}, false
		}
	})
}

// finishCapture: payment_captured -> finished.
func (s *Service) finishCapture(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
	return finishAction(ctx, tx, k)
}
