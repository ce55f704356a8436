package payments

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/stripe/stripe-go/v76"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/problem"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stripeclient"
)

// ErrPaymentProcessing: a capture, cancel or refund of a payment whose
// state is not known yet: it is still processing (its creation has not
// finished: Stripe was unreachable, say). No refusal may be stored for it,
// since the payment may yet be authorised: the request is refused before
// any work, like invalid input, and a retry with the same key runs once
// the payment is known (docs/API.md section 2: 409 payment_processing).
var ErrPaymentProcessing = errors.New("payment is still processing: its outcome is not known yet")

// CheckKnown returns ErrPaymentProcessing for a payment still processing,
// and nil for one whose state is known. Capture, cancel and refund call it
// before the engine claims their key, and again inside their flows (a key
// claimed before this check existed, or resumed by the completer).
func CheckKnown(pay Payment) error {
	if pay.Status == StatusProcessing {
		return fmt.Errorf("%w: payment %s", ErrPaymentProcessing, pay.ID)
	}
	return nil
}

// ActionParams are the parameters of a capture or a cancel, stored with the key.
type ActionParams struct {
	Payment string `json:"payment"`
	// Amount to capture; 0 captures everything authorised. Unused by cancel.
	Amount int64 `json:"amount,omitempty"`
}

// actionResult is Stripe's answer to a capture or cancel: the updated
// PaymentIntent, or a final refusal (the intent is not in a state that allows it).
type actionResult struct {
	intent  *stripe.PaymentIntent
	refusal string
	// refusedIntent is the PaymentIntent as Stripe showed it in a refusal,
	// when it did: a capture refused because Stripe canceled the
	// authorisation (7 days passed) tells us so, even if its webhook was lost.
	refusedIntent *stripe.PaymentIntent
}

// callOnIntent makes a capture or cancel call on the payment's PaymentIntent;
// done is the status the action leads to. Stripe, not our copy of the
// status, decides whether it is allowed: after a crash our copy may lag
// behind what this very request already did at Stripe, and the child key
// makes Stripe replay that first answer.
func (s *Service) callOnIntent(ctx context.Context, k *recovery.Key, step string, done stripe.PaymentIntentStatus,
	call func(ctx context.Context, childKey, intent string, p ActionParams) (*stripe.PaymentIntent, error)) (actionResult, error) {
	var p ActionParams
	if err := k.DecodeParams(&p); err != nil {
		return actionResult{}, err
	}
	pay, err := Get(ctx, s.pool, k.UserID, p.Payment)
	if err != nil {
		return actionResult{}, err
	}
	// A payment still processing may yet be authorised: no refusal may be
	// stored for it, and a retry once it is known runs (transient). A
	// payment that never got an authorisation can never get one: refusing
	// it here is safe, whatever this request did before.
	if err := CheckKnown(pay); err != nil {
		return actionResult{}, recovery.Transient(err)
	}
	if pay.StripePaymentIntent == nil || pay.Status == StatusFailed {
		return actionResult{refusal: fmt.Sprintf("Payment %s is %s and was never authorised.", pay.ID, pay.Status)}, nil
	}
	pi, err := call(ctx, k.ChildKey(step), *pay.StripePaymentIntent, p)
	switch {
	case err == nil:
		return actionResult{intent: pi}, nil
	case stripeclient.Classify(err) == stripeclient.Transient:
		return actionResult{}, UnfinishedStripeCall(err)
	case k.ChildKeyGeneration(step) > 0:
		// Refused under a later child key: an earlier attempt, whose 500
		// Stripe executed late, may have made this very move, and Stripe
		// then refuses the next one because it is done. The PaymentIntent
		// at the status the action leads to is the outcome; a refusal
		// recorded over it would answer 400 where Stripe captured or
		// canceled (as the refund flow's findStripeRefund does for a refund).
		if found, ok, ferr := s.findActionResult(ctx, k, done); ferr != nil || ok {
			return found, ferr
		}
	}
	res := actionResult{refusal: fmt.Sprintf("Payment %s is %s: %s", pay.ID, pay.Status, StripeMessage(err))}
	var se *stripe.Error
	if errors.As(err, &se) && se.PaymentIntent != nil && se.PaymentIntent.ID == *pay.StripePaymentIntent {
		res.refusedIntent = se.PaymentIntent
		res.refusal = fmt.Sprintf("Payment %s is %s: %s", pay.ID, se.PaymentIntent.Status, StripeMessage(err))
	}
	return res, nil
}

