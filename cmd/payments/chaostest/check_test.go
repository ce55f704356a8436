package chaostest

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// world is a small consistent end state: payment pay_A captured at once and
// refunded 500 of 2000, pay_B declined, pay_C authorised then canceled.
func world() (*Snapshot, []Record) {
	const alice = 1
	payA := `{"id":"pay_A","object":"payment","amount":2000,"currency":"usd","status":"succeeded","captured":true,"amount_captured":2000,"amount_refunded":0,"stripe_payment_intent":"pi_A"}`
	payB := `{"type":"about:blank","title":"Payment Required","status":402,"code":"card_declined","decline_code":"generic_decline","payment":"pay_B"}`
	payC := `{"id":"pay_C","object":"payment","amount":700,"currency":"eur","status":"requires_capture","captured":false,"amount_captured":0,"amount_refunded":0,"stripe_payment_intent":"pi_C"}`
	cancelC := `{"id":"pay_C","object":"payment","amount":700,"currency":"eur","status":"canceled","captured":false,"amount_captured":0,"amount_refunded":0,"stripe_payment_intent":"pi_C"}`
	refundA := `{"id":"re_1","object":"refund","payment":"pay_A","amount":500,"status":"succeeded","stripe_refund":"re_sim1"}`

	records := []Record{
		{Key: "k-a", UserID: alice, Op: OpCreate, Method: "POST", Path: "/v1/payments", Amount: 2000, Currency: "usd",
			PaymentMethod: "pm_card_visa", Capture: true, Expect: Expect{Want: Outcome{Status: 201, ObjectStatus: "succeeded"}},
			Finals: []Answer{{Status: 201, Body: []byte(payA)}}, Replays: []Answer{{Status: 201, Body: []byte(payA), Replayed: true}},
			Reuses: []Answer{{Status: 422, Body: []byte(`{"status":422,"code":"idempotency_key_reused"}`)}}, Attempts: 3},
		{Key: "k-b", UserID: alice, Op: OpCreate, Method: "POST", Path: "/v1/payments", Amount: 900, Currency: "usd",
			PaymentMethod: "pm_card_chargeDeclined", Capture: true,
			Expect: Expect{Want: Outcome{Status: 402, Code: "card_declined", DeclineCode: "generic_decline"}},
			Finals: []Answer{{Status: 402, Body: []byte(payB)}, {Status: 402, Body: []byte(payB), Replayed: true}}, Attempts: 2},
		{Key: "k-c", UserID: alice, Op: OpCreate, Method: "POST", Path: "/v1/payments", Amount: 700, Currency: "eur",
			PaymentMethod: "pm_card_mastercard", Expect: Expect{Want: Outcome{Status: 201, ObjectStatus: "requires_capture"}},
			Finals: []Answer{{Status: 201, Body: []byte(payC), Replayed: true}}, Attempts: 5},
		{Key: "k-c-cancel", UserID: alice, Op: OpCancel, Method: "POST", Path: "/v1/payments/pay_C/cancel", Payment: "pay_C",
			Expect: Expect{Want: Outcome{Status: 200, ObjectStatus: "canceled"}}, Finals: []Answer{{Status: 200, Body: []byte(cancelC)}}, Attempts: 1},
		{Key: "k-a-refund", UserID: alice, Op: OpRefund, Method: "POST", Path: "/v1/refunds", Payment: "pay_A",
			Expect: Expect{Want: Outcome{Status: 201, ObjectStatus: "succeeded", Amount: 500}}, Finals: []Answer{{Status: 201, Body: []byte(refundA)}}, Attempts: 1},
	}
	for i := range records {
		r := &records[i]
		for _, as := range [][]Answer{r.Finals, r.Replays, r.Reuses} {
			for j := range as {
				as[j].KeyEcho = r.Key
			}
		}
	}
	keys := []Key{
		{ID: "key-a", UserID: alice, Key: "k-a", Flow: "create_payment", RecoveryPoint: "finished", ResponseCode: 201, ResponseBody: []byte(payA)},
		{ID: "key-b", UserID: alice, Key: "k-b", Flow: "create_payment", RecoveryPoint: "finished", ResponseCode: 402, ResponseBody: []byte(payB)},
		{ID: "key-c", UserID: alice, Key: "k-c", Flow: "create_payment", RecoveryPoint: "finished", ResponseCode: 201, ResponseBody: []byte(payC)},
		{ID: "key-c-cancel", UserID: alice, Key: "k-c-cancel", Flow: "cancel_payment", RecoveryPoint: "finished", ResponseCode: 200, ResponseBody: []byte(cancelC)},
		{ID: "key-a-refund", UserID: alice, Key: "k-a-refund", Flow: "refund_payment", RecoveryPoint: "finished", ResponseCode: 201, ResponseBody: []byte(refundA)},
	}
	s := &Snapshot{
		Keys: keys,
		Payments: []Payment{
			{ID: "pay_A", UserID: alice, Amount: 2000, Currency: "usd", Status: "succeeded", Capture: true, AmountCaptured: 2000,
				AmountRefunded: 500, PaymentMethod: "pm_card_visa", StripePaymentIntent: "pi_A", KeyID: "key-a", ChaosKey: "k-a"},
			{ID: "pay_B", UserID: alice, Amount: 900, Currency: "usd", Status: "failed", Capture: true, PaymentMethod: "pm_card_chargeDeclined",
				StripePaymentIntent: "pi_B", FailureCode: "generic_decline", KeyID: "key-b", ChaosKey: "k-b"},
			{ID: "pay_C", UserID: alice, Amount: 700, Currency: "eur", Status: "canceled", PaymentMethod: "pm_card_mastercard",
				StripePaymentIntent: "pi_C", KeyID: "key-c", ChaosKey: "k-c"},
		},
		Refunds: []Refund{{ID: "re_1", PaymentID: "pay_A", Amount: 500, Status: "succeeded", StripeRefund: "re_sim1", KeyID: "key-a-refund"}},
		Events: []Event{
			{ID: "evt_1", UserID: alice, Type: "payment.succeeded", ObjectID: "pay_A"},
			{ID: "evt_2", UserID: alice, Type: "payment.failed", ObjectID: "pay_B"},
			{ID: "evt_3", UserID: alice, Type: "payment.canceled", ObjectID: "pay_C"},
			{ID: "evt_4", UserID: alice, Type: "refund.succeeded", ObjectID: "re_1"},
		},
		Receipts: []Receipt{{PaymentID: "pay_A", Kind: "payment", Sent: true}, {PaymentID: "pay_A", Kind: "refund:re_1", Sent: true}},
		Mail:     MailState{Accepted: 2, Distinct: 2},
		RiverJobs: []RiverJob{
			{ID: 1, Kind: kindMerchantEvent, State: "completed", Attempt: 1, EventID: "evt_1"},
			{ID: 2, Kind: kindMerchantEvent, State: "completed", Attempt: 1, EventID: "evt_2"},
			{ID: 3, Kind: kindMerchantEvent, State: "completed", Attempt: 2, EventID: "evt_3"},
			{ID: 4, Kind: kindMerchantEvent, State: "completed", Attempt: 1, EventID: "evt_4"},
			{ID: 5, Kind: kindReceiptEmail, State: "completed", Attempt: 1, Payment: "pay_A", Reason: "payment"},
			{ID: 6, Kind: kindReceiptEmail, State: "completed", Attempt: 1, Payment: "pay_A", Reason: "refund", Refund: "re_1"},
		},
		Sim: SimState{
			PaymentIntents: []SimPaymentIntent{
				{ID: "pi_A", Amount: 2000, AmountReceived: 2000, Currency: "usd", Status: "succeeded", LatestCharge: "ch_A",
					Metadata: map[string]string{"payment": "pay_A"}},
				{ID: "pi_B", Amount: 900, Currency: "usd", Status: "requires_payment_method", LatestCharge: "ch_B",
					Metadata: map[string]string{"payment": "pay_B"}, LastPaymentError: &struct {
						Code        string `json:"code"`
						DeclineCode string `json:"decline_code"`
					}{Code: "card_declined", DeclineCode: "generic_decline"}},
				{ID: "pi_C", Amount: 700, Currency: "eur", Status: "canceled", LatestCharge: "ch_C", Metadata: map[string]string{"payment": "pay_C"}},
			},
			Charges: []SimCharge{
				{ID: "ch_A", PaymentIntent: "pi_A", Status: "succeeded", Amount: 2000, Captured: true, AmountCaptured: 2000, AmountRefunded: 500},
				{ID: "ch_B", PaymentIntent: "pi_B", Amount: 900, Status: "failed"},
				{ID: "ch_C", PaymentIntent: "pi_C", Amount: 700, Status: "succeeded", AmountRefunded: 700},
			},
			Refunds: []SimRefund{{ID: "re_sim1", PaymentIntent: "pi_A", Amount: 500, Status: "succeeded", Metadata: map[string]string{"refund": "re_1"}}},
			Requests: []SimRequest{
				{Method: "POST", Path: "/v1/payment_intents", IdempotencyKey: "key-a/payment_intent", Status: 200},
				{Method: "POST", Path: "/v1/payment_intents", IdempotencyKey: "key-a/payment_intent", Status: 200, Replayed: true},
				{Method: "GET", Path: "/v1/payment_intents/pi_A", Status: 200},
			},
		},
	}
	// One merchant endpoint of alice's, subscribed to everything, made
	// before her events, which all reached it.
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	s.Endpoints = []Endpoint{{ID: "we_1", UserID: alice, Name: "all-1", EnabledEvents: []string{"*"}, Created: t0}}
	for i := range s.Events {
		e := &s.Events[i]
		e.Created = t0.Add(time.Duration(i+1) * time.Second)
		s.Deliveries = append(s.Deliveries, Delivery{EventID: e.ID, EndpointID: "we_1", Status: "succeeded"})
		s.Arrivals = append(s.Arrivals, Arrival{Endpoint: "all-1", WebhookID: e.ID, EventID: e.ID, EventType: e.Type,
			ValidSig: true, At: e.Created.Add(time.Second), Answered: 200, Acknowledged: true})
	}
	return s, records
}

