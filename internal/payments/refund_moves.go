package payments

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v76"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/stagedjobs"
)

// A refund's life, and the event each move announces to the merchant:
//
//	pending ──> succeeded ──> failed      refund.succeeded (+ receipt), then refund.failed
//	   └──────────────────────> failed      refund.failed
//
// Stripe decides some refunds later: it may answer pending and settle the
// refund afterwards, and a refund it answered succeeded may still fail. The
// refund flow (Stripe's answer), a refund.created or charge.refund.updated
// webhook and the reconciler (reconcile.go) may each learn of a change, in
// any order;
// whichever applies it first makes the move and stages its event, under
// the payment's and then the refund's row lock. Moves only go forward, so a
// late or repeated report of an earlier status (a pending answer replayed
// after the webhook settled the refund, a succeeded event delivered after the
// failed one) is no move at all: no timestamp is needed to order them.
//
// A payment's amount_refunded is the sum of its succeeded refunds, set from
// the refunds table after every move (SyncAmountRefunded): our refunds are
// its source of truth, so it drops when a succeeded refund fails, and that
// amount may be refunded again. A pending refund holds its amount (what is
// left to refund does not count it, see insertRefund) without being in
// amount_refunded; once every refund is final, amount_refunded is the sum
// of the refunds that did not fail. Stripe's charge.amount_refunded is not
// used: it counts pending refunds and authorisations released by a partial
// capture, and only our refunds carry our ids. A refund made outside the
// service (Stripe's dashboard) becomes a refund of ours, of origin
// external (applyStripeRefundTx), and counts like any other.
var refundMoves = map[[2]RefundStatus]string{
	{RefundPending, RefundSucceeded}: "refund.succeeded",
	{RefundPending, RefundFailed}:    "refund.failed",
	{RefundSucceeded, RefundFailed}:  "refund.failed",
}

// refundMove is a move to make and what Stripe said with it.
type refundMove struct {
	to            RefundStatus
	stripeRefund  string // Stripe's re_..., when known
	failureReason string // for a move to failed
}

// moveRefundTx makes the move m on re, if its life allows it, keeps the
// payment's amount_refunded in step and stages the event that announces the
// move (and the customer's receipt for a refund that succeeded). The caller
// holds pay and then re locked in tx; keyID is the request making the
// change, nil for a webhook or the reconciler. A move that is not allowed
// still records Stripe's id on a refund that lacks it. It returns the
// refund as it now stands and whether it moved.
func moveRefundTx(ctx context.Context, tx *db.Tx, keyID *uuid.UUID, pay Payment, re Refund, m refundMove) (Refund, bool, error) {
	event, allowed := refundMoves[[2]RefundStatus{re.Status, m.to}]
	if !allowed {
		if re.StripeRefund != nil || m.stripeRefund == "" {
			return re, false, nil
		}
		row, err := queries.MoveRefund(ctx, tx, dbsqlc.MoveRefundParams{
			ID: re.ID, Status: string(re.Status), StripeRefund: textOrNull(m.stripeRefund), FailureReason: toText(re.FailureReason),
		})
		return fromRefundRow(row), false, err
	}
	row, err := queries.MoveRefund(ctx, tx, dbsqlc.MoveRefundParams{
		ID: re.ID, Status: string(m.to), StripeRefund: textOrNull(m.stripeRefund), FailureReason: textOrNull(m.failureReason),
	})
	if err != nil {
		return re, false, err
	}
	re = fromRefundRow(row)
	if err := queries.SyncAmountRefunded(ctx, tx.Queued(), pay.ID); err != nil {
		return re, false, err
	}
	jobs := []stagedjobs.Job{eventJob(re.UserID, event, re)}
	if m.to == RefundSucceeded {
		jobs = append(jobs, refundReceiptJob(pay, re))
	}
	return re, true, stage(ctx, tx, keyID, jobs...)
}

