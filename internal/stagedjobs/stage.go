// Package stagedjobs owns the jobs that announce committed state changes:
// receipts to customers and events to merchants. A flow stages them with
// StageTx in the same transaction as the change itself, so a job exists if
// and only if its change committed; the enqueuer later moves them, exactly
// once, into the job queue.
package stagedjobs

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/example/payments/internal/db/dbsqlc"
)

// Kind is what a job does.
type Kind string

// The kinds of job.
const (
	// MerchantEvent records an event (payment.succeeded, ...) in the merchant's feed.
	MerchantEvent Kind = "merchant_event"
	// ReceiptEmail sends the customer a receipt.
	ReceiptEmail Kind = "receipt_email"
)

// Job is one job to stage.
type Job struct {
	Kind Kind
	Args any // encoded as JSON
}

// EventArgs are a MerchantEvent's arguments: the event's type and a snapshot
// of the object as it was when the change committed.
type EventArgs struct {
	UserID int64           `json:"user_id"`
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// ReceiptArgs are a ReceiptEmail's arguments.
type ReceiptArgs struct {
	UserID   int64  `json:"user_id"`
	Payment  string `json:"payment"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// Reason says what the receipt is for: "payment" or "refund".
	Reason string `json:"reason"`
}

var queries = dbsqlc.New()

// StageTx stages jobs inside tx, on behalf of the request with idempotency
// key keyID. It has no pool variant on purpose: a job staged outside the
// transaction of its change could announce a change that never happened.
func StageTx(ctx context.Context, tx pgx.Tx, keyID uuid.UUID, jobs ...Job) error {
	for _, job := range jobs {
		args, err := json.Marshal(job.Args)
		if err != nil {
			return fmt.Errorf("staging %s: %w", job.Kind, err)
		}
		if err := queries.InsertStagedJob(ctx, tx, dbsqlc.InsertStagedJobParams{
			Kind: string(job.Kind), Args: args, IdempotencyKeyID: &keyID,
		}); err != nil {
			return fmt.Errorf("staging %s: %w", job.Kind, err)
		}
	}
	return nil
}