func TestCheck_aConsistentWorldHasNoViolation(t *testing.T) {
	t.Parallel()
	s, records := world()
	require.Empty(t, Check(s, records))
}

// With a short key TTL a finished key's row may be reaped before the
// snapshot, and its payment's idempotency_key_id set to null: that alone is
// no violation.
func TestCheck_aReapedKeyIsNoViolationWhenKeysExpire(t *testing.T) {
	t.Parallel()
	s, records := world()
	s.KeysExpire = true
	s.Keys = slices.DeleteFunc(s.Keys, func(k Key) bool { return k.Key == "k-a" })
	s.Payments[0].KeyID = ""
	require.Empty(t, Check(s, records))
	s.KeysExpire = false
	require.NotEmpty(t, Check(s, records), "with a day's TTL, the same world is broken")
}

// A delivery that reaches the merchant before it learned the endpoint's
// secret (the registration's answer was lost to a crash and is being
// retried) cannot be verified: the merchant refuses it and it comes again.
// That is no violation; a signature that does not verify with a known
// secret still is (TestCheck_reportsEachBrokenInvariantWithItsKey).
func TestCheck_aDeliveryBeforeTheMerchantKnewItsSecretIsRefusedNotFaulted(t *testing.T) {
	t.Parallel()
	s, records := world()
	early := s.Arrivals[1]
	early.ValidSig, early.SecretUnknown, early.Answered, early.Acknowledged = false, true, 503, false
	early.At = early.At.Add(-time.Second)
	s.Arrivals = append(s.Arrivals, early)
	require.Empty(t, Check(s, records))
}