// findActionResult: for a key too old to call Stripe again, or whose child
// key Stripe reports spent, whether the payment's PaymentIntent already
// reached the status the action leads to. It reads the PaymentIntent
// itself, which shows the action at once.
func (s *Service) findActionResult(ctx context.Context, k *recovery.Key, done stripe.PaymentIntentStatus) (actionResult, bool, error) {
	var p ActionParams
	if err := k.DecodeParams(&p); err != nil {
		return actionResult{}, false, err
	}
	pay, err := Get(ctx, s.pool, k.UserID, p.Payment)
	if err != nil || pay.StripePaymentIntent == nil {
		return actionResult{}, false, err
	}
	pi, err := s.stripe.GetPaymentIntent(ctx, *pay.StripePaymentIntent)
	if err != nil {
		return actionResult{}, false, recovery.Transient(err)
	}
	return actionResult{intent: pi}, pi.Status == done, nil
}

// recordAction locks the payment and makes the move Stripe reported (the
// move stages its event), or answers a refusal. move says which move the
// PaymentIntent's status means, and false for a status the flow does not
// act on: then the payment stays as it is.
func recordAction(ctx context.Context, tx *db.Tx, k *recovery.Key, res actionResult, action string, next recovery.RecoveryPoint,
	move func(pi *stripe.PaymentIntent) (transition, bool)) (recovery.Outcome, error) {
	var p ActionParams
	if err := k.DecodeParams(&p); err != nil {
		return recovery.Outcome{}, err
	}
	if res.intent == nil {
		if err := recordRefusedIntent(ctx, tx, k, p.Payment, res.refusedIntent); err != nil {
			return recovery.Outcome{}, err
		}
		answer := problem.New(http.StatusBadRequest, problem.PaymentNotCapturable, "%s", res.refusal)
		return recovery.Respond(answer.Status, answer.JSON()), nil
	}
	pay, err := lockPayment(ctx, tx, p.Payment)
	if err != nil {
		return recovery.Outcome{}, err
	}
	t, act := move(res.intent)
	if !act {
		action = "payment.not_acted_on"
	}
	// A webhook may have made the move already; then it staged the event.
	if act {
		if pay, _, err = applyMove(ctx, tx, keyID(k), pay, t); err != nil {
			return recovery.Outcome{}, err
		}
	}
	if err := audit(ctx, tx, k, action, pay.ID, map[string]string{
		"payment_intent": res.intent.ID, "payment_intent_status": string(res.intent.Status)}); err != nil {
		return recovery.Outcome{}, err
	}
	return recovery.Next(next), nil
}

// recordRefusedIntent makes the move a refusal's PaymentIntent reports, if
// it is one the payment follows: Stripe refuses to capture an authorisation
// it canceled on its own (not captured within 7 days), and the refusal shows
// the PaymentIntent canceled. The payment is then canceled, with its
// payment.canceled event, unless the webhook got there first. Other statuses
// are left to the webhooks and the flows that act on them.
func recordRefusedIntent(ctx context.Context, tx *db.Tx, k *recovery.Key, paymentID string, pi *stripe.PaymentIntent) error {
	if pi == nil || pi.Status != stripe.PaymentIntentStatusCanceled {
		return nil
	}
	pay, err := lockPayment(ctx, tx, paymentID)
	if err != nil {
		return err
	}
	_, _, err = applyMove(ctx, tx, keyID(k), pay, transition{to: StatusCanceled})
	return err
}

// finishAction answers 200 with the payment as it now stands.
func finishAction(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
	var p ActionParams
	if err := k.DecodeParams(&p); err != nil {
		return recovery.Outcome{}, err
	}
	pay, err := Get(ctx, tx, k.UserID, p.Payment)
	if err != nil {
		return recovery.Outcome{}, err
	}
	return recovery.RespondJSON(http.StatusOK, pay)
}

// UnfinishedStripeCall is what a failed Stripe call that is not Stripe's
// final answer (stripeclient.Classify says Transient) means to the engine,
// for a flow's external call to return: a spent child key (Stripe replays a
// 5xx it stored under it), which the engine must move on from
// (recovery.ChildKeySpent), or a transient failure, which a retry with the
// same key may get past (recovery.Transient). A final answer (a decline,
// another 4xx) is not an error of the call: the call returns it as its
// result, and its record stores the answer (StripeMessage words it).
func UnfinishedStripeCall(err error) error {
	if errors.Is(err, stripeclient.ErrChildKeySpent) {
		return recovery.ChildKeySpent(err)
	}
	return recovery.Transient(err)
}

// StripeMessage is Stripe's own message for a refusal, else the error text.
func StripeMessage(err error) string {
	var se *stripe.Error
	if errors.As(err, &se) {
		return se.Msg
	}
	return err.Error()
}