// fromStripeRefund is the move Stripe's refund reports. requires_action
// waits like pending; canceled is a failure.
func fromStripeRefund(sr *stripe.Refund) refundMove {
	m := refundMove{to: RefundPending, stripeRefund: sr.ID}
	switch sr.Status {
	case stripe.RefundStatusSucceeded:
		m.to = RefundSucceeded
	case stripe.RefundStatusFailed, stripe.RefundStatusCanceled:
		m.to, m.failureReason = RefundFailed, string(sr.FailureReason)
		if m.failureReason == "" {
			m.failureReason = string(sr.Status)
		}
	case stripe.RefundStatusPending, stripe.RefundStatusRequiresAction:
	}
	return m
}

// HandlesRefundEvent tells whether ApplyRefundEventTx applies events of
// this type: the events that carry a Stripe refund (docs.stripe.com/api/refunds
// lists refund.created and charge.refund.updated among the refund's events).
func HandlesRefundEvent(eventType string) bool {
	return eventType == "charge.refund.updated" || eventType == "refund.created"
}

// ApplyRefundEventTx applies an event that carries Stripe's refund
// (refund.created, charge.refund.updated) inside tx. Our refund is found
// by Stripe's id, or by the "refund" metadata we put on every Stripe
// refund, for an event that outruns the flow recording it; a refund of one
// of our payments that is neither is one made outside the service, and
// becomes a refund of origin external (applyStripeRefundTx).
func ApplyRefundEventTx(ctx context.Context, tx *db.Tx, sr *stripe.Refund) (EventOutcome, error) {
	if sr.Metadata[duplicateChargeMetadata] != "" {
		return applyDuplicateRefundTx(ctx, tx, sr) // the service's refund of a duplicate charge
	}
	paymentID, err := refundPayment(ctx, tx, sr)
	if err != nil || paymentID == "" {
		return EventUnmatched, err
	}
	pay, err := lockPayment(ctx, tx, paymentID)
	if err != nil {
		return "", err
	}
	change, err := applyStripeRefundTx(ctx, tx, pay, sr)
	switch {
	case err != nil || change == refundUnchanged:
		return EventNoChange, err
	case change == refundDeferred:
		return EventDeferred, nil
	}
	return EventApplied, nil
}

// refundPayment is the id of the payment of ours that Stripe's refund
// belongs to; "" when none is.
func refundPayment(ctx context.Context, tx *db.Tx, sr *stripe.Refund) (string, error) {
	if re, ok, err := ourRefund(ctx, tx, sr, false); err != nil || ok {
		return re.Payment, err
	}
	if sr.PaymentIntent == nil || sr.PaymentIntent.ID == "" {
		return "", nil
	}
	row, err := queries.GetPaymentByIntent(ctx, tx, textOrNull(sr.PaymentIntent.ID))
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return row.ID, err
}

// ourRefund finds the refund of ours that Stripe's refund is: by Stripe's
// id, or by the "refund" metadata our refund flow puts on every refund it
// makes (refund.go), before it records Stripe's id. Our flow inserts its
// refund before it asks Stripe, so a refund our flow made is always found
// here, however early Stripe reports it. locked takes the refund's row
// lock, for a caller holding its payment's.
func ourRefund(ctx context.Context, tx *db.Tx, sr *stripe.Refund, locked bool) (Refund, bool, error) {
	row, err := queries.GetRefundByStripeRefund(ctx, tx, textOrNull(sr.ID))
	if errors.Is(err, pgx.ErrNoRows) && sr.Metadata["refund"] != "" {
		row, err = queries.GetRefundByID(ctx, tx, sr.Metadata["refund"])
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return Refund{}, false, nil
	}
	if err != nil {
		return Refund{}, false, err
	}
	if locked {
		if row, err = queries.LockRefund(ctx, tx, row.ID); err != nil {
			return Refund{}, false, err
		}
	}
	return fromRefundRow(row), true, nil
}

// refundChange is what applying a Stripe refund did.
type refundChange string

// The changes; the strings label the reconciler's metric.
const (
	refundUnchanged refundChange = ""
	refundMoved     refundChange = "refund"           // our refund moved
	refundExternal  refundChange = "external_refund"  // a refund made outside the service is now ours to show
	refundDuplicate refundChange = "duplicate_refund" // a second refund Stripe made for one of ours is now ours to show
	refundDeferred  refundChange = "deferred"         // not yet: the payment does not show its capture
)