// Each case breaks the consistent world in one way that a bug in the
// service could, and names the violation the checker must report.
func TestCheck_reportsEachBrokenInvariantWithItsKey(t *testing.T) {
	t.Parallel()
	declined := func(pi string) *SimPaymentIntent {
		s, _ := world()
		p := s.Sim.PaymentIntents[1]
		p.ID = pi
		return &p
	}
	tests := []struct {
		name       string
		breakIt    func(s *Snapshot, r []Record) []Record
		rule, key  string
		additional bool // other rules may fire too
	}{
		{"a refund left pending after Stripe decided it", func(s *Snapshot, r []Record) []Record {
			s.Refunds[0].Status = "pending"
			return r
		}, "refund", "re_1", true},
		{"a refund that failed at Stripe still succeeded here", func(s *Snapshot, r []Record) []Record {
			s.Sim.Refunds[0].Status = "failed"
			return r
		}, "refund", "re_1", true},
		{"a failed refund whose amount was not given back", func(s *Snapshot, r []Record) []Record {
			s.Refunds[0].Status, s.Sim.Refunds[0].Status = "failed", "failed"
			s.Events = append(s.Events, Event{ID: "evt_5", UserID: 1, Type: "refund.failed", ObjectID: "re_1"})
			s.RiverJobs = append(s.RiverJobs, RiverJob{ID: 7, Kind: kindMerchantEvent, State: "completed", Attempt: 1, EventID: "evt_5"})
			return r
		}, "refund", "pay_A", false},
		{"a refund its client was told succeeded, failed later without refund.succeeded", func(s *Snapshot, r []Record) []Record {
			s.Refunds[0].Status, s.Sim.Refunds[0].Status = "failed", "failed"
			s.Payments[0].AmountRefunded = 0
			s.Sim.Charges[0].AmountRefunded = 0
			s.Events[3].Type = "refund.failed"
			return r
		}, "event", "re_1", false},
		{"a hostile body answered 500", func(s *Snapshot, r []Record) []Record {
			r[0].Hostile = []Answer{{Status: 500, Body: []byte(`{"status":500,"code":"internal"}`)}}
			return r
		}, "hostile-400", "k-a", false},
		{"a fresh key's first request answered 409", func(s *Snapshot, r []Record) []Record {
			r[0].FreshGot409 = true
			return r
		}, "fresh-409", "k-a", false},
		{"a create request executed again after its key expired: a second payment, its first key reaped", func(s *Snapshot, r []Record) []Record {
			s.KeysExpire = true
			s.Payments = append(s.Payments, Payment{ID: "pay_A2", UserID: 1, Amount: 2000, Currency: "usd", Status: "succeeded",
				Capture: true, AmountCaptured: 2000, PaymentMethod: "pm_card_visa", StripePaymentIntent: "pi_A2", ChaosKey: "k-a"})
			s.Sim.PaymentIntents = append(s.Sim.PaymentIntents, SimPaymentIntent{ID: "pi_A2", Amount: 2000, AmountReceived: 2000,
				Currency: "usd", Status: "succeeded", Metadata: map[string]string{"payment": "pay_A2"}})
			return r
		}, "payment", "k-a", true},
		{"two PaymentIntents for one payment", func(s *Snapshot, r []Record) []Record {
			s.Sim.PaymentIntents = append(s.Sim.PaymentIntents, SimPaymentIntent{ID: "pi_A2", Amount: 2000, AmountReceived: 2000,
				Currency: "usd", Status: "succeeded", Metadata: map[string]string{"payment": "pay_A"}})
			return r
		}, "stripe-pi", "pay_A", true}, // and charged-twice: nobody gave the money back
		{"a PaymentIntent that belongs to no payment", func(s *Snapshot, r []Record) []Record {
			s.Sim.PaymentIntents = append(s.Sim.PaymentIntents, SimPaymentIntent{ID: "pi_ghost", Amount: 100, Currency: "usd",
				Status: "succeeded", Metadata: map[string]string{"payment": "pay_ghost"}})
			return r
		}, "stripe-pi", "pi_ghost", false},
		{"a failed payment declined twice at Stripe", func(s *Snapshot, r []Record) []Record {
			s.Sim.PaymentIntents = append(s.Sim.PaymentIntents, *declined("pi_B2"))
			return r
		}, "stripe-pi", "pay_B", false},
		{"a canceled payment whose PaymentIntent is still authorised", func(s *Snapshot, r []Record) []Record {
			s.Sim.PaymentIntents[2].Status, s.Sim.PaymentIntents[2].AmountCapturable = "requires_capture", 700
			s.Sim.Charges[2].AmountRefunded = 0 // an authorisation still held is not released
			return r
		}, "stripe-pi", "pay_C", false},
		{"captured amounts disagree", func(s *Snapshot, r []Record) []Record {
			s.Sim.PaymentIntents[0].AmountReceived = 1999
			return r
		}, "stripe-pi", "pay_A", false},
		{"a replay that differs from the first answer", func(s *Snapshot, r []Record) []Record {
			r[0].Replays = append(r[0].Replays, Answer{Status: 201, Body: []byte(`{"id":"pay_other"}`), Replayed: true, KeyEcho: "k-a"})
			return r
		}, "replay-identical", "k-a", false},
		{"a replay not marked as one", func(s *Snapshot, r []Record) []Record {
			r[0].Replays[0].Replayed = false
			return r
		}, "replay-identical", "k-a", true},
		{"a request executed twice", func(s *Snapshot, r []Record) []Record {
			r[1].Finals[1].Replayed = false
			return r
		}, "executed-twice", "k-b", false},
		{"a request that never got a final answer", func(s *Snapshot, r []Record) []Record {
			r[3].Finals, r[3].GaveUp = nil, true
			return r
		}, "final-answer", "k-c-cancel", false},
		{"the stored response is not what the client got", func(s *Snapshot, r []Record) []Record {
			s.Keys[0].ResponseBody = []byte(`{"id":"pay_A","status":"processing"}`)
			return r
		}, "stored-answer", "k-a", false},
		{"a reused key that is not refused", func(s *Snapshot, r []Record) []Record {
			r[0].Reuses[0] = Answer{Status: 201, Body: []byte(`{"id":"pay_A"}`), Replayed: true, KeyEcho: "k-a"}
			return r
		}, "reuse-422", "k-a", false},
		{"an answer that does not echo its key", func(s *Snapshot, r []Record) []Record {
			r[2].Finals[0].KeyEcho = ""
			return r
		}, "key-echo", "k-c", false},
		// The answers below stay consistent with the stored world; the
		// expectation moves instead, as if the service had answered wrong.
		{"a 402 where 201 was due", func(s *Snapshot, r []Record) []Record {
			r[1].Expect.Want = Outcome{Status: 201}
			return r
		}, "expected-answer", "k-b", false},
		{"a decline with another decline code", func(s *Snapshot, r []Record) []Record {
			r[1].Expect.Want.DeclineCode = "insufficient_funds"
			return r
		}, "expected-answer", "k-b", false},
		{"a payment in another status than due", func(s *Snapshot, r []Record) []Record {
			r[0].Expect.Want.ObjectStatus = "requires_capture"
			return r
		}, "expected-answer", "k-a", false},
		{"a refund of another amount than asked", func(s *Snapshot, r []Record) []Record {
			r[4].Expect.Want.Amount = 400
			return r
		}, "expected-answer", "k-a-refund", false},
		{"two winners of a refund race", func(s *Snapshot, r []Record) []Record {
			for i := range r {
				if r[i].Op == OpRefund {
					r[i].Expect.Race = "race-1"
					r[i].Expect.Alt = &Outcome{Status: 400, Code: "refund_not_allowed"}
					twin := r[i]
					twin.Key = "k-a-refund-2"
					r = append(r, twin)
					break
				}
			}
			s.Keys = append(s.Keys, Key{ID: "key-a-refund-2", UserID: 1, Key: "k-a-refund-2", RecoveryPoint: "finished",
				ResponseCode: 201, ResponseBody: r[len(r)-1].Finals[0].Body})
			return r
		}, "race", "k-a-refund,k-a-refund-2", true},
		{"a key left unfinished", func(s *Snapshot, r []Record) []Record {
			s.Keys[2].RecoveryPoint, s.Keys[2].ResponseCode, s.Keys[2].ResponseBody = "payment_created", 0, nil
			return r
		}, "key", "k-c", false},
		{"a key needing attention", func(s *Snapshot, r []Record) []Record {
			s.Keys[4].NeedsAttention = true
			return r
		}, "key", "k-a-refund", false},
		{"a payment left processing", func(s *Snapshot, r []Record) []Record {
			s.Payments[2].Status = "processing"
			return r
		}, "payment", "pay_C", true},
		{"a 201 naming a payment that does not exist", func(s *Snapshot, r []Record) []Record {
			s.Payments[0].ID = "pay_A_renamed"
			return r
		}, "payment", "k-a", true},
		{"refunds that exceed the payment", func(s *Snapshot, r []Record) []Record {
			s.Refunds = append(s.Refunds, Refund{ID: "re_2", PaymentID: "pay_A", Amount: 1600, Status: "succeeded", StripeRefund: "re_sim2"})
			s.Sim.Refunds = append(s.Sim.Refunds, SimRefund{ID: "re_sim2", PaymentIntent: "pi_A", Amount: 1600, Status: "succeeded",
				Metadata: map[string]string{"refund": "re_2"}})
			s.Payments[0].AmountRefunded = 2000
			s.Sim.Charges[0].AmountRefunded = 2100
			return r
		}, "refund", "pay_A", true},
		{"a refund made twice at Stripe", func(s *Snapshot, r []Record) []Record {
			s.Sim.Refunds = append(s.Sim.Refunds, SimRefund{ID: "re_sim1b", PaymentIntent: "pi_A", Amount: 500, Status: "succeeded",
				Metadata: map[string]string{"refund": "re_1"}})
			s.Sim.Charges[0].AmountRefunded = 1000
			return r
		}, "refund", "pay_A", true},
		{"amount_refunded that disagrees with the refunds", func(s *Snapshot, r []Record) []Record {
			s.Payments[0].AmountRefunded = 0
			return r
		}, "refund", "pay_A", false},
		{"two events for one state change", func(s *Snapshot, r []Record) []Record {
			s.Events = append(s.Events, Event{ID: "evt_5", UserID: 1, Type: "payment.succeeded", ObjectID: "pay_A"})
			s.RiverJobs = append(s.RiverJobs, RiverJob{ID: 7, Kind: kindMerchantEvent, State: "completed", Attempt: 1, EventID: "evt_5"})
			return r
		}, "event", "pay_A", false},
		{"a state change without its event", func(s *Snapshot, r []Record) []Record {
			s.Events = slices.DeleteFunc(s.Events, func(e Event) bool { return e.ID == "evt_3" })
			s.RiverJobs = slices.DeleteFunc(s.RiverJobs, func(j RiverJob) bool { return j.EventID == "evt_3" })
			s.Deliveries = slices.DeleteFunc(s.Deliveries, func(d Delivery) bool { return d.EventID == "evt_3" })
			s.Arrivals = slices.DeleteFunc(s.Arrivals, func(a Arrival) bool { return a.EventID == "evt_3" })
			return r
		}, "event", "pay_C", false},
		{"a receipt never sent", func(s *Snapshot, r []Record) []Record {
			s.Receipts[1].Sent = false
			return r
		}, "receipt", "pay_A", false},
		{"a receipt missing", func(s *Snapshot, r []Record) []Record {
			s.Receipts = s.Receipts[:1]
			return r
		}, "receipt", "pay_A", false},
		{"a staged job never drained", func(s *Snapshot, r []Record) []Record {
			s.StagedJobs = append(s.StagedJobs, StagedJob{ID: 42, Kind: kindReceiptEmail})
			return r
		}, "job", "42", false},
		{"an event enqueued twice", func(s *Snapshot, r []Record) []Record {
			s.RiverJobs = append(s.RiverJobs, RiverJob{ID: 8, Kind: kindMerchantEvent, State: "completed", Attempt: 1, EventID: "evt_2"})
			return r
		}, "job", "evt_2", false},
		{"a job that never completed", func(s *Snapshot, r []Record) []Record {
			s.RiverJobs[4].State = "retryable"
			return r
		}, "job", "5", false},
		{"an attempt answered after the API's budget", func(s *Snapshot, r []Record) []Record {
			r[0].Slowest = apiBudget + time.Second
			return r
		}, "api-budget", "k-a", false},
		{"an attempt never answered", func(s *Snapshot, r []Record) []Record {
			r[3].TimedOut = 1
			return r
		}, "api-budget", "k-c-cancel", false},
		{"a receipt the mail server accepted twice", func(s *Snapshot, r []Record) []Record {
			s.Mail.Accepted, s.Mail.Duplicates = 3, map[string]int{"<receipt.payment.pay_A@example.com>": 2}
			return r
		}, "receipt-once", "<receipt.payment.pay_A@example.com>", false},
		{"a receipt marked sent that the mail server never accepted", func(s *Snapshot, r []Record) []Record {
			s.Mail.Accepted, s.Mail.Distinct = 1, 1
			return r
		}, "receipt-once", "-", false},
		{"a cancel refused although the authorisation had not expired", func(s *Snapshot, r []Record) []Record {
			refuseCancelOfC(s, r)
			return r
		}, "expected-answer", "k-c-cancel", false},
		{"an event that never reached a subscribed endpoint", func(s *Snapshot, r []Record) []Record {
			s.Arrivals = s.Arrivals[1:]
			return r
		}, "merchant-webhook", "evt_1", false},
		{"an event that reached its endpoint only past the sender's timeout", func(s *Snapshot, r []Record) []Record {
			s.Arrivals[0].Acknowledged = false
			return r
		}, "merchant-webhook", "evt_1", false},
		{"a delivery with a signature that does not verify", func(s *Snapshot, r []Record) []Record {
			s.Arrivals[1].ValidSig = false
			return r
		}, "merchant-webhook", "we_1", false},
		{"a delivery under another webhook-id", func(s *Snapshot, r []Record) []Record {
			s.Arrivals[1].WebhookID = "evt_other"
			return r
		}, "merchant-webhook", "we_1", false},
		{"an event that reached another user's endpoint", func(s *Snapshot, r []Record) []Record {
			s.Endpoints = append(s.Endpoints, Endpoint{ID: "we_2", UserID: 2, Name: "bob-1", EnabledEvents: []string{"*"}, Created: s.Endpoints[0].Created})
			s.Arrivals = append(s.Arrivals, s.Arrivals[0])
			s.Arrivals[len(s.Arrivals)-1].Endpoint = "bob-1"
			return r
		}, "merchant-webhook", "we_2", false},
		{"an event that reached an endpoint not subscribed to it", func(s *Snapshot, r []Record) []Record {
			s.Endpoints[0].EnabledEvents = []string{"refund.*"}
			s.Deliveries = s.Deliveries[3:]
			s.Arrivals = append(s.Arrivals[:1], s.Arrivals[3:]...)
			return r
		}, "merchant-webhook", "we_1", false},
		{"an event older than the endpoint it reached", func(s *Snapshot, r []Record) []Record {
			s.Endpoints[0].Created = s.Events[0].Created.Add(time.Millisecond)
			return r
		}, "merchant-webhook", "we_1", false},
		{"an event that reached an endpoint after its deletion", func(s *Snapshot, r []Record) []Record {
			s.Endpoints[0].Deleted = s.Arrivals[3].At.Add(-deletionSlack - time.Second)
			return r
		}, "merchant-webhook", "we_1", false},
		{"a delivery left failed", func(s *Snapshot, r []Record) []Record {
			s.Deliveries[2].Status = "failed"
			return r
		}, "merchant-webhook", "evt_3", false},
		{"a mutating Stripe call without an idempotency key", func(s *Snapshot, r []Record) []Record {
			s.Sim.Requests = append(s.Sim.Requests, SimRequest{Method: "POST", Path: "/v1/refunds", Status: 200})
			return r
		}, "stripe-request", "/v1/refunds", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, records := world()
			records = tt.breakIt(s, records)
			violations := Check(s, records)
			require.Contains(t, violations, findViolation(violations, tt.rule, tt.key), "want [%s] %s in %v", tt.rule, tt.key, violations)
			if !tt.additional {
				for _, v := range violations {
					require.Equal(t, tt.rule, v.Rule, "only [%s] violations, got %v", tt.rule, violations)
				}
			}
		})
	}
}

