package stripesim

import (
	"encoding/json"
	"net/http"
	"time"
)

// A dispute (a chargeback) is the customer's bank taking a charge back.
// As in Stripe's test mode, a payment with pm_card_createDispute is charged
// normally and disputed laterDelay later: a dispute of the whole amount,
// reason fraudulent, status needs_response, with charge.dispute.created and
// charge.dispute.funds_withdrawn (Stripe withdraws the disputed amount from
// the balance when the dispute opens). POST /_sim/disputes/{id}/close plays
// the bank's decision: won sends charge.dispute.closed and
// charge.dispute.funds_reinstated, lost sends charge.dispute.closed. The
// charge says disputed: true from the dispute on, and Stripe refuses a
// refund of it (400 charge_disputed) unless the merchant won.

type dispute struct {
	ID                  string                 `json:"id"`
	Object              string                 `json:"object"`
	Amount              int64                  `json:"amount"`
	BalanceTransactions []json.RawMessage      `json:"balance_transactions"` // the simulator keeps no balance: none
	Charge              string                 `json:"charge"`
	Created             int64                  `json:"created"`
	Currency            string                 `json:"currency"`
	Evidence            disputeEvidence        `json:"evidence"`
	EvidenceDetails     disputeEvidenceDetails `json:"evidence_details"`
	IsChargeRefundable  bool                   `json:"is_charge_refundable"`
	Livemode            bool                   `json:"livemode"`
	Metadata            metadata               `json:"metadata"`
	PaymentIntent       *string                `json:"payment_intent"`
	Reason              string                 `json:"reason"`
	Status              string                 `json:"status"`
}

// disputeEvidence is the evidence the merchant submitted: none, so every
// field Stripe's schema names is null, as Stripe sends it.
type disputeEvidence struct {
	AccessActivityLog            *string `json:"access_activity_log"`
	BillingAddress               *string `json:"billing_address"`
	CancellationPolicy           *string `json:"cancellation_policy"`
	CancellationPolicyDisclosure *string `json:"cancellation_policy_disclosure"`
	CancellationRebuttal         *string `json:"cancellation_rebuttal"`
	CustomerCommunication        *string `json:"customer_communication"`
	CustomerEmailAddress         *string `json:"customer_email_address"`
	CustomerName                 *string `json:"customer_name"`
	CustomerPurchaseIP           *string `json:"customer_purchase_ip"`
	CustomerSignature            *string `json:"customer_signature"`
	DuplicateChargeDocumentation *string `json:"duplicate_charge_documentation"`
	DuplicateChargeExplanation   *string `json:"duplicate_charge_explanation"`
	DuplicateChargeID            *string `json:"duplicate_charge_id"`
	ProductDescription           *string `json:"product_description"`
	Receipt                      *string `json:"receipt"`
	RefundPolicy                 *string `json:"refund_policy"`
	RefundPolicyDisclosure       *string `json:"refund_policy_disclosure"`
	RefundRefusalExplanation     *string `json:"refund_refusal_explanation"`
	ServiceDate                  *string `json:"service_date"`
	ServiceDocumentation         *string `json:"service_documentation"`
	ShippingAddress              *string `json:"shipping_address"`
	ShippingCarrier              *string `json:"shipping_carrier"`
	ShippingDate                 *string `json:"shipping_date"`
	ShippingDocumentation        *string `json:"shipping_documentation"`
	ShippingTrackingNumber       *string `json:"shipping_tracking_number"`
	UncategorizedFile            *string `json:"uncategorized_file"`
	UncategorizedText            *string `json:"uncategorized_text"`
}

type disputeEvidenceDetails struct {
	DueBy           *int64 `json:"due_by"`
	HasEvidence     bool   `json:"has_evidence"`
	PastDue         bool   `json:"past_due"`
	SubmissionCount int64  `json:"submission_count"`
}

// Dispute statuses used by the simulator (Stripe has warning_* ones too,
// for inquiries, which the simulator does not make).
const (
	disputeNeedsResponse = "needs_response"
	disputeWon           = "won"
	disputeLost          = "lost"
)

