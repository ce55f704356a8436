package api

import (
	"context"
	"net/http"
	"strconv"

	"github.com/example/payments/internal/currency"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/recovery"
)

// createPaymentRequest is the body of POST /v1/payments. Pointers tell a
// missing field from a zero one.
type createPaymentRequest struct {
	Amount        *int64            `json:"amount"`
	Currency      *string           `json:"currency"`
	PaymentMethod *string           `json:"payment_method"`
	Capture       *bool             `json:"capture"`
	Description   *string           `json:"description"`
	Metadata      map[string]string `json:"metadata"`
}

// createPayment answers POST /v1/payments.
func (s *Server) createPayment(w http.ResponseWriter, r *http.Request) error {
	var req createPaymentRequest
	idem, err := readIdempotent(r, &req, false)
	if err != nil {
		return err
	}
	params, err := req.validate()
	if err != nil {
		return err
	}
	resp, err := s.payments.Create(r.Context(), idem, params)
	s.writeExecution(w, r, resp, err)
	return nil
}

// Limits of a payment's fields, as Stripe's. A payment's amount is also at
// least its currency's minimum charge (package currency); a capture's or a
// refund's amount is not: Stripe sets no minimum on those.
const (
	MinAmount           = 1
	MaxAmount           = currency.MaxCharge
	maxDescription      = 1000
	maxMetadataKeys     = 50
	maxMetadataKeyLen   = 40
	maxMetadataValueLen = 500
)

func (req createPaymentRequest) validate() (payments.CreateParams, error) {
	switch {
	case req.Amount == nil:
		return payments.CreateParams{}, validationFailed("amount is required: an integer in the currency's minor unit (2000 is $20.00).")
	case req.Currency == nil:
		return payments.CreateParams{}, validationFailed("currency is required: a lower-case ISO 4217 code such as \"usd\".")
	}
	// Stripe would refuse the charge: refusing it here, before any work,
	// stores nothing and leaves the key free for the fixed request.
	if err := currency.CheckCharge(*req.Currency, *req.Amount); err != nil {
		return payments.CreateParams{}, validationFailed("%s.", err)
	}
	switch {
	case req.PaymentMethod == nil || *req.PaymentMethod == "" || len(*req.PaymentMethod) > 255:
		return payments.CreateParams{}, validationFailed("payment_method is required: a payment method id such as \"pm_card_visa\".")
	case req.Description != nil && len(*req.Description) > maxDescription:
		return payments.CreateParams{}, validationFailed("description is at most %d bytes.", maxDescription)
	}
	if err := validateMetadata(req.Metadata); err != nil {
		return payments.CreateParams{}, err
	}
	return payments.CreateParams{
		Amount: *req.Amount, Currency: *req.Currency, PaymentMethod: *req.PaymentMethod,
		Capture: req.Capture == nil || *req.Capture, Description: req.Description, Metadata: req.Metadata,
	}, nil
}

func validateMetadata(m map[string]string) error {
	if len(m) > maxMetadataKeys {
		return validationFailed("metadata has at most %d keys.", maxMetadataKeys)
	}
	for k, v := range m {
		if k == "" || len(k) > maxMetadataKeyLen || len(v) > maxMetadataValueLen {
			return validationFailed("metadata keys are 1 to %d bytes and values at most %d.", maxMetadataKeyLen, maxMetadataValueLen)
		}
	}
	return nil
}

// captureRequest is the optional body of POST /v1/payments/{id}/capture.
type captureRequest struct {
	Amount *int64 `json:"amount"`
}

// capturePayment answers POST /v1/payments/{id}/capture.
func (s *Server) capturePayment(w http.ResponseWriter, r *http.Request) error {
	var req captureRequest
	return s.paymentAction(w, r, &req, func(pay payments.Payment) (payments.ActionParams, error) {
		p := payments.ActionParams{Payment: pay.ID}
		if req.Amount != nil {
			if *req.Amount < MinAmount || *req.Amount > pay.Amount {
				return p, validationFailed("amount must be from %d to the authorised %d, not %d.", MinAmount, pay.Amount, *req.Amount)
			}
			p.Amount = *req.Amount
		}
		return p, nil
	}, s.payments.Capture)
}

// cancelPayment answers POST /v1/payments/{id}/cancel.
func (s *Server) cancelPayment(w http.ResponseWriter, r *http.Request) error {
	var req struct{}
	return s.paymentAction(w, r, &req, func(pay payments.Payment) (payments.ActionParams, error) {
		return payments.ActionParams{Payment: pay.ID}, nil
	}, s.payments.Cancel)
}

// paymentAction is the common path of capture and cancel: the key, the
// optional body, the caller's payment (404 if not theirs; 409
// payment_processing while its creation is unfinished), then the flow.
func (s *Server) paymentAction(w http.ResponseWriter, r *http.Request, req any,
	params func(payments.Payment) (payments.ActionParams, error),
	run func(context.Context, payments.KeyedRequest, payments.ActionParams) (recovery.Response, error)) error {
	idem, err := readIdempotent(r, req, true)
	if err != nil {
		return err
	}
	id, ok := pathParam(r, "id")
	if !ok {
		return payments.ErrNotFound
	}
	pay, err := payments.Get(r.Context(), s.pool, userFrom(r.Context()).ID, id)
	if err != nil {
		return err
	}
	// Not yet known: 409 payment_processing, and nothing stored for the key.
	if err := payments.CheckKnown(pay); err != nil {
		return err
	}
	p, err := params(pay)
	if err != nil {
		return err
	}
	resp, err := run(r.Context(), idem, p)
	s.writeExecution(w, r, resp, err)
	return nil
}

// getPayment answers GET /v1/payments/{id}.
func (s *Server) getPayment(w http.ResponseWriter, r *http.Request) error {
	id, ok := pathParam(r, "id")
	if !ok {
		return payments.ErrNotFound
	}
	pay, err := payments.Get(r.Context(), s.pool, userFrom(r.Context()).ID, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, pay)
	return nil
}

// listPayments answers GET /v1/payments?limit=N&starting_after=ID: the
// caller's payments, newest first.
func (s *Server) listPayments(w http.ResponseWriter, r *http.Request) error {
	params, err := listParams(r)
	if err != nil {
		return err
	}
	page, hasMore, err := payments.List(r.Context(), s.pool, userFrom(r.Context()).ID, params)
	if err != nil {
		return inQueryParam("starting_after", "payment", params.StartingAfter, err)
	}
	writeJSON(w, http.StatusOK, toList(page, hasMore))
	return nil
}

// listParams reads limit (1..100, default 10) and starting_after.
func listParams(r *http.Request) (payments.ListParams, error) {
	q := r.URL.Query()
	p := payments.ListParams{Limit: 10, StartingAfter: q.Get("starting_after")}
	if raw := q.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > 100 {
			return p, validationFailed("limit must be an integer from 1 to 100, not %q", raw)
		}
		p.Limit = n
	}
	return p, nil
}
