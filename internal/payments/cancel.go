package payments

import (
	"context"

	"github.com/stripe/stripe-go/v76"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/recovery"
)

// The cancel flow, POST /v1/payments/{id}/cancel, for a payment made with
// capture=false (status requires_capture): the authorisation is released.
//
//	started
//	  │ Stripe: cancel the PaymentIntent, child key "cancel_payment"
//	  │ tx: record it (canceled; payment.canceled staged); a refusal is final: 400 stored
//	  │ (a payment still processing is refused before the call, with
//	  │ ErrPaymentProcessing: 409, nothing stored, the key stays resumable)
//	  ▼
//	payment_canceled
//	  │ tx: store 200
//	  ▼
//	finished
const (
	PaymentCanceled recovery.RecoveryPoint = "payment_canceled"
	stepCancel                             = "cancel_payment" // the Stripe call, its child key and failpoint
)

// Cancel runs the cancel flow for req.
func (s *Service) Cancel(ctx context.Context, req KeyedRequest, p ActionParams) (recovery.Response, error) {
	return s.execute(ctx, req, s.cancel, p)
}

func (s *Service) cancelFlow() *recovery.Flow {
	findCancel := func(ctx context.Context, k *recovery.Key) (actionResult, bool, error) {
		return s.findActionResult(ctx, k, stripe.PaymentIntentStatusCanceled)
	}
	return s.flow("cancel_payment",
		recovery.From(recovery.Started, recovery.WithReconcile(
			recovery.ExternalPhase(stepCancel, s.cancelPaymentIntent, s.recordCancel), findCancel),
			PaymentCanceled, recovery.Finished), // Finished: a refusal, stored
		recovery.From(PaymentCanceled, recovery.LocalPhase(s.finishCancel),
			recovery.Finished),
	)
}

// cancelPaymentIntent: the Stripe call of started.
func (s *Service) cancelPaymentIntent(ctx context.Context, k *recovery.Key) (actionResult, error) {
	return s.callOnIntent(ctx, k, stepCancel, stripe.PaymentIntentStatusCanceled, func(ctx context.Context, childKey, intent string, _ ActionParams) (*stripe.PaymentIntent, error) {
		return s.stripe.CancelPaymentIntent(ctx, childKey, intent)
	})
}

// recordCancel: started -> payment_canceled, or finished on a refusal.
// Stripe answers a cancel with the PaymentIntent canceled, which the
// payment follows; any other status is not acted on, and the answer shows
// the payment as it stands.
func (s *Service) recordCancel(ctx context.Context, tx *db.Tx, k *recovery.Key, res actionResult) (recovery.Outcome, error) {
	return recordAction(ctx, tx, k, res, "payment.canceled", PaymentCanceled, func(pi *stripe.PaymentIntent) (transition, bool) {
		switch pi.Status {
		case stripe.PaymentIntentStatusCanceled:
			return transition{to: StatusCanceled}, true
		case stripe.PaymentIntentStatusSucceeded, stripe.PaymentIntentStatusProcessing,
			stripe.PaymentIntentStatusRequiresCapture, stripe.PaymentIntentStatusRequiresAction,
			stripe.PaymentIntentStatusRequiresConfirmation, stripe.PaymentIntentStatusRequiresPaymentMethod:
			return transition{}, false
		default:
			return transition{}, false
		}
	})
}

// finishCancel: payment_canceled -> finished.
func (s *Service) finishCancel(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
	return finishAction(ctx, tx, k)
}
