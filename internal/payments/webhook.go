package payments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v76"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
)

// EventOutcome is what a Stripe webhook event did to our payments.
type EventOutcome string

// The outcomes of an event.
const (
	EventApplied   EventOutcome = "applied"   // it moved a payment (and staged the move's event)
	EventNoChange  EventOutcome = "no_change" // we already knew: a flow or an earlier event got there first
	EventStale     EventOutcome = "stale"     // it is older than the last PaymentIntent event applied to the payment
	EventUnmatched EventOutcome = "unmatched" // no payment (or refund) of ours is its object's
	// EventDeferred: not yet (a refund of a payment that does not show its
	// capture yet). Its id is recorded with this outcome, and the event is
	// applied again when it comes again, by a webhook's retry or from
	// Stripe's event log (InsertStripeEvent, KnownStripeEvents).
	EventDeferred EventOutcome = "deferred"
)

// intentMoves says which move each PaymentIntent event reports.
var intentMoves = map[string]func(pi *stripe.PaymentIntent) transition{
	"payment_intent.succeeded": func(pi *stripe.PaymentIntent) transition {
		return transition{to: StatusSucceeded, intent: pi.ID, amountCaptured: pi.AmountReceived}
	},
	"payment_intent.amount_capturable_updated": func(pi *stripe.PaymentIntent) transition {
		return transition{to: StatusRequiresCapture, intent: pi.ID}
	},
	"payment_intent.canceled": func(pi *stripe.PaymentIntent) transition {
		return transition{to: StatusCanceled, intent: pi.ID}
	},
	"payment_intent.payment_failed": func(pi *stripe.PaymentIntent) transition {
		t := transition{to: StatusFailed, intent: pi.ID, failureCode: "payment_failed"}
		if e := pi.LastPaymentError; e != nil {
			t.failureCode, t.failureMessage = string(e.DeclineCode), e.Msg
			if t.failureCode == "" {
				t.failureCode = string(e.Code)
			}
		}
		return t
	},
}

// HandlesIntentEvent tells whether ApplyIntentEventTx applies events of this type.
func HandlesIntentEvent(eventType string) bool { _, ok := intentMoves[eventType]; return ok }

// ApplyIntentEventTx applies a PaymentIntent event that happened at
// occurred to the payment it belongs to, inside tx. The payment is found by
// its PaymentIntent, or by the "payment" metadata we put on every
// PaymentIntent, for an event that outruns the flow recording it. A
// PaymentIntent whose metadata names a payment that recorded another one
// is a second PaymentIntent Stripe made for the payment
// (applyOtherIntentTx): never the payment's.
//
// The payment's staleness mark (stripe_event_at) is the time of the latest
// PaymentIntent event whose state the payment holds: one that moved it, or
// one that reports the status it already has. An event older than the mark
// is stale and ignored. Only PaymentIntent events read or set the mark:
// charge and refund events are about other objects (a refund's moves only
// go forward, see refund_moves.go), and a newer one of them must not make a
// PaymentIntent event stale. An event that could not apply (one the service
// does not act on for this payment, such as an authorisation of a payment
// made with capture=true) sets no mark either, so it cannot make an older
// event that does apply stale.
func ApplyIntentEventTx(ctx context.Context, tx *db.Tx, eventType string, pi *stripe.PaymentIntent, occurred time.Time) (EventOutcome, error) {
	move, ok := intentMoves[eventType]
	if !ok {
		return "", bug("no move for %s", eventType)
	}
	pay, err := lockByIntent(ctx, tx, pi.ID, pi.Metadata["payment"])
	if err != nil || pay == nil {
		return EventUnmatched, err
	}
	if pay.StripePaymentIntent != nil && *pay.StripePaymentIntent != pi.ID {
		return applyOtherIntentTx(ctx, tx, *pay, pi)
	}
	if pay.StripeEventAt != nil && occurred.Before(*pay.StripeEventAt) {
		return EventStale, nil
	}
	t := move(pi)
	if t.to == StatusRequiresCapture && pay.Capture {
		return EventNoChange, nil // capture=true: an authorisation is not acted on
	}
	_, moved, err := applyMove(ctx, tx, nil, *pay, t)
	if err != nil {
		return "", err
	}
	if !moved && pay.Status != t.to {
		return EventNoChange, nil
	}
	if err := queries.NoteStripeEvent(ctx, tx, dbsqlc.NoteStripeEventParams{ID: pay.ID, OccurredAt: occurred}); err != nil {
		return "", err
	}
	if !moved {
		return EventNoChange, nil
	}
	return EventApplied, nil
}

// applyOtherIntentTx applies an event about a PaymentIntent whose metadata
// names pay (locked by the caller in tx) but which is not the one pay
// recorded: Stripe made two for one payment (a late 500's request executed
// after the service charged under a new child key). It never moves the
// payment, whose PaymentIntent is the recorded one. One that charged the
// customer (succeeded) is a duplicate charge, refunded by the service
// (duplicate.go); any other (declined, canceled, an authorisation, which
// Stripe releases when it lapses) took no money and changes nothing.
func applyOtherIntentTx(ctx context.Context, tx *db.Tx, pay Payment, pi *stripe.PaymentIntent) (EventOutcome, error) {
	if pi.Status != stripe.PaymentIntentStatusSucceeded || pi.AmountReceived == 0 {
		return EventNoChange, nil
	}
	added, err := noteDuplicateChargeTx(ctx, tx, pay, pi)
	if err != nil || !added {
		return EventNoChange, err
	}
	return EventApplied, nil
}

// ApplyChargeRefundedTx applies a charge.refunded event: it changes
// nothing. A payment's amount_refunded is the sum of its succeeded refunds
// (see refund_moves.go), and the charge, at Stripe's API version
// 2023-10-16, does not list its refunds. Its amount_refunded is no measure
// of them either: it counts pending refunds and released authorisations
// too, and drops when a refund fails. The refund itself comes with
// refund.created; should that webhook be lost, the reconciler reads it in
// Stripe's event log.
func ApplyChargeRefundedTx(ctx context.Context, tx *db.Tx, ch *stripe.Charge) (EventOutcome, error) {
	if ch.PaymentIntent == nil {
		return EventUnmatched, nil
	}
	pay, err := lockByIntent(ctx, tx, ch.PaymentIntent.ID, ch.Metadata["payment"])
	if err != nil || pay == nil {
		return EventUnmatched, err
	}
	return EventNoChange, nil
}

// lockByIntent locks the payment of a PaymentIntent; nil when it is not ours.
func lockByIntent(ctx context.Context, tx *db.Tx, intent, paymentID string) (*Payment, error) {
	row, err := queries.GetPaymentByIntentForUpdate(ctx, tx, textOrNull(intent))
	if errors.Is(err, pgx.ErrNoRows) && paymentID != "" {
		row, err = queries.GetPaymentByIDForUpdate(ctx, tx, paymentID)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	pay, err := fromRow(row)
	return &pay, err
}

func bug(format string, args ...any) error { return fmt.Errorf("payments: "+format, args...) }
