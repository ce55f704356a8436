package chaostest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// worldWithStripesDoings is world() with what Stripe did on its own to
// payment A, each recorded as the service must: a late 500 on A's create
// that Stripe executed after the service's next child key charged (a
// second PaymentIntent, listed and refunded in full by the service), a
// second refund Stripe made for re_1 (a refund of origin duplicate), and
// a dispute the bank decided (lost).
func worldWithStripesDoings() (*Snapshot, []Record) {
	const alice = 1
	s, records := world()
	a := &s.Payments[0]
	a.AmountRefunded = 1000
	a.Dispute = &PaymentDispute{ID: "dp_1", Status: "lost", Amount: 2000}
	a.DuplicateCharges = []DuplicateCharge{{StripePaymentIntent: "pi_A2", Amount: 2000, Status: "refunded"}}
	s.Sim.Requests = append(s.Sim.Requests, SimRequest{Method: "POST", Path: "/v1/payment_intents",
		IdempotencyKey: "payments-key-a-payment_intent", Status: 500, Fault: "late_500"})
	s.Sim.PaymentIntents = append(s.Sim.PaymentIntents, SimPaymentIntent{ID: "pi_A2", Amount: 2000, AmountReceived: 2000,
		Currency: "usd", Status: "succeeded", LatestCharge: "ch_A2", Metadata: map[string]string{"payment": "pay_A", "idempotency_key_id": "key-a"}})
	s.Sim.Charges = append(s.Sim.Charges, SimCharge{ID: "ch_A2", PaymentIntent: "pi_A2", Status: "succeeded", Amount: 2000,
		Captured: true, AmountCaptured: 2000, AmountRefunded: 2000})
	s.Sim.Charges[0].AmountRefunded = 1000
	s.Sim.Refunds = append(s.Sim.Refunds,
		SimRefund{ID: "re_sim2", PaymentIntent: "pi_A", Amount: 500, Status: "succeeded", Metadata: map[string]string{"refund": "re_1"}},
		SimRefund{ID: "re_simdup", PaymentIntent: "pi_A2", Amount: 2000, Status: "succeeded",
			Metadata: map[string]string{"duplicate_charge": "pi_A2", "payment": "pay_A"}})
	s.Sim.Disputes = []SimDispute{{ID: "dp_1", PaymentIntent: "pi_A", Amount: 2000, Status: "lost"}}
	s.Refunds = append(s.Refunds, Refund{ID: "re_2", PaymentID: "pay_A", Amount: 500, Status: "succeeded", StripeRefund: "re_sim2", Origin: "duplicate"})
	s.Keys = append(s.Keys, Key{ID: "key-dup", UserID: alice, Key: duplicateChargeKeyPrefix + "pi_A2", Flow: "refund_duplicate_charge",
		RecoveryPoint: "finished", ResponseCode: 200})
	s.Receipts = append(s.Receipts, Receipt{PaymentID: "pay_A", Kind: "refund:re_2", Sent: true})
	s.Mail.Accepted, s.Mail.Distinct = 3, 3
	s.RiverJobs = append(s.RiverJobs, RiverJob{ID: 7, Kind: kindReceiptEmail, State: "completed", Attempt: 1, Payment: "pay_A", Reason: "refund", Refund: "re_2"})
	for i, e := range []struct{ typ, object string }{
		{"refund.succeeded", "re_2"}, {"payment.duplicate_refunded", "pay_A"}, {"payment.disputed", "pay_A"}, {"payment.dispute_closed", "pay_A"},
	} {
		id := "evt_x" + string(rune('a'+i))
		created := s.Events[len(s.Events)-1].Created.Add(time.Second)
		s.Events = append(s.Events, Event{ID: id, UserID: alice, Type: e.typ, ObjectID: e.object, Created: created})
		s.RiverJobs = append(s.RiverJobs, RiverJob{ID: int64(10 + i), Kind: kindMerchantEvent, State: "completed", Attempt: 1, EventID: id})
		s.Deliveries = append(s.Deliveries, Delivery{EventID: id, EndpointID: "we_1", Status: "succeeded"})
		s.Arrivals = append(s.Arrivals, Arrival{Endpoint: "all-1", WebhookID: id, EventID: id, EventType: e.typ,
			ValidSig: true, At: created.Add(time.Second), Answered: 200, Acknowledged: true})
	}
	return s, records
}

// Stripe's second refund, its second PaymentIntent (refunded), and a
// dispute, each recorded as Stripe holds them: no violation.
func TestCheck_whatStripeDidTwiceRecordedIsNoViolation(t *testing.T) {
	t.Parallel()
	s, records := worldWithStripesDoings()
	require.Empty(t, Check(s, records))
}

// Each way the service can fail to say what Stripe holds is caught.
func TestCheck_whatStripeDidTwiceDroppedIsCaught(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		breakIt func(s *Snapshot)
		rule    string
		key     string
	}{
		{"a customer charged twice and never refunded", func(s *Snapshot) {
			s.Sim.Refunds = s.Sim.Refunds[:len(s.Sim.Refunds)-1]
			s.Sim.Charges[len(s.Sim.Charges)-1].AmountRefunded = 0
		}, "charged-twice", "pay_A"},
		{"a second charge refunded but not listed", func(s *Snapshot) {
			s.Payments[0].DuplicateCharges = nil
		}, "charged-twice", "pay_A"},
		{"a second charge refunded twice", func(s *Snapshot) {
			s.Sim.Refunds = append(s.Sim.Refunds, SimRefund{ID: "re_simdup2", PaymentIntent: "pi_A2", Amount: 0, Status: "succeeded",
				Metadata: map[string]string{"duplicate_charge": "pi_A2", "payment": "pay_A"}})
		}, "charged-twice", "pay_A"},
		{"a second PaymentIntent no late 500 explains", func(s *Snapshot) {
			s.Sim.Requests = s.Sim.Requests[:len(s.Sim.Requests)-1]
		}, "stripe-pi", "pay_A"},
		{"Stripe's second refund dropped", func(s *Snapshot) {
			s.Refunds = s.Refunds[:1]
		}, "duplicate-refund", "re_sim2"},
		{"a duplicate refund Stripe never made", func(s *Snapshot) {
			s.Refunds[1].StripeRefund = "re_made_up"
		}, "duplicate-refund", "re_2"},
		{"a dispute not recorded", func(s *Snapshot) {
			s.Payments[0].Dispute = nil
		}, "dispute", "pay_A"},
		{"a dispute left open", func(s *Snapshot) {
			s.Payments[0].Dispute.Status = "needs_response"
		}, "dispute", "pay_A"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, records := worldWithStripesDoings()
			tt.breakIt(s)
			violations := Check(s, records)
			require.Contains(t, violations, findViolation(violations, tt.rule, tt.key), "want [%s] %s in %v", tt.rule, tt.key, violations)
		})
	}
}
