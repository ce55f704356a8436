package webhooks

import (
	"context"
	"encoding/base64"
	"time"
	"unicode/utf8"

	"github.com/example/payments/internal/db/dbsqlc"
)

// Unprocessable is a signed Stripe event the service could not decode or
// apply, kept aside for an operator: what could be read of its id and
// type, why, and its body as it came.
type Unprocessable struct {
	ID        int64     `json:"id"`
	EventID   *string   `json:"event_id"`   // null when it was not clean text
	EventType *string   `json:"event_type"` // null when it was not clean text
	Reason    string    `json:"reason"`
	Received  time.Time `json:"received_at"`
	// Payload is the body as text when it is valid UTF-8 (NUL escapes and
	// all, as JSON shows them), else null; PayloadBase64 is always the
	// body's exact bytes.
	Payload       *string `json:"payload"`
	PayloadBase64 string  `json:"payload_base64"`
}

// ListUnprocessable returns the events kept aside as unprocessable, newest
// first, at most limit of them.
func ListUnprocessable(ctx context.Context, conn dbsqlc.DBTX, limit int) ([]Unprocessable, error) {
	rows, err := queries.ListUnprocessableStripeEvents(ctx, conn, int32(min(limit, 1<<30)))
	if err != nil {
		return nil, err
	}
	out := make([]Unprocessable, 0, len(rows))
	for _, r := range rows {
		u := Unprocessable{ID: r.ID, Reason: r.Reason, Received: r.ReceivedAt, PayloadBase64: base64.StdEncoding.EncodeToString(r.Payload)}
		if r.EventID.Valid {
			u.EventID = &r.EventID.String
		}
		if r.EventType.Valid {
			u.EventType = &r.EventType.String
		}
		if utf8.Valid(r.Payload) {
			text := string(r.Payload)
			u.Payload = &text
		}
		out = append(out, u)
	}
	return out, nil
}