// findViolation returns the violation of rule about key, or a zero one that
// makes require.Contains fail with the list.
func findViolation(vs []Violation, rule, key string) Violation {
	for _, v := range vs {
		if v.Rule == rule && v.Key == key {
			return v
		}
	}
	return Violation{Rule: "missing " + rule, Key: key}
}

// refuseCancelOfC makes the cancel of pay_C come after Stripe canceled it:
// the service answered (and stored) 400 payment_not_capturable.
func refuseCancelOfC(s *Snapshot, r []Record) {
	refused := []byte(`{"status":400,"code":"payment_not_capturable"}`)
	r[3].Finals = []Answer{{Status: 400, Body: refused, KeyEcho: r[3].Key}}
	s.Keys[3].ResponseCode, s.Keys[3].ResponseBody = 400, refused
}

// A capture or cancel that reaches Stripe after the authorisation expired
// is rightly refused, whatever the client expected; and a duplicate receipt
// after a worker was SIGKILLed is the documented at-least-once window.
func TestCheck_whatARunRightlyAllows(t *testing.T) {
	t.Parallel()
	s, records := world()
	refuseCancelOfC(s, records)
	s.Sim.PaymentIntents[2].CancellationReason = "automatic"
	s.Mail.Accepted, s.Mail.Duplicates, s.Mail.WorkersKilled = 3, map[string]int{"<receipt.payment.pay_A@example.com>": 2}, true
	require.Empty(t, Check(s, records))
}

