package chaostest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Violation is a broken invariant and the key or object that shows it.
type Violation struct {
	Rule   string // which invariant, as named in Check's comment
	Key    string // the Idempotency-Key or the object id that shows it
	Detail string
}

func (v Violation) String() string { return fmt.Sprintf("[%s] %s: %s", v.Rule, v.Key, v.Detail) }

// Check verifies the promise, "a customer is charged exactly once, whatever
// happens", on the world at the end of a run: the clients' records, the
// service's tables and Stripe's (the simulator's) objects. It returns every
// violation, grouped by rule, in this order:
//
//	final-answer      every logical request got a final answer
//	fresh-409         no key's very first request was answered 409 (nobody else held it)
//	replay-identical  every later answer to its key is byte-identical and marked replayed
//	executed-twice    at most one of those answers was not a replay
//	reuse-422         the key with another body is 422 idempotency_key_reused
//	hostile-400       an ambiguous or unstorable body is 400 validation_failed, and stores nothing
//	                  (in a run whose database failed, 503 service_unavailable may come first)
//	key-echo          every answer echoes the Idempotency-Key
//	api-budget        every attempt was answered within apiBudget, whatever the mail server or Stripe did
//	stored-answer     the stored response is the answer the client got
//	expected-answer   the answer is the one the request calls for
//	race              of requests racing for one thing, exactly one won
//	key               no key unfinished, none needing attention, none nobody sent
//	payment           answers agree with the payment and refund rows; no payment left processing;
//	                  each create request made exactly one payment
//	stripe-pi         each payment has exactly one PaymentIntent, with its status and amounts; none without a payment
//	refund            every refund reached a final state; refunds agree with Stripe's, never exceed
//	                  the payment, and those that did not fail sum to amount_refunded
//	external-refund   every refund made at Stripe directly (the dashboard's: no metadata of ours) is
//	                  one refund of origin external, with Stripe's amount and status, and no refund
//	                  of ours is external without one
//	duplicate-refund  every second refund Stripe made for one of ours (a late 500 executed after the
//	                  service refunded under a new child key) is one refund of origin duplicate, with
//	                  Stripe's amount and status; no refund of ours is a duplicate without one
//	charged-twice     no customer is charged twice without their money back: every PaymentIntent of a
//	                  payment beyond the recorded one that charged is listed in its duplicate_charges,
//	                  refunded, and refunded in full at Stripe (the count of such customers must be 0)
//	dispute           every dispute at Stripe is its payment's dispute, with Stripe's status; no
//	                  payment shows a dispute Stripe does not have
//	event             one merchant event per state change, none for changes that did not happen
//	receipt           one receipt per capture and per refund, sent
//	receipt-once      the mail server accepted each receipt once, and every receipt marked sent
//	job               staged jobs drained into River, each once, each run to completion
//	merchant-webhook  every event reached every endpoint of its user that subscribed to it when it was
//	                  created (and still exists), at least once, with its id as webhook-id and a valid
//	                  signature; nothing reached another user's endpoint, an unsubscribed one, one made
//	                  after the event, or one after its deletion
//	stripe-request    every mutating call to Stripe carried an idempotency key
func Check(s *Snapshot, records []Record) []Violation {
	c := newChecker(s, records)
	c.checkAnswers()
	c.checkKeys()
	c.checkPayments()
	c.checkPaymentIntents()
	c.checkRefunds()
	c.checkExternalRefunds()
	c.checkDuplicateRefunds()
	c.checkChargedTwice()
	c.checkDisputes()
	c.checkEvents()
	c.checkReceipts()
	c.checkJobs()
	c.checkMerchantWebhooks()
	c.checkStripeRequests()
	return c.violations
}

// checker holds the snapshot and records indexed for the rules.
type checker struct {
	s          *Snapshot
	records    []Record
	violations []Violation

	keys        map[userKey]*Key
	keysByID    map[string]*Key
	recordByKey map[userKey]*Record
	payments    map[string]*Payment
	refunds     map[string]*Refund
	refundsOf   map[string][]*Refund // by payment
	intentsOf   map[string][]*SimPaymentIntent
	charges     map[string]*SimCharge
	simRefunds  map[string]*SimRefund
	simRefundOf map[string][]*SimRefund // by PaymentIntent
	eventsOf    map[string][]*Event     // by the object's id
	// refundAnswered is the status each refund had in its create answer.
	refundAnswered map[string]string
}

type userKey struct {
	user int64
	key  string
}

func newChecker(s *Snapshot, records []Record) *checker {
	c := &checker{
		s: s, records: records,
		keys: map[userKey]*Key{}, keysByID: map[string]*Key{}, recordByKey: map[userKey]*Record{},
		payments: map[string]*Payment{}, refunds: map[string]*Refund{}, refundsOf: map[string][]*Refund{},
		intentsOf: map[string][]*SimPaymentIntent{}, charges: map[string]*SimCharge{},
		simRefunds: map[string]*SimRefund{}, simRefundOf: map[string][]*SimRefund{}, eventsOf: map[string][]*Event{},
	}
	for i := range s.Keys {
		k := &s.Keys[i]
		c.keys[userKey{k.UserID, k.Key}] = k
		c.keysByID[k.ID] = k
	}
	c.refundAnswered = map[string]string{}
	for i := range records {
		r := &records[i]
		c.recordByKey[userKey{r.UserID, r.Key}] = r
		if r.Op == OpRefund && len(r.Finals) > 0 && r.Finals[0].Status == 201 {
			c.refundAnswered[field(r.Finals[0].Body, "id")] = field(r.Finals[0].Body, "status")
		}
	}
	for i := range s.Payments {
		c.payments[s.Payments[i].ID] = &s.Payments[i]
	}
	for i := range s.Refunds {
		re := &s.Refunds[i]
		c.refunds[re.ID] = re
		c.refundsOf[re.PaymentID] = append(c.refundsOf[re.PaymentID], re)
	}
	for i := range s.Sim.PaymentIntents {
		pi := &s.Sim.PaymentIntents[i]
		c.intentsOf[pi.Metadata["payment"]] = append(c.intentsOf[pi.Metadata["payment"]], pi)
	}
	for i := range s.Sim.Charges {
		c.charges[s.Sim.Charges[i].ID] = &s.Sim.Charges[i]
	}
	for i := range s.Sim.Refunds {
		re := &s.Sim.Refunds[i]
		c.simRefunds[re.ID] = re
		c.simRefundOf[re.PaymentIntent] = append(c.simRefundOf[re.PaymentIntent], re)
	}
	for i := range s.Events {
		e := &s.Events[i]
		c.eventsOf[e.ObjectID] = append(c.eventsOf[e.ObjectID], e)
	}
	return c
}

