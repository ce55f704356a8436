package api

import (
	"encoding/json"
	"net/http"

	"github.com/example/payments/internal/payments"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	encodeJSON(w, v)
}

// encodeJSON writes v without HTML escaping: these are API responses, never
// pages, and "<key>" should read as it was written.
func encodeJSON(w http.ResponseWriter, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// listJSON is a page of a list, as Stripe shapes it.
type listJSON[T any] struct {
	Object  string `json:"object"`
	Data    []T    `json:"data"`
	HasMore bool   `json:"has_more"`
}

func toList[T any](data []T, hasMore bool) listJSON[T] {
	return listJSON[T]{Object: "list", Data: data, HasMore: hasMore}
}

// paymentJSON is the Payment object of API.md.
type paymentJSON struct {
	ID                  string            `json:"id"`
	Object              string            `json:"object"`
	Amount              int64             `json:"amount"`
	Currency            string            `json:"currency"`
	Status              string            `json:"status"`
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
}

func toPaymentJSON(p payments.Payment) paymentJSON {
	return paymentJSON{
		ID: p.ID, Object: "payment", Amount: p.Amount, Currency: p.Currency, Status: string(p.Status),
		Captured: p.Captured(), AmountCaptured: p.AmountCaptured, AmountRefunded: p.AmountRefunded,
		PaymentMethod: p.PaymentMethod, StripePaymentIntent: p.StripePaymentIntent,
		FailureCode: p.FailureCode, FailureMessage: p.FailureMessage, Description: p.Description,
		Metadata: p.Metadata, Created: p.Created.Unix(),
	}
}