// disputeResponseWindow is how long the merchant has to answer a dispute
// (evidence_details.due_by). Card networks give different times; Stripe's
// docs (docs.stripe.com/disputes/responding) say the deadline is usually
// 7 to 21 days. The simulator takes 7.
const disputeResponseWindow = 7 * 24 * time.Hour

// openDispute is the customer's bank disputing the whole of a captured
// charge. It runs with s.mu held, as a later change.
func (s *Simulator) openDispute(ch *charge) {
	if ch.Disputed || !ch.Captured {
		return
	}
	now := s.now()
	dueBy := now.Add(disputeResponseWindow).Unix()
	dp := &dispute{
		ID:                  newID("dp"),
		Object:              "dispute",
		Amount:              ch.AmountCaptured,
		BalanceTransactions: []json.RawMessage{},
		Charge:              ch.ID,
		Created:             now.Unix(),
		Currency:            ch.Currency,
		EvidenceDetails:     disputeEvidenceDetails{DueBy: &dueBy},
		Metadata:            metadata{},
		PaymentIntent:       nullable(ch.PaymentIntent),
		Reason:              "fraudulent",
		Status:              disputeNeedsResponse,
	}
	s.state.disputes.add(dp.ID, dp)
	ch.Disputed = true
	s.emit(nil, "charge.dispute.created", dp)
	s.emit(nil, "charge.dispute.funds_withdrawn", dp)
}

// CloseDispute closes an open dispute as won or lost, as the bank's
// decision would (POST /_sim/disputes/{id}/close).
func (s *Simulator) CloseDispute(id, status string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applyDue()
	dp, ok := s.state.disputes.get(id)
	switch {
	case !ok:
		return errNoDispute
	case status != disputeWon && status != disputeLost:
		return errDisputeOutcome
	case dp.Status == disputeWon || dp.Status == disputeLost:
		return errDisputeClosed
	}
	dp.Status = status
	s.emit(nil, "charge.dispute.closed", dp)
	if status == disputeWon {
		s.emit(nil, "charge.dispute.funds_reinstated", dp)
	}
	return nil
}

type controlError string

func (e controlError) Error() string { return string(e) }

const (
	errNoDispute      controlError = "no such dispute"
	errDisputeOutcome controlError = `a dispute closes as "won" or "lost"`
	errDisputeClosed  controlError = "the dispute is closed already"
)

// refusesRefunds tells whether a charge's dispute keeps it from being
// refunded: Stripe answers 400 charge_disputed for a charge that was
// charged back, unless the merchant won the dispute.
func (s *Simulator) refusesRefunds(ch *charge) bool {
	if !ch.Disputed {
		return false
	}
	for _, dp := range s.state.disputes.order {
		if dp.Charge == ch.ID && dp.Status != disputeWon {
			return true
		}
	}
	return false
}

// chargeDisputed is Stripe's refusal of a refund of a disputed charge.
func chargeDisputed(ch *charge) *apiError {
	return invalidRequest(http.StatusBadRequest, "charge_disputed", "",
		"Charge %s has been charged back; cannot issue a refund.", ch.ID)
}

// getDispute is GET /v1/disputes/{id}.
func (s *Simulator) getDispute(c *call) outcome {
	dp, ok := s.state.disputes.get(c.id)
	if !ok {
		return rejected(noSuchObject(http.StatusNotFound, "dispute", "dispute", c.id))
	}
	return succeeded(dp)
}

// serveCloseDispute is POST /_sim/disputes/{id}/close {"status": "won"|"lost"}.
func (s *Simulator) serveCloseDispute(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Status string `json:"status"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeControlError(w, http.StatusBadRequest, "invalid close: "+err.Error())
		return
	}
	switch err := s.CloseDispute(r.PathValue("id"), req.Status); err {
	case nil:
		writeControl(w, http.StatusOK, map[string]string{"status": req.Status})
	case errNoDispute:
		writeControlError(w, http.StatusNotFound, err.Error())
	default:
		writeControlError(w, http.StatusBadRequest, err.Error())
	}
}