func (c *checker) fail(rule, key, format string, args ...any) {
	c.violations = append(c.violations, Violation{Rule: rule, Key: key, Detail: fmt.Sprintf(format, args...)})
}

// checkAnswers: final-answer, replay-identical, executed-twice, reuse-422,
// key-echo, stored-answer, expected-answer and race.
func (c *checker) checkAnswers() {
	winners := map[string]int{}       // race group -> requests that got Want
	expiredRaces := map[string]bool{} // race groups over an authorisation Stripe canceled on its own
	racers := map[string][]string{}
	duplicateRaces := map[string]bool{} // race groups over a payment a duplicate refund took from
	for i := range c.records {
		r := &c.records[i]
		if len(r.Finals) == 0 {
			c.fail("final-answer", r.Key, "%s %s got no final answer in %d attempts", r.Method, r.Path, r.Attempts)
			continue
		}
		if r.GaveUp {
			c.fail("final-answer", r.Key, "one of its senders ran out of retries (%d attempts in all)", r.Attempts)
		}
		if r.Slowest > apiBudget || r.TimedOut > 0 {
			c.fail("api-budget", r.Key, "an attempt took %v to answer (budget %v); %d got no answer within %v",
				r.Slowest.Round(time.Millisecond), apiBudget, r.TimedOut, attemptTimeout)
		}
		if r.FreshGot409 {
			c.fail("fresh-409", r.Key, "the key's first request, with no other sender, was answered 409 idempotency_key_in_use")
		}
		first := r.Finals[0]
		executed := 0
		later := append(slices.Clone(r.Finals[1:]), r.Replays...)
		for _, a := range append([]Answer{first}, later...) {
			if !a.Replayed {
				executed++
			}
		}
		for _, a := range later {
			if a.Status != first.Status || !bytes.Equal(a.Body, first.Body) {
				c.fail("replay-identical", r.Key, "an answer was %d %s, the first was %d %s", a.Status, clip(a.Body), first.Status, clip(first.Body))
			}
		}
		for _, a := range r.Replays {
			if !a.Replayed {
				c.fail("replay-identical", r.Key, "a replay after the final answer lacks Idempotent-Replayed: true")
			}
		}
		if executed > 1 {
			c.fail("executed-twice", r.Key, "%d answers were not replays: the request was executed %d times", executed, executed)
		}
		for _, a := range append(append(slices.Clone(r.Finals), r.Replays...), r.Reuses...) {
			if a.KeyEcho != r.Key {
				c.fail("key-echo", r.Key, "a %d answer echoed Idempotency-Key %q", a.Status, a.KeyEcho)
				break
			}
		}
		for _, a := range r.Hostile {
			if c.s.DatabaseFails && a.Status == 503 && field(a.Body, "code") == "service_unavailable" {
				continue
			}
			if a.Status != 400 || field(a.Body, "code") != "validation_failed" {
				c.fail("hostile-400", r.Key, "a hostile body got %d %s, want 400 validation_failed", a.Status, clip(a.Body))
			}
		}
		for _, a := range r.Reuses {
			if a.Status != 422 || field(a.Body, "code") != "idempotency_key_reused" {
				c.fail("reuse-422", r.Key, "the key with another body got %d %s, want 422 idempotency_key_reused", a.Status, clip(a.Body))
			}
		}
		if k := c.keys[userKey{r.UserID, r.Key}]; k == nil {
			if !c.s.KeysExpire { // else it may rightly have been reaped
				c.fail("stored-answer", r.Key, "no idempotency_keys row for a key that got %d", first.Status)
			}
		} else if k.RecoveryPoint == "finished" && (k.ResponseCode != first.Status || !bytes.Equal(k.ResponseBody, first.Body)) {
			c.fail("stored-answer", r.Key, "stored %d %s, the client got %d %s", k.ResponseCode, clip(k.ResponseBody), first.Status, clip(first.Body))
		}
		ok, why := matches(r.Expect.Want, first)
		if r.Expect.Race != "" {
			racers[r.Expect.Race] = append(racers[r.Expect.Race], r.Key)
			if ok {
				winners[r.Expect.Race]++
			} else if r.Expect.Alt != nil {
				ok, why = matches(*r.Expect.Alt, first)
			}
			if c.expired(r.Payment) {
				expiredRaces[r.Expect.Race] = true
			}
			if c.hasDuplicateRefund(r.Payment) {
				duplicateRaces[r.Expect.Race] = true
			}
		}
		if !ok && (c.refusedAfterExpiry(r, first) || c.lessLeftAfterDuplicate(r, first)) {
			ok = true
		}
		if !ok {
			c.fail("expected-answer", r.Key, "%s %s: %s", r.Method, r.Path, why)
		}
	}
	for _, race := range slices.Sorted(maps.Keys(racers)) {
		if n := winners[race]; n != 1 && !(n == 0 && (expiredRaces[race] || duplicateRaces[race])) {
			c.fail("race", strings.Join(racers[race], ","), "%d of the racing requests won (race %s), want exactly 1", n, race)
		}
	}
}

// apiBudget is the longest an attempt may take to be answered. The slowest
// legitimate one waits out a Stripe delay or a stalled holder (a few lock
// timeouts); a mail server that hangs must not add anything.
const apiBudget = 15 * time.Second

// expired tells whether payment's authorisation was canceled by Stripe on
// its own, nobody having captured or canceled it in time.
func (c *checker) expired(payment string) bool {
	pis := c.intentsOf[payment]
	return len(pis) == 1 && pis[0].CancellationReason == "automatic"
}

// refusedAfterExpiry tells whether r is a capture or a cancel that Stripe
// refused because the authorisation had expired, which the service answers
// 400 payment_not_capturable: the right answer to a request that came too
// late, whatever the client expected.
func (c *checker) refusedAfterExpiry(r *Record, a Answer) bool {
	return (r.Op == OpCapture || r.Op == OpCancel) && a.Status == 400 &&
		field(a.Body, "code") == "payment_not_capturable" && c.expired(r.Payment)
}

// duplicateChargeKeyPrefix begins the keys the service makes for the
// refund of a duplicate charge (payments.DuplicateChargeKey): no client
// sends them.
const duplicateChargeKeyPrefix = "payments duplicate_charge "

// hasDuplicateRefund tells whether Stripe refunded payment twice for one of
// its refunds (a refund of origin duplicate).
func (c *checker) hasDuplicateRefund(payment string) bool {
	for _, re := range c.refundsOf[payment] {
		if re.Origin == "duplicate" && re.Status == "succeeded" {
			return true
		}
	}
	return false
}

