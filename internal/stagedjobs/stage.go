package stagedjobs

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/ids"
)

// Kind is what a job does.
type Kind string

// The kinds of job.
const (
	// MerchantEvent records an event (payment.succeeded, ...) in the merchant's feed.
	MerchantEvent Kind = "merchant_event"
	// ReceiptEmail sends the customer a receipt.
	ReceiptEmail Kind = "receipt_email"
	// WebhookDelivery POSTs an event to one of the merchant's endpoints
	// (package merchanthooks does the work).
	WebhookDelivery Kind = "webhook_delivery"
)

// Job is one job to stage.
type Job struct {
	Kind Kind
	Args any // encoded as JSON
}

// EventArgs are a MerchantEvent's arguments: the event's id (chosen at
// staging, so a job that runs twice writes one event), its type, and a
// snapshot of the object as it was when the change committed.
type EventArgs struct {
	EventID string          `json:"event_id"`
	UserID  int64           `json:"user_id"`
	Type    string          `json:"type"`
	Object  json.RawMessage `json:"object"`
	// Created is the event's created: unset when the event is staged (the
	// staged row's created_at, the database's clock, is the event's
	// created, the clock endpoints are stamped with; see
	// LockEndpointsOfUser in internal/db/queries/webhooks_out.sql), and set
	// from it when the drain hands the event to River as a job of its own.
	// EventWorker stamps an event that reaches it without one with the
	// database's clock.
	Created time.Time `json:"created,omitzero"`
}

// NewEventArgs describes a new event of eventType about object. Its id is
// time-ordered (package ids), so that the drain's inserts into events and
// webhook_deliveries, whose primary keys lead with it, go to the right-most
// leaf of each rather than to a random page; the drain writes them at READ
// COMMITTED, where the shared leaf costs no serialization failures.
func NewEventArgs(userID int64, eventType string, object json.RawMessage) EventArgs {
	return EventArgs{EventID: ids.New("evt"), UserID: userID, Type: eventType, Object: object}
}

// ReceiptArgs are a ReceiptEmail's arguments.
type ReceiptArgs struct {
	UserID   int64  `json:"user_id"`
	Payment  string `json:"payment"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// Reason says what the receipt is for: "payment" or "refund".
	Reason string `json:"reason"`
	// Refund is the refund's id, for a refund receipt.
	Refund string `json:"refund,omitempty"`
}

// DeliveryArgs are a WebhookDelivery's arguments: which event goes to
// which endpoint, in which cycle of attempts. The first cycle is 0; each
// redelivery starts the next, with a job of its own (see DeliveryArgs.InsertOpts).
type DeliveryArgs struct {
	EventID    string `json:"event_id"`
	EndpointID string `json:"endpoint_id"`
	Cycle      int32  `json:"cycle"`
}

var queries = dbsqlc.New()

// StageTx stages jobs inside the transaction tx, on behalf of the request
// with idempotency key keyID. It has no pool variant on purpose: a job staged
// outside the transaction of its change could announce a change that never
// happened. It reads no result back, so tx may queue its statements
// (db.Tx.Queued). The enqueuer finds the jobs by polling (see Enqueuer.Run
// for why nothing wakes it).
func StageTx(ctx context.Context, tx dbsqlc.DBTX, keyID uuid.UUID, jobs ...Job) error {
	return stageTx(ctx, tx, &keyID, jobs)
}

// StageUnkeyedTx stages jobs inside tx for a change no request with an
// idempotency key made: one a Stripe webhook announced, say.
func StageUnkeyedTx(ctx context.Context, tx dbsqlc.DBTX, jobs ...Job) error {
	return stageTx(ctx, tx, nil, jobs)
}

func stageTx(ctx context.Context, tx dbsqlc.DBTX, keyID *uuid.UUID, jobs []Job) error {
	if len(jobs) == 0 {
		return nil
	}
	rows := dbsqlc.InsertStagedJobsParams{IdempotencyKeyID: keyID, TraceParent: traceParentOf(ctx)} // trace.go
	for _, job := range jobs {
		args, err := json.Marshal(job.Args)
		if err != nil {
			return fmt.Errorf("staging %s: %w", job.Kind, err)
		}
		rows.Kinds = append(rows.Kinds, string(job.Kind))
		rows.Args = append(rows.Args, string(args))
	}
	if err := queries.InsertStagedJobs(ctx, tx, rows); err != nil {
		return fmt.Errorf("staging %v: %w", rows.Kinds, err)
	}
	return nil
}
