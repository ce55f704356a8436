package payments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
)

// Status is where a payment stands.
type Status string

// The statuses of a payment.
const (
	StatusProcessing      Status = "processing"
	StatusRequiresCapture Status = "requires_capture"
	StatusSucceeded       Status = "succeeded"
	StatusFailed          Status = "failed"
	StatusCanceled        Status = "canceled"
)

// Payment is a payment as its owner sees it. Amounts are in the currency's
// minor unit.
type Payment struct {
	ID                  string
	UserID              int64 // the owner; not part of the API object
	Amount              int64
	Currency            string
	Status              Status
	AmountCaptured      int64
	AmountRefunded      int64
	PaymentMethod       string
	Capture             bool // capture=true: never requires_capture; not part of the API object
	StripePaymentIntent *string
	FailureCode         *string
	FailureMessage      *string
	Description         *string
	Metadata            map[string]string
	Created             time.Time
	// StripeEventAt is when the latest PaymentIntent event whose state the
	// payment holds happened; older PaymentIntent events are stale (see
	// ApplyIntentEventTx). Not part of the API object.
	StripeEventAt *time.Time
	// Dispute is the payment's chargeback as Stripe last reported it; nil
	// until one exists (dispute.go).
	Dispute *Dispute
	// DisputeEventAt is when the dispute event whose state Dispute holds
	// happened. Not part of the API object.
	DisputeEventAt *time.Time
	// DuplicateCharges are the PaymentIntents Stripe made for this payment
	// beyond the one recorded, each refunded by the service (duplicate.go).
	DuplicateCharges []DuplicateCharge
}

// Captured tells whether any money was captured.
func (p Payment) Captured() bool { return p.AmountCaptured > 0 }

// paymentObject is the Payment object of the API, as clients see it.
type paymentObject struct {
	ID                  string            `json:"id"`
	Object              string            `json:"object"`
	Amount              int64             `json:"amount"`
	Currency            string            `json:"currency"`
	Status              Status            `json:"status"`
	Captured            bool              `json:"captured"`
	AmountCaptured      int64             `json:"amount_captured"`
	AmountRefunded      int64             `json:"amount_refunded"`
	PaymentMethod       string            `json:"payment_method"`
	StripePaymentIntent *string           `json:"stripe_payment_intent"`
	FailureCode         *string           `json:"failure_code"`
	FailureMessage      *string           `json:"failure_message"`
	Description         *string           `json:"description"`
	Metadata            map[string]string `json:"metadata"`
	Created             int64             `json:"created"`
	Dispute             *Dispute          `json:"dispute"`
	DuplicateCharges    []DuplicateCharge `json:"duplicate_charges"` // nil: null, while there is none
}

// MarshalJSON renders the payment as the API's Payment object. Flows store
// this rendering as their response, so it lives with the payment.
func (p Payment) MarshalJSON() ([]byte, error) {
	return json.Marshal(paymentObject{
		ID: p.ID, Object: "payment", Amount: p.Amount, Currency: p.Currency, Status: p.Status,
		Captured: p.Captured(), AmountCaptured: p.AmountCaptured, AmountRefunded: p.AmountRefunded,
		PaymentMethod: p.PaymentMethod, StripePaymentIntent: p.StripePaymentIntent,
		FailureCode: p.FailureCode, FailureMessage: p.FailureMessage, Description: p.Description,
		Metadata: p.Metadata, Created: p.Created.Unix(), Dispute: p.Dispute, DuplicateCharges: p.DuplicateCharges,
	})
}

// ErrNotFound is returned for a payment that does not exist or belongs to
// another user: the two are indistinguishable on purpose.
var ErrNotFound = errors.New("payment not found")

var queries = dbsqlc.New()

// Get returns one of the user's payments.
func Get(ctx context.Context, conn dbsqlc.DBTX, userID int64, id string) (Payment, error) {
	row, err := queries.GetPayment(ctx, conn, dbsqlc.GetPaymentParams{ID: id, UserID: userID})
	if errors.Is(err, pgx.ErrNoRows) {
		return Payment{}, ErrNotFound
	}
	if err != nil {
		return Payment{}, err
	}
	return fromRow(row)
}

// ListParams pages through a user's payments, newest first.
type ListParams struct {
	Limit         int    // 1..100
	StartingAfter string // id of the last payment of the previous page; "" for the first page
}

// List returns a page of the user's payments and whether more follow. A
// StartingAfter that names no payment of the user is ErrNotFound.
func List(ctx context.Context, conn dbsqlc.DBTX, userID int64, p ListParams) ([]Payment, bool, error) {
	before, beforeID := db.EndOfTime, ""
	if p.StartingAfter != "" {
		cursor, err := Get(ctx, conn, userID, p.StartingAfter)
		if err != nil {
			return nil, false, err
		}
		before, beforeID = cursor.Created, cursor.ID
	}
	rows, err := queries.ListPayments(ctx, conn, dbsqlc.ListPaymentsParams{
		UserID: userID, BeforeCreated: before, BeforeID: beforeID, RowLimit: int32(p.Limit + 1),
	})
	if err != nil {
		return nil, false, err
	}
	rows, hasMore := db.TrimPage(rows, p.Limit)
	page := make([]Payment, 0, len(rows))
	for _, row := range rows {
		pay, err := fromRow(row)
		if err != nil {
			return nil, false, err
		}
		page = append(page, pay)
	}
	return page, hasMore, nil
}

func fromRow(row dbsqlc.Payment) (Payment, error) {
	metadata := map[string]string{}
	if err := json.Unmarshal(row.Metadata, &metadata); err != nil {
		return Payment{}, fmt.Errorf("payment %s: decoding metadata: %w", row.ID, err)
	}
	var dispute *Dispute
	if row.Dispute != nil {
		dispute = new(Dispute)
		if err := json.Unmarshal(row.Dispute, dispute); err != nil {
			return Payment{}, fmt.Errorf("payment %s: decoding its dispute: %w", row.ID, err)
		}
	}
	var duplicates []DuplicateCharge
	if row.DuplicateCharges != nil {
		if err := json.Unmarshal(row.DuplicateCharges, &duplicates); err != nil {
			return Payment{}, fmt.Errorf("payment %s: decoding its duplicate charges: %w", row.ID, err)
		}
	}
	return Payment{
		ID:                  row.ID,
		UserID:              row.UserID,
		Amount:              row.Amount,
		Currency:            row.Currency,
		Status:              Status(row.Status),
		AmountCaptured:      row.AmountCaptured,
		AmountRefunded:      row.AmountRefunded,
		PaymentMethod:       row.PaymentMethod,
		Capture:             row.Capture,
		StripePaymentIntent: fromText(row.StripePaymentIntent),
		FailureCode:         fromText(row.FailureCode),
		FailureMessage:      fromText(row.FailureMessage),
		Description:         fromText(row.Description),
		Metadata:            metadata,
		Created:             row.CreatedAt,
		StripeEventAt:       fromTimestamptz(row.StripeEventAt),
		Dispute:             dispute,
		DisputeEventAt:      fromTimestamptz(row.DisputeEventAt),
		DuplicateCharges:    duplicates,
	}, nil
}

func fromText(t pgtype.Text) *string {
	if !t.Valid {
		return nil
	}
	return &t.String
}

func fromTimestamptz(t pgtype.Timestamptz) *time.Time {
	if !t.Valid {
		return nil
	}
	return &t.Time
}

func toText(s *string) pgtype.Text {
	if s == nil {
		return pgtype.Text{}
	}
	return pgtype.Text{String: *s, Valid: true}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