// lessLeftAfterDuplicate tells whether r is a refund answered for less
// than its client expected (refused, or 201 for less) on a payment that a
// duplicate refund took from: the client counts what is left from its own
// answers, and Stripe's second refund of one of them, which the client
// never saw, took some of it.
func (c *checker) lessLeftAfterDuplicate(r *Record, a Answer) bool {
	if r.Op != OpRefund || !c.hasDuplicateRefund(r.Payment) {
		return false
	}
	switch {
	case a.Status == 400 && field(a.Body, "code") == "refund_not_allowed":
		return true
	case a.Status == 201 && r.Expect.Want.Status == 201:
		return num(a.Body, "amount") <= r.Expect.Want.Amount
	}
	return false
}

// matches tells whether a matches o, and if not, why.
func matches(o Outcome, a Answer) (bool, string) {
	got := fmt.Sprintf("got %d %s", a.Status, clip(a.Body))
	if a.Status != o.Status {
		return false, got + ", want " + o.String()
	}
	var body map[string]any
	if err := json.Unmarshal(a.Body, &body); err != nil {
		return false, got + ": not a JSON object"
	}
	str := func(name string) string { s, _ := body[name].(string); return s }
	num := func(name string) int64 { f, _ := body[name].(float64); return int64(f) }
	switch {
	case o.Code != "" && str("code") != o.Code,
		o.DeclineCode != "" && str("decline_code") != o.DeclineCode,
		o.ObjectStatus != "" && !slices.Contains(strings.Split(o.ObjectStatus, "|"), str("status")):
		return false, got + ", want " + o.String()
	case o.Amount != 0 && str("object") == "refund" && num("amount") != o.Amount,
		o.Amount != 0 && str("object") == "payment" && num("amount_captured") != o.Amount:
		return false, got + ", want " + o.String()
	}
	return true, ""
}

func (o Outcome) String() string {
	s := fmt.Sprint(o.Status)
	for _, part := range []struct{ name, v string }{{"code", o.Code}, {"decline_code", o.DeclineCode}, {"status", o.ObjectStatus}} {
		if part.v != "" {
			s += fmt.Sprintf(" %s=%s", part.name, part.v)
		}
	}
	if o.Amount != 0 {
		s += fmt.Sprintf(" amount=%d", o.Amount)
	}
	return s
}

// checkKeys: no key unfinished, none needing attention, none that no client sent.
func (c *checker) checkKeys() {
	for _, k := range c.s.Keys {
		switch {
		case k.RecoveryPoint != "finished":
			c.fail("key", k.Key, "unfinished at %s (flow %s, id %s)", k.RecoveryPoint, k.Flow, k.ID)
		case k.NeedsAttention:
			c.fail("key", k.Key, "marked as needing attention (flow %s, id %s)", k.Flow, k.ID)
		}
		if c.recordByKey[userKey{k.UserID, k.Key}] == nil && !strings.HasPrefix(k.Key, merchantKeyPrefix) &&
			!strings.HasPrefix(k.Key, duplicateChargeKeyPrefix) {
			c.fail("key", k.Key, "no client sent this key (user %d, %s %s)", k.UserID, k.Method, k.Path)
		}
	}
}

// checkPayments: the answers agree with the rows; every payment was made by a
// create request; no payment is left processing.
func (c *checker) checkPayments() {
	for i := range c.records {
		r := &c.records[i]
		if len(r.Finals) == 0 {
			continue
		}
		a := r.Finals[0]
		k := c.keys[userKey{r.UserID, r.Key}]
		switch {
		case r.Op == OpCreate && a.Status == 201:
			c.createdPayment(r, k, field(a.Body, "id"), a.Body)
		case r.Op == OpCreate && a.Status == 402:
			p := c.payments[field(a.Body, "payment")]
			switch {
			case p == nil:
				c.fail("payment", r.Key, "402 names payment %q, which does not exist", field(a.Body, "payment"))
			case k != nil && p.KeyID != k.ID:
				c.fail("payment", r.Key, "402 names payment %s, made by another key (%s)", p.ID, p.KeyID)
			case p.Status != "failed" || p.FailureCode != field(a.Body, "decline_code"):
				c.fail("payment", r.Key, "402 (%s) but payment %s is %s with failure_code %q", field(a.Body, "decline_code"), p.ID, p.Status, p.FailureCode)
			}
		case (r.Op == OpCapture || r.Op == OpCancel) && a.Status == 200:
			want := map[Op]string{OpCapture: "succeeded", OpCancel: "canceled"}[r.Op]
			p := c.payments[r.Payment]
			switch {
			case p == nil || field(a.Body, "id") != r.Payment:
				c.fail("payment", r.Key, "%s answered payment %q for %s", r.Op, field(a.Body, "id"), r.Payment)
			case p.Status != want:
				c.fail("payment", r.Key, "%s answered 200 but payment %s is %s", r.Op, p.ID, p.Status)
			case r.Op == OpCapture && p.AmountCaptured != num(a.Body, "amount_captured"):
				c.fail("payment", r.Key, "capture answered amount_captured %d, payment %s has %d", num(a.Body, "amount_captured"), p.ID, p.AmountCaptured)
			}
		case r.Op == OpRefund && a.Status == 201:
			re := c.refunds[field(a.Body, "id")]
			switch {
			case re == nil:
				c.fail("payment", r.Key, "201 names refund %q, which does not exist", field(a.Body, "id"))
			case re.PaymentID != r.Payment || re.Amount != num(a.Body, "amount") || !refundMovedOn(field(a.Body, "status"), re.Status):
				c.fail("payment", r.Key, "answered refund %s of %s for %d (%s), the row is of %s for %d (%s)", re.ID,
					field(a.Body, "payment"), num(a.Body, "amount"), field(a.Body, "status"), re.PaymentID, re.Amount, re.Status)
			case k != nil && re.KeyID != k.ID:
				c.fail("payment", r.Key, "refund %s was made by another key (%s)", re.ID, re.KeyID)
			}
		}
	}
	made := map[userKey]int{}
	for _, p := range c.s.Payments {
		made[userKey{p.UserID, p.ChaosKey}]++
	}
	for i := range c.records {
		r := &c.records[i]
		if r.Op == OpCreate && len(r.Finals) > 0 && (r.Finals[0].Status == 201 || r.Finals[0].Status == 402) {
			if n := made[userKey{r.UserID, r.Key}]; n != 1 {
				c.fail("payment", r.Key, "the create request made %d payments, want 1", n)
			}
		}
	}
	for _, p := range c.s.Payments {
		if p.Status == "processing" {
			c.fail("payment", p.ID, "left processing")
		}
		k := c.keysByID[p.KeyID]
		if k == nil && p.KeyID == "" && c.s.KeysExpire {
			continue // its key was reaped; the count above still holds it to its request
		}
		if k == nil {
			c.fail("payment", p.ID, "made by no known key (idempotency_key_id %q)", p.KeyID)
			continue
		}
		if r := c.recordByKey[userKey{k.UserID, k.Key}]; r != nil && r.Op != OpCreate {
			c.fail("payment", p.ID, "made by key %s, a %s request", k.Key, r.Op)
		}
	}
}

