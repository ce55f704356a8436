package payments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v76"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/stagedjobs"
	"github.com/example/payments/internal/stripeclient"
)

// A refund's life, and the event each move announces to the merchant:
//
//	pending ──> succeeded ──> failed      refund.succeeded (+ receipt), then refund.failed
//	   └──────────────────────> failed      refund.failed
//
// Stripe decides some refunds later: it may answer pending and settle the
// refund afterwards, and a refund it answered succeeded may still fail. The
// refund flow (Stripe's answer), a charge.refund.updated webhook and the
// reconciler (ReconcileRefunds) may each learn of a change, in any order;
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
// capture, and only our refunds carry our ids.
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

// HandlesRefundEvent tells whether ApplyRefundEventTx applies events of this type.
func HandlesRefundEvent(eventType string) bool { return eventType == "charge.refund.updated" }

// ApplyRefundEventTx applies a charge.refund.updated event, which carries
// Stripe's refund, to our refund, inside tx. The refund is found by Stripe's
// id, or by the "refund" metadata we put on every Stripe refund, for an
// event that outruns the flow recording it.
func ApplyRefundEventTx(ctx context.Context, tx *db.Tx, sr *stripe.Refund) (EventOutcome, error) {
	row, err := queries.GetRefundByStripeRefund(ctx, tx, textOrNull(sr.ID))
	if errors.Is(err, pgx.ErrNoRows) && sr.Metadata["refund"] != "" {
		row, err = queries.GetRefundByID(ctx, tx, sr.Metadata["refund"])
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return EventUnmatched, nil
	}
	if err != nil {
		return "", err
	}
	moved, err := applyStripeRefundTx(ctx, tx, row.PaymentID, row.ID, sr)
	if err != nil || !moved {
		return EventNoChange, err
	}
	return EventApplied, nil
}

// applyStripeRefundTx locks the payment and then the refund, and applies
// what Stripe says of the refund.
func applyStripeRefundTx(ctx context.Context, tx *db.Tx, paymentID, refundID string, sr *stripe.Refund) (bool, error) {
	pay, err := lockPayment(ctx, tx, paymentID)
	if err != nil {
		return false, err
	}
	row, err := queries.LockRefund(ctx, tx, refundID)
	if err != nil {
		return false, err
	}
	_, moved, err := moveRefundTx(ctx, tx, nil, pay, fromRefundRow(row), fromStripeRefund(sr))
	return moved, err
}

// RefundReconcileRun is what one ReconcileRefunds run did.
type RefundReconcileRun struct {
	Checked int      // refunds Stripe was asked about
	Moved   int      // of those, refunds Stripe had settled or failed
	Refused []string // of those, our refunds Stripe refused to show (a person must look)
}

// ReconcileRefunds asks Stripe about up to limit refunds that have been
// pending, unchanged, for at least pendingFor (by the database's clock, which
// wrote their updated_at), and applies what it says,
// as a charge.refund.updated webhook would have: a lost webhook must not
// leave a refund pending forever. A refund Stripe still reports pending
// waits for the next run, behind the others, and so does one Stripe refuses
// to show (a 404, say: listed in Refused, so that one bad refund cannot
// hold up the rest). It stops at the first other error (Stripe unreachable,
// say); the next run takes up where it stopped.
func (s *Service) ReconcileRefunds(ctx context.Context, pendingFor time.Duration, limit int) (RefundReconcileRun, error) {
	var run RefundReconcileRun
	stale, err := queries.ListStalePendingRefunds(ctx, s.pool, dbsqlc.ListStalePendingRefundsParams{
		PendingForSeconds: pendingFor.Seconds(), RowLimit: int32(limit),
	})
	if err != nil {
		return run, err
	}
	for _, row := range stale {
		sr, err := s.stripe.GetRefund(ctx, row.StripeRefund.String)
		if err != nil && stripeclient.Classify(err) == stripeclient.Transient {
			return run, fmt.Errorf("reconciling refund %s: %w", row.ID, err)
		}
		run.Checked++
		if err != nil {
			run.Refused = append(run.Refused, row.ID)
			if err := queries.TouchRefund(ctx, s.pool, row.ID); err != nil {
				return run, err
			}
			continue
		}
		var moved bool
		err = db.WithTx(ctx, s.pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
			var err error
			if moved, err = applyStripeRefundTx(ctx, tx, row.PaymentID, row.ID, sr); err != nil || moved {
				return err
			}
			return queries.TouchRefund(ctx, tx, row.ID)
		})
		if err != nil {
			return run, fmt.Errorf("reconciling refund %s: %w", row.ID, err)
		}
		if moved {
			run.Moved++
		}
	}
	return run, nil
}