// withDashboardRefund adds to the world a refund of 300 made at Stripe
// directly (no metadata of ours), as the service shows it: a refund of
// origin external, counted in amount_refunded, announced, with a receipt.
func withDashboardRefund(s *Snapshot) {
	s.Sim.Refunds = append(s.Sim.Refunds, SimRefund{ID: "re_dash", PaymentIntent: "pi_A", Amount: 300, Status: "succeeded"})
	s.Sim.Charges[0].AmountRefunded += 300
	s.Refunds = append(s.Refunds, Refund{ID: "re_2", PaymentID: "pay_A", Amount: 300, Status: "succeeded", StripeRefund: "re_dash", Origin: "external"})
	s.Payments[0].AmountRefunded += 300
	s.Events = append(s.Events, Event{ID: "evt_5", UserID: 1, Type: "refund.succeeded", ObjectID: "re_2", Created: s.Events[3].Created.Add(time.Second)})
	s.Deliveries = append(s.Deliveries, Delivery{EventID: "evt_5", EndpointID: "we_1", Status: "succeeded"})
	s.Arrivals = append(s.Arrivals, Arrival{Endpoint: "all-1", WebhookID: "evt_5", EventID: "evt_5", EventType: "refund.succeeded",
		ValidSig: true, At: s.Events[4].Created.Add(time.Second), Answered: 200, Acknowledged: true})
	s.RiverJobs = append(s.RiverJobs,
		RiverJob{ID: 7, Kind: kindMerchantEvent, State: "completed", Attempt: 1, EventID: "evt_5"},
		RiverJob{ID: 8, Kind: kindReceiptEmail, State: "completed", Attempt: 1, Payment: "pay_A", Reason: "refund", Refund: "re_2"})
	s.Receipts = append(s.Receipts, Receipt{PaymentID: "pay_A", Kind: "refund:re_2", Sent: true})
	s.Mail.Accepted, s.Mail.Distinct = 3, 3
}