// createdPayment checks a 201 to a create request against its payment row.
func (c *checker) createdPayment(r *Record, k *Key, id string, body []byte) {
	p := c.payments[id]
	if p == nil {
		c.fail("payment", r.Key, "201 names payment %q, which does not exist", id)
		return
	}
	if k != nil && p.KeyID != k.ID {
		c.fail("payment", r.Key, "201 names payment %s, made by another key (%s)", p.ID, p.KeyID)
	}
	if p.Amount != r.Amount || p.Currency != r.Currency || p.PaymentMethod != r.PaymentMethod || p.Capture != r.Capture {
		c.fail("payment", r.Key, "payment %s is %d %s %s capture=%v, the request was %d %s %s capture=%v", p.ID,
			p.Amount, p.Currency, p.PaymentMethod, p.Capture, r.Amount, r.Currency, r.PaymentMethod, r.Capture)
	}
	if pi := field(body, "stripe_payment_intent"); pi != p.StripePaymentIntent {
		c.fail("payment", r.Key, "201 carries PaymentIntent %q, payment %s has %q", pi, p.ID, p.StripePaymentIntent)
	}
	allowed := []string{"succeeded"}
	if !r.Capture {
		allowed = []string{"requires_capture", "succeeded", "canceled"}
	}
	if !slices.Contains(allowed, p.Status) {
		c.fail("payment", r.Key, "created (capture=%v) but payment %s is %s", r.Capture, p.ID, p.Status)
	}
}

// checkPaymentIntents: each payment that reached Stripe has exactly one
// PaymentIntent there (found by the "payment" metadata), whose status and
// amounts agree; no PaymentIntent belongs to no payment.
func (c *checker) checkPaymentIntents() {
	for _, p := range c.s.Payments {
		pis := c.ownIntents(p)
		switch p.Status {
		case "succeeded", "requires_capture", "canceled":
			if len(pis) != 1 {
				c.fail("stripe-pi", p.ID, "%s payment has %d PaymentIntents at Stripe: %s", p.Status, len(pis), intentList(pis))
				continue
			}
			pi := pis[0]
			switch {
			case pi.ID != p.StripePaymentIntent:
				c.fail("stripe-pi", p.ID, "records PaymentIntent %q, Stripe's for it is %s", p.StripePaymentIntent, pi.ID)
			case pi.Status != p.Status:
				c.fail("stripe-pi", p.ID, "payment is %s, its PaymentIntent %s is %s", p.Status, pi.ID, pi.Status)
			case pi.Amount != p.Amount || pi.Currency != p.Currency:
				c.fail("stripe-pi", p.ID, "payment is %d %s, its PaymentIntent %s is %d %s", p.Amount, p.Currency, pi.ID, pi.Amount, pi.Currency)
			case p.Status == "succeeded" && pi.AmountReceived != p.AmountCaptured:
				c.fail("stripe-pi", p.ID, "amount_captured %d, PaymentIntent %s received %d", p.AmountCaptured, pi.ID, pi.AmountReceived)
			case p.Status == "succeeded" && c.charges[pi.LatestCharge] == nil:
				c.fail("stripe-pi", p.ID, "PaymentIntent %s has no charge", pi.ID)
			case p.Status == "succeeded" && c.charges[pi.LatestCharge].AmountCaptured != p.AmountCaptured:
				c.fail("stripe-pi", p.ID, "amount_captured %d, charge %s captured %d", p.AmountCaptured, pi.LatestCharge, c.charges[pi.LatestCharge].AmountCaptured)
			case p.Status == "requires_capture" && pi.AmountCapturable != p.Amount:
				c.fail("stripe-pi", p.ID, "authorised %d, PaymentIntent %s can capture %d", p.Amount, pi.ID, pi.AmountCapturable)
			case p.Status != "succeeded" && p.AmountCaptured != 0:
				c.fail("stripe-pi", p.ID, "%s payment has amount_captured %d", p.Status, p.AmountCaptured)
			}
		case "failed":
			if len(pis) != 1 && !(len(pis) > 1 && c.lateDeclines(p, pis)) {
				c.fail("stripe-pi", p.ID, "failed payment has %d PaymentIntents at Stripe, want its one declined: %s", len(pis), intentList(pis))
			}
			for _, pi := range pis {
				switch {
				case pi.Status == "succeeded" || pi.Status == "requires_capture" || pi.AmountReceived != 0:
					c.fail("stripe-pi", p.ID, "failed payment, but its PaymentIntent %s is %s (received %d)", pi.ID, pi.Status, pi.AmountReceived)
				case pi.LastPaymentError == nil || pi.LastPaymentError.DeclineCode != p.FailureCode:
					c.fail("stripe-pi", p.ID, "failed with %q, its PaymentIntent %s was not declined so", p.FailureCode, pi.ID)
				case p.StripePaymentIntent != "" && p.StripePaymentIntent != pi.ID:
					c.fail("stripe-pi", p.ID, "records PaymentIntent %q, Stripe's for it is %s", p.StripePaymentIntent, pi.ID)
				}
			}
		case "processing":
			for _, pi := range pis {
				if pi.Status == "succeeded" || pi.Status == "requires_capture" {
					c.fail("stripe-pi", p.ID, "payment left processing, but its PaymentIntent %s is %s", pi.ID, pi.Status)
				}
			}
		}
		if extra := len(c.intentsOf[p.ID]) - len(pis); extra > 0 && !c.lateFor(p) {
			c.fail("stripe-pi", p.ID, "%d PaymentIntents at Stripe beside the recorded %s, and no late 500 made them: %s",
				extra, p.StripePaymentIntent, intentList(c.intentsOf[p.ID]))
		}
	}
	for _, pi := range c.s.Sim.PaymentIntents {
		if c.payments[pi.Metadata["payment"]] == nil {
			c.fail("stripe-pi", pi.ID, "PaymentIntent (%s, %d %s) belongs to no payment (metadata %v)", pi.Status, pi.Amount, pi.Currency, pi.Metadata)
		}
	}
}

// ownIntents are the PaymentIntents of p at Stripe that are p's own: the
// recorded one, when p recorded one, else all (the checks then require
// exactly one). The others are second PaymentIntents Stripe made for p,
// checkChargedTwice's.
func (c *checker) ownIntents(p Payment) []*SimPaymentIntent {
	pis := c.intentsOf[p.ID]
	if p.StripePaymentIntent == "" {
		return pis
	}
	var own []*SimPaymentIntent
	for _, pi := range pis {
		if pi.ID == p.StripePaymentIntent {
			own = append(own, pi)
		}
	}
	if len(own) == 0 {
		return pis // the recorded one is not Stripe's: the checks say so
	}
	return own
}