// applyStripeRefundTx applies what Stripe says of one refund of pay, which
// the caller holds locked in tx: the move of our refund it reports, or, for
// a refund the service did not make, a refund of origin external, inserted
// pending and moved to Stripe's status by moveRefundTx, so its event is
// staged as for any refund (refund.succeeded for one that succeeded) and
// it counts once in amount_refunded; a second refund Stripe made for one
// of ours (its metadata names our refund, which records another of
// Stripe's ids) becomes a refund of origin duplicate, the same way.
// Stripe's id is unique among our refunds, and a webhook and the
// reconciler both take the payment's lock first, so whichever learns of
// the refund second finds the first one's row.
//
// Stripe refunds only a captured charge: while our payment does not show
// the capture yet (its webhook was lost, or comes later), the refund
// waits: the event is deferred (EventDeferred), and applied again when it
// comes again, by a webhook's retry or from the event log, which lists the
// capture's event before it.
func applyStripeRefundTx(ctx context.Context, tx *db.Tx, pay Payment, sr *stripe.Refund) (refundChange, error) {
	re, ok, err := ourRefund(ctx, tx, sr, true)
	switch {
	case err != nil:
		return refundUnchanged, err
	case ok && isSecondRefund(re, sr):
		return refundDuplicate, insertStripeRefundTx(ctx, tx, pay, sr, RefundDuplicate)
	case !ok && pay.Status != StatusSucceeded:
		return refundDeferred, nil
	case !ok:
		return refundExternal, insertStripeRefundTx(ctx, tx, pay, sr, RefundExternal)
	}
	_, moved, err := moveRefundTx(ctx, tx, nil, pay, re, fromStripeRefund(sr))
	if err != nil || !moved {
		return refundUnchanged, err
	}
	return refundMoved, nil
}

// isSecondRefund tells whether Stripe's refund sr, whose metadata names our
// refund re, is one re does not record: re already records another of
// Stripe's refunds, or re was refused (failed, with no refund of Stripe's)
// and sr gave money back after all. Both are Stripe executing a request of
// ours late (a late 500: the service answered under a new child key, then
// Stripe executed the first attempt too): the money went back twice, or
// went back for a refund we answered 400. A refused refund's report that
// Stripe failed too changes nothing, and only records its id.
func isSecondRefund(re Refund, sr *stripe.Refund) bool {
	if re.StripeRefund != nil {
		return *re.StripeRefund != sr.ID
	}
	return re.Status == RefundFailed && fromStripeRefund(sr).to != RefundFailed
}

// insertStripeRefundTx makes Stripe's refund sr, which no refund of ours
// is, a refund of pay (locked by the caller in tx) of the given origin
// (external: made outside the service; duplicate: a second refund Stripe
// made for one of ours), inserted pending and moved to Stripe's status by
// moveRefundTx, so its event is staged as for any refund and it counts
// once in amount_refunded.
func insertStripeRefundTx(ctx context.Context, tx *db.Tx, pay Payment, sr *stripe.Refund, origin RefundOrigin) error {
	reason := string(sr.Reason)
	if origin == RefundDuplicate && reason == "" {
		reason = string(stripe.RefundReasonDuplicate)
	}
	row, err := queries.InsertStripeRefund(ctx, tx, dbsqlc.InsertStripeRefundParams{
		ID: newRefundID(), UserID: pay.UserID, PaymentID: pay.ID, Amount: sr.Amount,
		StripeRefund: textOrNull(sr.ID), Reason: textOrNull(reason), Origin: string(origin),
	})
	if err != nil {
		return err
	}
	// The payment's row changes with every such refund, even one Stripe
	// reports pending: a concurrent transaction that read the payment
	// before this one committed then fails to serialize and runs again,
	// finding this row, instead of inserting another.
	if err := queries.SyncAmountRefunded(ctx, tx, pay.ID); err != nil {
		return err
	}
	_, _, err = moveRefundTx(ctx, tx, nil, pay, fromRefundRow(row), fromStripeRefund(sr))
	return err
}
