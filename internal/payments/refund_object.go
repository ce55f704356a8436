package payments

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/example/payments/internal/db/dbsqlc"
)

// RefundStatus is where a refund stands.
type RefundStatus string

// The statuses of a refund. A pending refund holds its amount: what is left
// to refund on its payment does not count it.
const (
	RefundPending   RefundStatus = "pending"
	RefundSucceeded RefundStatus = "succeeded"
	RefundFailed    RefundStatus = "failed"
)

// Refund is a refund as its owner sees it. The amount is in the payment's
// currency's minor unit.
type Refund struct {
	ID           string
	UserID       int64 // the owner; not part of the API object
	Payment      string
	Amount       int64
	Status       RefundStatus
	StripeRefund *string // Stripe's re_... once Stripe made it
	Reason       *string
	// FailureReason says why Stripe refused the refund (its message) or
	// failed it later (its failure_reason, such as expired_or_canceled_card).
	FailureReason *string
	// Origin is RefundAPI for a refund made with this API, RefundExternal
	// for one made outside it (Stripe's dashboard) that Stripe told us of,
	// RefundDuplicate for a second refund Stripe made for one of ours.
	Origin  RefundOrigin
	Created time.Time
}

// RefundOrigin says who made a refund.
type RefundOrigin string

// The origins of a refund.
const (
	RefundAPI      RefundOrigin = "api"
	RefundExternal RefundOrigin = "external"
	// RefundDuplicate is a second refund Stripe made for one of ours
	// (refund_moves.go, isSecondRefund).
	RefundDuplicate RefundOrigin = "duplicate"
)

// refundObject is the Refund object of the API, as clients see it.
type refundObject struct {
	ID            string       `json:"id"`
	Object        string       `json:"object"`
	Payment       string       `json:"payment"`
	Amount        int64        `json:"amount"`
	Status        RefundStatus `json:"status"`
	StripeRefund  *string      `json:"stripe_refund"`
	Reason        *string      `json:"reason"`
	FailureReason *string      `json:"failure_reason"`
	Origin        RefundOrigin `json:"origin"`
	Created       int64        `json:"created"`
}

// MarshalJSON renders the refund as the API's Refund object. The refund
// flow stores this rendering as its response, and events carry it.
func (r Refund) MarshalJSON() ([]byte, error) {
	return json.Marshal(refundObject{
		ID: r.ID, Object: "refund", Payment: r.Payment, Amount: r.Amount, Status: r.Status,
		StripeRefund: r.StripeRefund, Reason: r.Reason, FailureReason: r.FailureReason, Origin: r.Origin, Created: r.Created.Unix(),
	})
}

// ErrRefundNotFound is returned for a refund that does not exist or belongs
// to another user: the two are indistinguishable on purpose.
var ErrRefundNotFound = errors.New("refund not found")

// GetRefund returns one of the user's refunds.
func GetRefund(ctx context.Context, conn dbsqlc.DBTX, userID int64, id string) (Refund, error) {
	row, err := queries.GetRefund(ctx, conn, dbsqlc.GetRefundParams{ID: id, UserID: userID})
	if errors.Is(err, pgx.ErrNoRows) {
		return Refund{}, ErrRefundNotFound
	}
	if err != nil {
		return Refund{}, err
	}
	return fromRefundRow(row), nil
}

func fromRefundRow(row dbsqlc.Refund) Refund {
	return Refund{
		ID:            row.ID,
		UserID:        row.UserID,
		Payment:       row.PaymentID,
		Amount:        row.Amount,
		Status:        RefundStatus(row.Status),
		StripeRefund:  fromText(row.StripeRefund),
		Reason:        fromText(row.Reason),
		FailureReason: fromText(row.FailureReason),
		Origin:        RefundOrigin(row.Origin),
		Created:       row.CreatedAt,
	}
}

// newRefundID returns "re_" and 24 random hex characters. Refund ids stay
// random, unlike payments' (package ids): a refund's record sets
// stripe_refund, which a unique index names, so it is not a HOT update, and
// a time-ordered id would put every refund's record on the one leaf page of
// the primary key that concurrent refunds read and insert into.
func newRefundID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // never fails (crypto/rand documents it)
	return "re_" + hex.EncodeToString(b)
}