// The reconciler's promise, checked once its bound has passed: a refund
// made at Stripe directly is one refund of origin external, counted in
// amount_refunded, and every payment's status is its PaymentIntent's, even
// when every webhook was lost. Each case is what a service without the
// reconciler (or with a broken one) leaves behind.
func TestCheck_theServiceConvergesToStripeWithoutWebhooks(t *testing.T) {
	t.Parallel()
	s, records := world()
	withDashboardRefund(s)
	require.Empty(t, Check(s, records), "a dashboard refund the service shows is no violation")

	tests := []struct {
		name      string
		breakIt   func(s *Snapshot)
		rule, key string
	}{
		{"a dashboard refund the service never heard of", func(s *Snapshot) {
			s.Refunds = s.Refunds[:1]
			s.Payments[0].AmountRefunded -= 300
		}, "external-refund", "re_dash"},
		{"a dashboard refund shown twice", func(s *Snapshot) {
			twin := s.Refunds[1]
			twin.ID = "re_3"
			s.Refunds = append(s.Refunds, twin)
		}, "external-refund", "re_dash"},
		{"a dashboard refund shown with another amount", func(s *Snapshot) {
			s.Refunds[1].Amount = 200
		}, "external-refund", "re_2"},
		{"an external refund Stripe never made", func(s *Snapshot) {
			s.Sim.Refunds = s.Sim.Refunds[:1]
			s.Sim.Charges[0].AmountRefunded -= 300
		}, "external-refund", "re_2"},
		{"a dashboard refund shown but not counted in amount_refunded", func(s *Snapshot) {
			s.Payments[0].AmountRefunded -= 300
		}, "refund", "pay_A"},
		{"an authorisation Stripe let lapse, still requires_capture here", func(s *Snapshot) {
			s.Payments[2].Status = "requires_capture"
			s.Events = slices.DeleteFunc(s.Events, func(e Event) bool { return e.ObjectID == "pay_C" })
		}, "stripe-pi", "pay_C"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, records := world()
			withDashboardRefund(s)
			tt.breakIt(s)
			var hit bool
			for _, v := range Check(s, records) {
				if v.Rule == tt.rule && v.Key == tt.key {
					hit = true
				}
			}
			require.True(t, hit, "want a %s violation on %s, got %v", tt.rule, tt.key, Check(s, records))
		})
	}
}

// A hostile body that met the database down is refused 503
// service_unavailable before it is read: rightly so only in a run whose
// database failed (the HA run), never otherwise.
func TestCheck_aHostileBodyMayMeetTheDatabaseDownOnlyWhenItFails(t *testing.T) {
	t.Parallel()
	for _, fails := range []bool{false, true} {
		s, records := world()
		s.DatabaseFails = fails
		records[0].Hostile = []Answer{{Status: 503, Body: []byte(`{"status":503,"code":"service_unavailable"}`)}}
		var rules []string
		for _, v := range Check(s, records) {
			rules = append(rules, v.Rule)
		}
		if fails {
			require.Empty(t, rules)
		} else {
			require.Equal(t, []string{"hostile-400"}, rules)
		}
	}
}
