package payments

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stripe/stripe-go/v76"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
)

// A dispute (a chargeback) is the customer's bank taking a payment back;
// Stripe decides it with the bank, on its own time, and reports each step
// as a charge.dispute.* event carrying the Dispute. The payment holds the
// dispute as Stripe last reported it (Stripe's statuses as they are), and
// the merchant hears of it:
//
//	(none) ──> needs_response, under_review, warning_* ...   payment.disputed
//	   ... ──> won, lost, warning_closed                      payment.dispute_closed
//
// A move between open statuses (needs_response to under_review) changes
// the record and announces nothing. An event older than the state the
// payment holds (by Stripe's event created, then by the status order
// below) is stale and ignored, so a late or repeated delivery never moves
// a dispute back. A refund of a payment whose dispute is open is 400
// payment_disputed (refund.go).

// Dispute is a payment's chargeback as Stripe reports it: the API's
// dispute object.
type Dispute struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Amount  int64  `json:"amount"`
	Created int64  `json:"created"`
}

// disputeStage orders Stripe's dispute statuses: an event never moves a
// dispute to an earlier stage. An inquiry (warning_*) goes the same way. A
// status this version does not know sits between the open ones and the
// closed ones, where Stripe adds them (prevented, say, is closed: it is
// then taken as final only once Stripe's closed event says so).
func disputeStage(status string) int {
	switch stripe.DisputeStatus(status) {
	case stripe.DisputeStatusNeedsResponse, stripe.DisputeStatusWarningNeedsResponse:
		return 0
	case stripe.DisputeStatusUnderReview, stripe.DisputeStatusWarningUnderReview:
		return 1
	case stripe.DisputeStatusWon, stripe.DisputeStatusLost, stripe.DisputeStatusWarningClosed:
		return 3
	default:
		return 2
	}
}

// Closed tells whether the dispute is decided (won, lost, or an inquiry
// closed).
func (d *Dispute) Closed() bool { return d != nil && disputeStage(d.Status) == 3 }

// Open tells whether the dispute is a chargeback still being decided:
// Stripe refuses a refund of the charge (charge_disputed), and so does the
// service (payment_disputed). An inquiry (warning_needs_response,
// warning_under_review) is no chargeback: the charge may still be
// refunded, which is how a merchant settles one.
func (d *Dispute) Open() bool {
	if d == nil {
		return false
	}
	switch stripe.DisputeStatus(d.Status) {
	case stripe.DisputeStatusNeedsResponse, stripe.DisputeStatusUnderReview:
		return true
	}
	return false
}

// HandlesDisputeEvent tells whether ApplyDisputeEventTx applies events of
// this type: every charge.dispute.* event carries the Dispute
// (docs.stripe.com/api/events/types: created, updated, closed,
// funds_withdrawn, funds_reinstated).
func HandlesDisputeEvent(eventType string) bool {
	switch eventType {
	case "charge.dispute.created", "charge.dispute.updated", "charge.dispute.closed",
		"charge.dispute.funds_withdrawn", "charge.dispute.funds_reinstated":
		return true
	}
	return false
}

// ApplyDisputeEventTx applies a charge.dispute.* event that happened at
// occurred to the payment whose PaymentIntent was disputed, inside tx: the
// webhook's and the event log's one way in.
func ApplyDisputeEventTx(ctx context.Context, tx *db.Tx, dp *stripe.Dispute, occurred time.Time) (EventOutcome, error) {
	if dp.PaymentIntent == nil || dp.PaymentIntent.ID == "" {
		return EventUnmatched, nil // a charge made without a PaymentIntent is none of ours
	}
	pay, err := lockByIntent(ctx, tx, dp.PaymentIntent.ID, "")
	if err != nil || pay == nil {
		return EventUnmatched, err
	}
	d := &Dispute{ID: dp.ID, Status: string(dp.Status), Reason: string(dp.Reason), Amount: dp.Amount, Created: dp.Created}
	was := pay.Dispute
	if was != nil && pay.DisputeEventAt != nil && occurred.Before(*pay.DisputeEventAt) {
		return EventStale, nil
	}
	if was != nil && was.ID == d.ID {
		if disputeStage(d.Status) < disputeStage(was.Status) {
			return EventStale, nil // same second, earlier stage: a late delivery
		}
		if *was == *d {
			return EventNoChange, nil
		}
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return "", err
	}
	if err := queries.SetPaymentDispute(ctx, tx.Queued(), dbsqlc.SetPaymentDisputeParams{
		ID: pay.ID, Dispute: raw, DisputeEventAt: pgtype.Timestamptz{Time: occurred, Valid: true},
	}); err != nil {
		return "", err
	}
	pay.Dispute, pay.DisputeEventAt = d, &occurred
	var events []string
	if was == nil || was.ID != d.ID {
		events = append(events, "payment.disputed")
	}
	if d.Closed() && (was == nil || was.ID != d.ID || !was.Closed()) {
		events = append(events, "payment.dispute_closed")
	}
	for _, event := range events {
		if err := stage(ctx, tx, nil, eventJob(pay.UserID, event, *pay)); err != nil {
			return "", err
		}
	}
	return EventApplied, nil
}