// lateDeclines tells whether several PaymentIntents of a failed payment
// that recorded none are a late 500's doing: all were declined (none
// charged), and a late 500 explains the extra ones (lateFor).
func (c *checker) lateDeclines(p Payment, pis []*SimPaymentIntent) bool {
	for _, pi := range pis {
		if pi.LastPaymentError == nil || pi.AmountReceived != 0 || pi.Status == "succeeded" || pi.Status == "requires_capture" {
			return false
		}
	}
	return c.lateFor(p)
}

// lateFor tells whether Stripe answered one of p's create calls with
// late_500 (its child keys carry the key row's id, as its PaymentIntents'
// metadata does): Stripe then executed that call after the service, past
// its grace, had moved on to its next child key, and made a second
// PaymentIntent for p. Nothing else may.
func (c *checker) lateFor(p Payment) bool {
	keys := map[string]bool{}
	if p.KeyID != "" {
		keys[p.KeyID] = true
	}
	for _, pi := range c.intentsOf[p.ID] {
		if k := pi.Metadata["idempotency_key_id"]; k != "" {
			keys[k] = true
		}
	}
	for _, r := range c.s.Sim.Requests {
		if r.Fault != "late_500" || r.Method != "POST" || r.Path != "/v1/payment_intents" {
			continue
		}
		for k := range keys {
			if strings.Contains(r.IdempotencyKey, k) {
				return true
			}
		}
	}
	return false
}

// checkRefunds: each payment's succeeded refunds are exactly Stripe's refunds of
// its PaymentIntent (count, sum and each one by its metadata), never more
// than was captured, and sum to the payment's amount_refunded.
func (c *checker) checkRefunds() {
	for _, p := range c.s.Payments {
		var local, stripe int64
		var nLocal, nStripe int
		for _, re := range c.refundsOf[p.ID] {
			if re.Status == "succeeded" {
				local += re.Amount
				nLocal++
			}
		}
		if p.StripePaymentIntent != "" {
			for _, re := range c.simRefundOf[p.StripePaymentIntent] {
				if re.Status == "succeeded" {
					stripe += re.Amount
					nStripe++
				}
			}
		}
		if nLocal != nStripe || local != stripe {
			c.fail("refund", p.ID, "%d succeeded refunds for %d here, %d for %d at Stripe", nLocal, local, nStripe, stripe)
		}
		if local > p.AmountCaptured || stripe > p.AmountCaptured {
			c.fail("refund", p.ID, "refunds of %d here and %d at Stripe exceed the %d captured", local, stripe, p.AmountCaptured)
		}
		if p.AmountRefunded != local {
			c.fail("refund", p.ID, "amount_refunded is %d, its succeeded refunds sum to %d (Stripe's: %d)", p.AmountRefunded, local, stripe)
		}
		for _, pi := range c.ownIntents(p) {
			if ch := c.charges[pi.LatestCharge]; ch != nil && ch.AmountRefunded-ch.released(pi) != stripe {
				c.fail("refund", p.ID, "charge %s says %d refunded (%d of it released uncaptured), its refunds sum to %d",
					ch.ID, ch.AmountRefunded, ch.released(pi), stripe)
			}
		}
	}
	mine := map[string]string{} // Stripe refund -> our refund, by the "refund" metadata
	for _, sr := range c.s.Sim.Refunds {
		if sr.Metadata["refund"] == "" {
			continue // made at Stripe directly (checkExternalRefunds), or a duplicate charge's (checkChargedTwice)
		}
		if c.duplicateOf(sr.ID) != nil {
			continue // Stripe's second for one of ours: checkDuplicateRefunds
		}
		mine[sr.ID] = sr.Metadata["refund"]
		re := c.refunds[sr.Metadata["refund"]]
		switch {
		case re == nil:
			c.fail("refund", sr.ID, "Stripe refund of %d on %s belongs to no refund (metadata %v)", sr.Amount, sr.PaymentIntent, sr.Metadata)
		case re.StripeRefund != sr.ID:
			c.fail("refund", re.ID, "refund has Stripe refund %q, but Stripe made %s for it", re.StripeRefund, sr.ID)
		case re.Status != sr.Status:
			c.fail("refund", re.ID, "refund is %s, Stripe's %s is %s", re.Status, sr.ID, sr.Status)
		}
	}
	for _, re := range c.s.Refunds {
		switch {
		case re.Status == "pending":
			c.fail("refund", re.ID, "left pending: Stripe decided it within seconds, and neither its webhook nor the reconciler told the service")
		case re.Origin == "external": // checkExternalRefunds
		case re.Origin == "duplicate": // checkDuplicateRefunds
		case re.Status == "succeeded", re.Status == "failed":
			sr := c.simRefunds[re.StripeRefund]
			p := c.payments[re.PaymentID]
			switch {
			case sr == nil:
				c.fail("refund", re.ID, "succeeded refund, but Stripe has no refund %q", re.StripeRefund)
			case mine[sr.ID] != re.ID:
				c.fail("refund", re.ID, "Stripe refund %s was made for %q", sr.ID, mine[sr.ID])
			case sr.Amount != re.Amount:
				c.fail("refund", re.ID, "refund of %d, Stripe refund %s is of %d", re.Amount, sr.ID, sr.Amount)
			case p == nil || sr.PaymentIntent != p.StripePaymentIntent:
				c.fail("refund", re.ID, "Stripe refund %s is on %s, not on the payment's PaymentIntent", sr.ID, sr.PaymentIntent)
			}
		}
	}
}

