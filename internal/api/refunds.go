package api

import (
	"net/http"

	"github.com/example/payments/internal/payments"
)

// createRefundRequest is the body of POST /v1/refunds. Pointers tell a
// missing field from a zero one.
type createRefundRequest struct {
	Payment *string `json:"payment"`
	Amount  *int64  `json:"amount"`
	Reason  *string `json:"reason"`
}

// refundReasons are the reasons Stripe accepts for a refund.
var refundReasons = map[string]bool{"duplicate": true, "fraudulent": true, "requested_by_customer": true}

// createRefund answers POST /v1/refunds. Whether the payment can be refunded
// (captured, with enough left) is decided inside the flow, against the
// payment's state under its row lock, so that answer is stored; only the
// input's shape and the payment's owner are checked here, and not stored.
func (s *Server) createRefund(w http.ResponseWriter, r *http.Request) error {
	var req createRefundRequest
	idem, err := readIdempotent(r, &req, false)
	if err != nil {
		return err
	}
	params, err := req.validate()
	if err != nil {
		return err
	}
	// Another user's payment is 404, like one that does not exist; one
	// still processing is 409 payment_processing, and nothing is stored.
	pay, err := payments.Get(r.Context(), s.pool, userFrom(r.Context()).ID, params.Payment)
	if err != nil {
		return err
	}
	if err := payments.CheckKnown(pay); err != nil {
		return err
	}
	resp, err := s.payments.Refund(r.Context(), idem, params)
	s.writeExecution(w, r, resp, err)
	return nil
}

func (req createRefundRequest) validate() (payments.RefundParams, error) {
	switch {
	case req.Payment == nil || *req.Payment == "":
		return payments.RefundParams{}, validationFailed("payment is required: the id of the payment to refund, such as \"pay_...\".")
	case req.Amount != nil && (*req.Amount < MinAmount || *req.Amount > MaxAmount):
		return payments.RefundParams{}, validationFailed("amount must be from %d to %d, not %d; leave it out to refund what is left.", MinAmount, MaxAmount, *req.Amount)
	case req.Reason != nil && !refundReasons[*req.Reason]:
		return payments.RefundParams{}, validationFailed("reason must be duplicate, fraudulent or requested_by_customer, not %q.", *req.Reason)
	}
	p := payments.RefundParams{Payment: *req.Payment}
	if req.Amount != nil {
		p.Amount = *req.Amount
	}
	if req.Reason != nil {
		p.Reason = *req.Reason
	}
	return p, nil
}

// getRefund answers GET /v1/refunds/{id}.
func (s *Server) getRefund(w http.ResponseWriter, r *http.Request) error {
	id, ok := pathParam(r, "id")
	if !ok {
		return payments.ErrRefundNotFound
	}
	re, err := payments.GetRefund(r.Context(), s.pool, userFrom(r.Context()).ID, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, re)
	return nil
}