// checkExternalRefunds: a refund made at Stripe directly (no "refund"
// metadata: the workload's dashboard refunds) reaches the service by
// webhook or, with every webhook lost, by the reconciler; either way it is
// one refund of origin external with Stripe's amount and status, on the
// payment of its PaymentIntent (its amount counts in amount_refunded, which
// checkRefunds holds to the payment's succeeded refunds).
func (c *checker) checkExternalRefunds() {
	byStripe := map[string][]*Refund{}
	for i := range c.s.Refunds {
		re := &c.s.Refunds[i]
		if re.Origin == "external" {
			byStripe[re.StripeRefund] = append(byStripe[re.StripeRefund], re)
		}
	}
	for _, sr := range c.s.Sim.Refunds {
		if sr.Metadata["refund"] != "" || sr.Metadata["duplicate_charge"] != "" {
			continue // ours, or the service's refund of a duplicate charge
		}
		found := byStripe[sr.ID]
		delete(byStripe, sr.ID)
		if len(found) != 1 {
			c.fail("external-refund", sr.ID, "refund of %d made at Stripe on %s is %d refunds of origin external here, want 1",
				sr.Amount, sr.PaymentIntent, len(found))
			continue
		}
		re, p := found[0], c.payments[found[0].PaymentID]
		switch {
		case re.Amount != sr.Amount:
			c.fail("external-refund", re.ID, "refund of %d, Stripe's %s is of %d", re.Amount, sr.ID, sr.Amount)
		case re.Status != sr.Status:
			c.fail("external-refund", re.ID, "refund is %s, Stripe's %s is %s", re.Status, sr.ID, sr.Status)
		case p == nil || p.StripePaymentIntent != sr.PaymentIntent:
			c.fail("external-refund", re.ID, "Stripe refund %s is on %s, not on the payment's PaymentIntent", sr.ID, sr.PaymentIntent)
		}
	}
	for _, stripeRefund := range slices.Sorted(maps.Keys(byStripe)) {
		for _, re := range byStripe[stripeRefund] {
			c.fail("external-refund", re.ID, "external refund, but Stripe has no refund %q made outside the service", stripeRefund)
		}
	}
}

// duplicateOf is the refund of origin duplicate that records Stripe's
// refund sr, or nil.
func (c *checker) duplicateOf(sr string) *Refund {
	for i := range c.s.Refunds {
		if re := &c.s.Refunds[i]; re.Origin == "duplicate" && re.StripeRefund == sr {
			return re
		}
	}
	return nil
}

// checkDuplicateRefunds: a Stripe refund whose metadata names a refund of
// ours that records another of Stripe's refunds is Stripe's second for it
// (a late 500 executed after the service refunded under a new child key):
// one refund of origin duplicate with its amount and status, on the same
// payment (checkRefunds holds the payment's succeeded refunds, these
// included, to Stripe's and to amount_refunded). A refund of origin
// duplicate without such a Stripe refund is made up.
func (c *checker) checkDuplicateRefunds() {
	dups := map[string][]*Refund{}
	for i := range c.s.Refunds {
		if re := &c.s.Refunds[i]; re.Origin == "duplicate" {
			dups[re.StripeRefund] = append(dups[re.StripeRefund], re)
		}
	}
	for _, sr := range c.s.Sim.Refunds {
		ours := c.refunds[sr.Metadata["refund"]]
		if ours == nil || ours.StripeRefund == sr.ID {
			continue
		}
		found := dups[sr.ID]
		delete(dups, sr.ID)
		if len(found) != 1 {
			c.fail("duplicate-refund", sr.ID, "Stripe's second refund (%d, %s) for %s (which records %q) is %d refunds of origin duplicate here, want 1",
				sr.Amount, sr.Status, ours.ID, ours.StripeRefund, len(found))
			continue
		}
		re := found[0]
		switch {
		case re.Amount != sr.Amount || re.Status != sr.Status:
			c.fail("duplicate-refund", re.ID, "refund of %d (%s), Stripe's %s is of %d (%s)", re.Amount, re.Status, sr.ID, sr.Amount, sr.Status)
		case re.PaymentID != ours.PaymentID:
			c.fail("duplicate-refund", re.ID, "on payment %s, the refund it duplicates (%s) is on %s", re.PaymentID, ours.ID, ours.PaymentID)
		}
	}
	for _, stripeRefund := range slices.Sorted(maps.Keys(dups)) {
		for _, re := range dups[stripeRefund] {
			c.fail("duplicate-refund", re.ID, "refund of origin duplicate, but Stripe has no second refund %q for a refund of ours", stripeRefund)
		}
	}
}

// checkChargedTwice: a PaymentIntent Stripe made for a payment beyond the
// recorded one that charged the customer is listed in the payment's
// duplicate_charges, refunded, and Stripe's refunds of it sum to what it
// took. Each one that is not is a customer charged twice without their
// money back; their number must be 0.
func (c *checker) checkChargedTwice() {
	for _, p := range c.s.Payments {
		listed := map[string]DuplicateCharge{}
		for _, d := range p.DuplicateCharges {
			listed[d.StripePaymentIntent] = d
		}
		for _, pi := range c.intentsOf[p.ID] {
			if pi.ID == p.StripePaymentIntent || p.StripePaymentIntent == "" || pi.Status != "succeeded" || pi.AmountReceived == 0 {
				delete(listed, pi.ID)
				continue
			}
			var back int64
			for _, sr := range c.simRefundOf[pi.ID] {
				if sr.Status == "succeeded" {
					back += sr.Amount
				}
			}
			d, ok := listed[pi.ID]
			delete(listed, pi.ID)
			switch {
			case back == 0 && c.stripeFailedEveryRefundOf(pi.ID) && ok && d.Status == "refund_failed":
				// Stripe failed the refund (pm_card_refundFail fails every
				// refund, after answering it succeeded): the money cannot go
				// back through Stripe, and the record says so, for a person.
			case back != pi.AmountReceived:
				c.fail("charged-twice", p.ID, "customer charged twice: PaymentIntent %s took %d beside the recorded %s, and Stripe gave back %d (listed: %v)",
					pi.ID, pi.AmountReceived, p.StripePaymentIntent, back, ok)
			case !ok || d.Status != "refunded" || d.Amount != pi.AmountReceived:
				c.fail("charged-twice", p.ID, "PaymentIntent %s (%d, refunded at Stripe) is listed as %+v", pi.ID, pi.AmountReceived, d)
			case len(c.simRefundOf[pi.ID]) != 1:
				c.fail("charged-twice", p.ID, "PaymentIntent %s was refunded %d times, want once", pi.ID, len(c.simRefundOf[pi.ID]))
			}
		}
		for _, pi := range slices.Sorted(maps.Keys(listed)) {
			c.fail("charged-twice", p.ID, "lists duplicate charge %s, which is no second PaymentIntent of it that charged", pi)
		}
	}
}

// checkDisputes: each dispute at Stripe is its payment's, with Stripe's
// status and amount; no payment shows a dispute Stripe does not have.
func (c *checker) checkDisputes() {
	byIntent := map[string]*Payment{}
	for i := range c.s.Payments {
		if p := &c.s.Payments[i]; p.StripePaymentIntent != "" {
			byIntent[p.StripePaymentIntent] = p
		}
	}
	atStripe := map[string]bool{}
	for _, dp := range c.s.Sim.Disputes {
		atStripe[dp.ID] = true
		p := byIntent[dp.PaymentIntent]
		switch {
		case p == nil:
			c.fail("dispute", dp.ID, "dispute of %s, which is no payment's PaymentIntent", dp.PaymentIntent)
		case p.Dispute == nil:
			c.fail("dispute", p.ID, "Stripe's dispute %s (%s) is not recorded", dp.ID, dp.Status)
		case p.Dispute.ID != dp.ID || p.Dispute.Status != dp.Status || p.Dispute.Amount != dp.Amount:
			c.fail("dispute", p.ID, "records dispute %+v, Stripe's is %s %s of %d", *p.Dispute, dp.ID, dp.Status, dp.Amount)
		}
	}
	for _, p := range c.s.Payments {
		if p.Dispute != nil && !atStripe[p.Dispute.ID] {
			c.fail("dispute", p.ID, "records dispute %s, which Stripe does not have", p.Dispute.ID)
		}
	}
}

// checkEvents: each state change has exactly one merchant event, and nothing
// else has one.
func (c *checker) checkEvents() {
	seen := map[string]bool{}
	for _, p := range c.s.Payments {
		seen[p.ID] = true
		var want []string
		switch {
		case p.Status == "succeeded" && p.Capture:
			want = []string{"payment.succeeded"}
		case p.Status == "succeeded":
			want = []string{"payment.captured"}
		case p.Status == "failed":
			want = []string{"payment.failed"}
		case p.Status == "canceled":
			want = []string{"payment.canceled"}
		}
		if p.Dispute != nil {
			want = append(want, "payment.disputed")
			if slices.Contains([]string{"won", "lost", "warning_closed"}, p.Dispute.Status) {
				want = append(want, "payment.dispute_closed")
			}
		}
		for _, d := range p.DuplicateCharges {
			// Announced once refunded; a refund Stripe answered succeeded
			// and failed later (pm_card_refundFail) was announced first.
			if d.Status == "refunded" || (d.Status == "refund_failed" && c.stripeFailedEveryRefundOf(d.StripePaymentIntent) &&
				c.payments[p.ID] != nil && c.payments[p.ID].PaymentMethod == "pm_card_refundFail") {
				want = append(want, "payment.duplicate_refunded")
			}
		}
		slices.Sort(want)
		c.wantEvents(p.ID, p.UserID, want)
	}
	for _, re := range c.s.Refunds {
		seen[re.ID] = true
		var want []string
		switch {
		case re.Status == "succeeded":
			want = []string{"refund.succeeded"}
		case re.Status == "failed" && c.toldSucceeded(re):
			want = []string{"refund.failed", "refund.succeeded"}
		case re.Status == "failed":
			want = []string{"refund.failed"}
		}
		p := c.payments[re.PaymentID]
		var user int64
		if p != nil {
			user = p.UserID
		}
		c.wantEvents(re.ID, user, want)
	}
	for _, e := range c.s.Events {
		if !seen[e.ObjectID] {
			c.fail("event", e.ID, "%s event about %q, which is neither a payment nor a refund", e.Type, e.ObjectID)
		}
	}
}

func (c *checker) wantEvents(object string, user int64, want []string) {
	var got []string
	for _, e := range c.eventsOf[object] {
		got = append(got, e.Type)
		if e.UserID != user {
			c.fail("event", e.ID, "%s event about %s went to user %d, the owner is %d", e.Type, object, e.UserID, user)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		c.fail("event", object, "merchant events %v, want %v", orNone(got), orNone(want))
	}
}

// refundMovedOn tells whether a refund answered with status answered may
// have become now: Stripe decides some refunds later, and a refund only
// moves forward (pending, then succeeded or failed; succeeded, then failed).
func refundMovedOn(answered, now string) bool {
	return answered == now || answered == "pending" || (answered == "succeeded" && now == "failed")
}

// toldSucceeded tells whether the service told anyone that a refund, failed
// now, had succeeded: Stripe first says so of every refund of
// pm_card_refundFail, but the service may hear of the failure first (its
// flow's record was lost, and the webhook moved the refund from pending
// straight to failed). It was told if its client was answered succeeded,
// and then it must have published refund.succeeded (and sent the receipt);
// if the events show it, it was told too, and the receipt must follow.
func (c *checker) toldSucceeded(re Refund) bool {
	if c.refundAnswered[re.ID] == "succeeded" {
		return true
	}
	for _, e := range c.eventsOf[re.ID] {
		if e.Type == "refund.succeeded" {
			return true
		}
	}
	return false
}

// checkReceipts: one sent receipt per payment that captured money and per
// refund that succeeded (even if it failed later), and no other.
func (c *checker) checkReceipts() {
	want := map[Receipt]bool{}
	for _, p := range c.s.Payments {
		if p.Status == "succeeded" && p.AmountCaptured > 0 {
			want[Receipt{PaymentID: p.ID, Kind: "payment"}] = true
		}
	}
	for _, re := range c.s.Refunds {
		if re.Status == "succeeded" || (re.Status == "failed" && c.toldSucceeded(re)) {
			want[Receipt{PaymentID: re.PaymentID, Kind: "refund:" + re.ID}] = true
		}
	}
	for _, got := range c.s.Receipts {
		if !got.Sent {
			c.fail("receipt", got.PaymentID, "receipt %s never sent", got.Kind)
		}
		got.Sent = false
		if !want[got] {
			c.fail("receipt", got.PaymentID, "receipt %s for no captured payment or succeeded refund", got.Kind)
		}
		delete(want, got)
	}
	for _, missing := range sortedReceipts(want) {
		c.fail("receipt", missing.PaymentID, "no receipt %s", missing.Kind)
	}
	sent := 0
	for _, got := range c.s.Receipts {
		if got.Sent {
			sent++
		}
	}
	if c.s.Mail.Distinct < sent {
		c.fail("receipt-once", "-", "%d receipts are marked sent, the mail server accepted %d", sent, c.s.Mail.Distinct)
	}
	if !c.s.Mail.WorkersKilled {
		for _, id := range slices.Sorted(maps.Keys(c.s.Mail.Duplicates)) {
			c.fail("receipt-once", id, "the mail server accepted this receipt %d times", c.s.Mail.Duplicates[id])
		}
	}
}

// deletionSlack is how long after an endpoint's deletion an attempt that
// read it just before may still arrive.
const deletionSlack = 2 * time.Second

// checkMerchantWebhooks: API.md section 7, from what the merchants'
// receiver got and the service's rows.
func (c *checker) checkMerchantWebhooks() {
	byName, byID := map[string]*Endpoint{}, map[string]*Endpoint{}
	for i := range c.s.Endpoints {
		ep := &c.s.Endpoints[i]
		byName[ep.Name], byID[ep.ID] = ep, ep
	}
	events := map[string]*Event{}
	for i := range c.s.Events {
		events[c.s.Events[i].ID] = &c.s.Events[i]
	}
	type pair struct{ endpoint, event string }
	acknowledged := map[pair]bool{}
	for _, a := range c.s.Arrivals {
		ep, e := byName[a.Endpoint], events[a.EventID]
		switch {
		case ep == nil:
			c.fail("merchant-webhook", a.Endpoint, "event %s reached an endpoint nobody registered", a.EventID)
		case !a.ValidSig && !a.SecretUnknown:
			c.fail("merchant-webhook", ep.ID, "event %s arrived with a signature that does not verify", a.EventID)
		case a.WebhookID != a.EventID:
			c.fail("merchant-webhook", ep.ID, "webhook-id %q on a delivery of event %q", a.WebhookID, a.EventID)
		case e == nil:
			c.fail("merchant-webhook", ep.ID, "event %q arrived, which the service never wrote", a.EventID)
		case e.UserID != ep.UserID:
			c.fail("merchant-webhook", ep.ID, "event %s of user %d reached an endpoint of user %d", e.ID, e.UserID, ep.UserID)
		case !subscribes(ep.EnabledEvents, e.Type):
			c.fail("merchant-webhook", ep.ID, "event %s (%s) reached an endpoint that subscribes to %v", e.ID, e.Type, ep.EnabledEvents)
		case e.Created.Before(ep.Created) && !c.s.Redelivered[e.ID]:
			c.fail("merchant-webhook", ep.ID, "event %s, created %v, reached an endpoint created %v", e.ID, e.Created, ep.Created)
		case !ep.Deleted.IsZero() && a.At.After(ep.Deleted.Add(deletionSlack)):
			c.fail("merchant-webhook", ep.ID, "event %s arrived %v after the endpoint was deleted", e.ID, a.At.Sub(ep.Deleted).Round(time.Millisecond))
		}
		if ep != nil && a.Acknowledged {
			acknowledged[pair{ep.ID, a.EventID}] = true
		}
	}
	for _, e := range c.s.Events {
		for _, ep := range c.s.Endpoints {
			if ep.UserID != e.UserID || !ep.Deleted.IsZero() || e.Created.Before(ep.Created) || !subscribes(ep.EnabledEvents, e.Type) {
				continue
			}
			if !acknowledged[pair{ep.ID, e.ID}] {
				c.fail("merchant-webhook", e.ID, "%s never acknowledged by endpoint %s (%s), which subscribed to it when it was created", e.Type, ep.ID, ep.Name)
			}
		}
	}
	c.violations = append(c.violations, c.s.RedeliveryProblems...)
	for _, d := range c.s.Deliveries {
		if ep := byID[d.EndpointID]; ep != nil && ep.Deleted.IsZero() && d.Status != "succeeded" {
			c.fail("merchant-webhook", d.EventID, "its delivery to endpoint %s is %s", d.EndpointID, d.Status)
		}
	}
}

// subscribes tells whether enabled_events takes eventType: "*", the type, or
// its prefix ("refund.*").
func subscribes(enabled []string, eventType string) bool {
	for _, p := range enabled {
		if p == "*" || p == eventType || (strings.HasSuffix(p, ".*") && strings.HasPrefix(eventType, strings.TrimSuffix(p, "*"))) {
			return true
		}
	}
	return false
}

// checkJobs: the staged jobs were all drained, each once, and the River jobs
// ran to completion.
func (c *checker) checkJobs() {
	for _, j := range c.s.StagedJobs {
		c.fail("job", fmt.Sprint(j.ID), "staged %s job never moved into River", j.Kind)
	}
	events := map[string]bool{}
	for _, e := range c.s.Events {
		events[e.ID] = true
	}
	perEvent := map[string]int{}
	perReceipt := map[string]int{}
	for _, j := range c.s.RiverJobs {
		if j.State != "completed" {
			c.fail("job", fmt.Sprint(j.ID), "%s job is %s after %d attempts (last fetched at %s by %s)",
				j.Kind, j.State, j.Attempt, orDash(j.AttemptedAt), orDash(j.AttemptedBy))
		}
		switch j.Kind {
		case kindMerchantEvent:
			perEvent[j.EventID]++
			if j.State == "completed" && !events[j.EventID] {
				c.fail("job", fmt.Sprint(j.ID), "completed, but its event %s is not in the feed", j.EventID)
			}
		case kindReceiptEmail:
			perReceipt[j.Payment+" "+j.Reason+" "+j.Refund]++
		}
	}
	for _, id := range slices.Sorted(maps.Keys(perEvent)) {
		if perEvent[id] > 1 {
			c.fail("job", id, "event enqueued %d times", perEvent[id])
		}
	}
	for _, id := range slices.Sorted(maps.Keys(perReceipt)) {
		if perReceipt[id] > 1 {
			c.fail("job", id, "receipt enqueued %d times", perReceipt[id])
		}
	}
	// An event usually has no River job: the drain writes it itself
	// (stagedjobs.Enqueuer.writeInline); only a batch it could not
	// write goes to River as event jobs. The event rule checks that every
	// change has its one event.
}

// checkStripeRequests: every mutating call to Stripe carried an idempotency key,
// without which Stripe cannot deduplicate a retry.
func (c *checker) checkStripeRequests() {
	for _, r := range c.s.Sim.Requests {
		if r.Method == "POST" && r.IdempotencyKey == "" {
			c.fail("stripe-request", r.Path, "POST without an Idempotency-Key (status %d)", r.Status)
		}
	}
}

// field is a string field of a JSON object; "" when absent.
func field(body []byte, name string) string {
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	s, _ := m[name].(string)
	return s
}

// num is a number field of a JSON object; 0 when absent.
func num(body []byte, name string) int64 {
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	f, _ := m[name].(float64)
	return int64(f)
}

// clip shortens a body for a message.
func clip(b []byte) string {
	const max = 300
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}

func intentList(pis []*SimPaymentIntent) string {
	var parts []string
	for _, pi := range pis {
		parts = append(parts, pi.ID+" ("+pi.Status+")")
	}
	return strings.Join(orNone(parts), ", ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func orNone(s []string) []string {
	if len(s) == 0 {
		return []string{"none"}
	}
	return s
}

func sortedReceipts(m map[Receipt]bool) []Receipt {
	out := make([]Receipt, 0, len(m))
	for r := range m {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Receipt) int {
		return cmp.Or(cmp.Compare(a.PaymentID, b.PaymentID), cmp.Compare(a.Kind, b.Kind))
	})
	return out
}

// stripeFailedEveryRefundOf tells whether Stripe holds refunds of the
// PaymentIntent pi and failed every one.
func (c *checker) stripeFailedEveryRefundOf(pi string) bool {
	refunds := c.simRefundOf[pi]
	for _, sr := range refunds {
		if sr.Status != "failed" {
			return false
		}
	}
	return len(refunds) > 0
}
