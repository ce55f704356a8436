package chaostest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// user is a merchant the clients act for.
type user struct {
	id     int64
	apiKey string
}

// The cards: four that pay (two whose refunds Stripe decides later: one
// pending, then succeeded; one succeeded, then failed), four that are
// declined, with their decline codes (a card that needs 3-D Secure cannot be
// completed server to server).
var (
	goodCards    = []string{"pm_card_visa", "pm_card_mastercard", cardPendingRefund, cardRefundFail}
	declineCards = map[string]string{
		"pm_card_chargeDeclined":                  "generic_decline",
		"pm_card_chargeDeclinedInsufficientFunds": "insufficient_funds",
		"pm_card_chargeDeclinedLostCard":          "lost_card",
		"pm_card_authenticationRequired":          "authentication_required",
	}
	declineCardNames = slices.Sorted(maps.Keys(declineCards))
)

// The cards whose refunds Stripe decides about two seconds later.
const (
	cardPendingRefund = "pm_card_pendingRefund" // answered pending, then succeeded
	cardRefundFail    = "pm_card_refundFail"    // answered succeeded, then failed
)

// client is one customer-facing program: it runs chains of logical
// requests (a payment, then what its merchant does with it), one request at
// a time, each with a fresh key.
type client struct {
	id    int
	tag   string // makes keys unique across runs on one database
	rng   *rand.Rand
	d     *driver
	users []user
	think time.Duration // mean pause between chains
	// keyTTL is the service's key TTL when the run made it short (0: a day).
	keyTTL time.Duration
	// simURL is the simulator's, for refunds made as in Stripe's dashboard.
	simURL string
	seq    int
	// done are this client's finished requests, the latest few hundred,
	// for replays and reuses.
	done []*Record
	// stop, when closed, ends the run as stopAt does (the HA run ends its
	// load once its faults are measured).
	stop <-chan struct{}
}

const keepDone = 256

// run starts chains until stopAt, then finishes the one under way.
func (c *client) run(ctx context.Context, stopAt time.Time) {
	for time.Now().Before(stopAt) && ctx.Err() == nil && !closed(c.stop) {
		c.chain(ctx)
		c.d.stats.Add("chains", 1)
		if c.think > 0 {
			time.Sleep(min(time.Duration(c.rng.ExpFloat64()*float64(c.think)), 10*c.think))
		}
	}
}

// closed tells whether ch is closed (a nil channel never is).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// chain is one payment's life: create it, then maybe capture or cancel it,
// refund it, race two requests over it; and now and then replay or reuse an
// earlier key.
func (c *client) chain(ctx context.Context) {
	u := c.users[c.rng.IntN(len(c.users))]
	amount := int64(100 + c.rng.IntN(99_900))
	currency := []string{"usd", "eur"}[c.rng.IntN(2)]
	capture := c.rng.Float64() < 0.6
	card := goodCards[c.rng.IntN(len(goodCards))]
	declined := c.rng.Float64() < 0.2
	if declined {
		card = declineCardNames[c.rng.IntN(len(declineCardNames))]
	}

	key := c.newKey()
	body := map[string]any{"amount": amount, "currency": currency, "payment_method": card, "capture": capture,
		"metadata": map[string]string{"chaos_key": key}}
	want := Outcome{Status: 201, ObjectStatus: "succeeded", Amount: amount}
	switch {
	case declined:
		want = Outcome{Status: 402, Code: "card_declined", DeclineCode: declineCards[card]}
	case !capture:
		want = Outcome{Status: 201, ObjectStatus: "requires_capture"}
	}
	create := c.record(u, key, OpCreate, "/v1/payments", body, Expect{Want: want})
	create.Amount, create.Currency, create.PaymentMethod, create.Capture = amount, currency, card, capture
	if c.rng.Float64() < 0.1 {
		c.hostile(ctx, u, create)
	}
	a, ok := c.send(ctx, u, create)
	switch {
	case !ok:
		return
	case a.Status == 402:
		c.afterDecline(ctx, u, field(a.Body, "payment"))
	case a.Status == 201 && capture:
		c.refunds(ctx, u, field(a.Body, "id"), field(a.Body, "stripe_payment_intent"), card, amount)
	case a.Status == 201:
		c.authorised(ctx, u, field(a.Body, "id"), field(a.Body, "stripe_payment_intent"), card, amount)
	}
	c.replayOrReuse(ctx)
}

// afterDecline sometimes tries what a declined payment does not allow; the
// refusals are stored like any answer.
func (c *client) afterDecline(ctx context.Context, u user, pay string) {
	switch r := c.rng.Float64(); {
	case pay == "":
	case r < 0.15:
		c.send(ctx, u, c.refundRecord(u, pay, 0, Expect{Want: Outcome{Status: 400, Code: "refund_not_allowed"}}))
	case r < 0.25:
		c.send(ctx, u, c.actionRecord(u, pay, OpCapture, 0, Expect{Want: Outcome{Status: 400, Code: "payment_not_capturable"}}))
	}
}

// authorised finishes a payment made with capture=false: capture it (all or
// part), cancel it, race a capture against a cancel, or leave it for Stripe
// to cancel when the authorisation expires (Config.AuthorisationLifetime).
// A capture or cancel that reaches Stripe after the expiry is rightly
// refused: the checker allows for it when Stripe canceled the authorisation
// on its own.
func (c *client) authorised(ctx context.Context, u user, pay, intent, card string, amount int64) {
	notCapturable := &Outcome{Status: 400, Code: "payment_not_capturable"}
	switch r := c.rng.Float64(); {
	case r < 0.1:
		c.d.stats.Add("authorisations left to expire", 1)
	case r < 0.45:
		if c.capture(ctx, u, pay, 0, amount) {
			c.refunds(ctx, u, pay, intent, card, amount)
		}
	case r < 0.6:
		part := 1 + c.rng.Int64N(amount)
		if c.capture(ctx, u, pay, part, part) {
			c.refunds(ctx, u, pay, intent, card, part)
		}
	case r < 0.85:
		a, ok := c.send(ctx, u, c.actionRecord(u, pay, OpCancel, 0, Expect{Want: Outcome{Status: 200, ObjectStatus: "canceled"}}))
		if ok && a.Status == 200 && c.rng.Float64() < 0.2 {
			c.send(ctx, u, c.actionRecord(u, pay, OpCapture, 0, Expect{Want: *notCapturable}))
		}
	default:
		race := "race-" + c.newKey()
		capture := c.actionRecord(u, pay, OpCapture, 0, Expect{Want: Outcome{Status: 200, ObjectStatus: "succeeded", Amount: amount}, Alt: notCapturable, Race: race})
		cancel := c.actionRecord(u, pay, OpCancel, 0, Expect{Want: Outcome{Status: 200, ObjectStatus: "canceled"}, Alt: notCapturable, Race: race})
		c.d.stats.Add("races: capture vs cancel", 1)
		answers := c.sendAll(ctx, u, capture, cancel)
		if answers[0].Status == 200 {
			c.refunds(ctx, u, pay, intent, card, amount)
		}
	}
}

// capture captures amount (0: all) and expects captured as amount_captured.
func (c *client) capture(ctx context.Context, u user, pay string, amount, captured int64) bool {
	a, ok := c.send(ctx, u, c.actionRecord(u, pay, OpCapture, amount, Expect{Want: Outcome{Status: 200, ObjectStatus: "succeeded", Amount: captured}}))
	return ok && a.Status == 200
}

// refunds refunds a captured payment in one of several ways; the client
// knows what is left, so it knows every answer to expect. A card whose
// refund Stripe decides later gets one refund, whose answer is pending or
// succeeded: what is left after it changes later, out of the client's view.
// Some payments the client does not refund through the API are refunded at
// Stripe directly, as in Stripe's dashboard (dashboardRefund).
func (c *client) refunds(ctx context.Context, u user, pay, intent, card string, captured int64) {
	left := captured
	refused := Outcome{Status: 400, Code: "refund_not_allowed"}
	if card == cardPendingRefund || card == cardRefundFail {
		if c.rng.Float64() < 0.7 {
			amount := 1 + c.rng.Int64N(captured)
			// What Stripe decides later may come before the answer does.
			status := map[string]string{cardPendingRefund: "pending|succeeded", cardRefundFail: "succeeded|failed"}[card]
			c.d.stats.Add("refunds Stripe decides later", 1)
			c.send(ctx, u, c.refundRecord(u, pay, amount, Expect{Want: Outcome{Status: 201, ObjectStatus: status, Amount: amount}}))
		}
		return
	}
	refund := func(amount int64) {
		want := Outcome{Status: 201, ObjectStatus: "succeeded", Amount: cmp.Or(amount, left)}
		if amount > left || left == 0 {
			want = refused
		}
		a, ok := c.send(ctx, u, c.refundRecord(u, pay, amount, Expect{Want: want}))
		if ok && a.Status == 201 {
			left -= num(a.Body, "amount")
		}
	}
	switch r := c.rng.Float64(); {
	case r < 0.2:
	case r < 0.35:
		c.dashboardRefund(ctx, intent, 1+c.rng.Int64N(captured))
	case r < 0.55:
		refund(0) // all that is left
	case r < 0.85:
		for range 1 + c.rng.IntN(3) {
			if left > 0 {
				refund(1 + c.rng.Int64N(left))
			}
		}
		switch r := c.rng.Float64(); {
		case r < 0.3:
			refund(0)
		case r < 0.4:
			refund(left + 1) // more than is left
		}
	case left >= 2:
		// Two refunds race for the last of the payment: each wants more
		// than half of it, so exactly one can have it.
		race := "race-" + c.newKey()
		a := left/2 + 1 + c.rng.Int64N(left-left/2)
		b := left/2 + 1 + c.rng.Int64N(left-left/2)
		c.d.stats.Add("races: refund vs refund", 1)
		c.sendAll(ctx, u,
			c.refundRecord(u, pay, a, Expect{Want: Outcome{Status: 201, ObjectStatus: "succeeded", Amount: a}, Alt: &refused, Race: race}),
			c.refundRecord(u, pay, b, Expect{Want: Outcome{Status: 201, ObjectStatus: "succeeded", Amount: b}, Alt: &refused, Race: race}))
	}
}

// hostileBodies make r's body ambiguous (two parsers could read different
// requests in it) or unstorable (PostgreSQL refuses NUL and invalid UTF-8
// in text).
var hostileBodies = []func(body []byte) []byte{
	func(b []byte) []byte { return append([]byte(`{"AMOUNT":99999999,`), b[1:]...) },
	func(b []byte) []byte { return append([]byte(`{"amount":50,`), b[1:]...) },
	func(b []byte) []byte { return append([]byte(`{"description":"a\u0000b",`), b[1:]...) },
	func(b []byte) []byte { return append([]byte("{\"description\":\"caf\xe9\","), b[1:]...) },
}

// hostile sends, with r's key and before r, one of r's body made hostile,
// and records the answer. It is not retried like a request: an answer
// is final whatever it is, and only a lost connection is tried again.
func (c *client) hostile(ctx context.Context, u user, r *Record) {
	bad := *r
	bad.Body = hostileBodies[c.rng.IntN(len(hostileBodies))](r.Body)
	c.d.stats.Add("hostile bodies", 1)
	for range 5 {
		in := c.d.instances[c.rng.IntN(len(c.d.instances))]
		status, body, header, err := c.d.attempt(ctx, in.URL(), &bad, u.apiKey)
		if err != nil {
			continue
		}
		a := Answer{Status: status, Body: body, KeyEcho: header.Get("Idempotency-Key"), At: time.Now()}
		c.d.ledger.Update(r, func(r *Record) { r.Hostile = append(r.Hostile, a) })
		return
	}
}

// replayOrReuse now and then sends an earlier finished request again (its
// answer must be the same bytes), or its key with another body (422). With
// a short key TTL only a request answered moments ago is chosen: an older
// one's key may rightly be new again.
func (c *client) replayOrReuse(ctx context.Context) {
	if len(c.done) == 0 {
		return
	}
	r := c.done[c.rng.IntN(len(c.done))]
	if c.keyTTL > 0 {
		r = c.done[len(c.done)-1]
		var answered time.Time
		c.d.ledger.Update(r, func(r *Record) { answered = r.Finals[0].At })
		if time.Since(answered) > c.keyTTL/4 {
			return
		}
	}
	switch x := c.rng.Float64(); {
	case x < 0.15:
		c.replay(ctx, r)
	case x < 0.2 && (r.Op == OpCreate || r.Op == OpRefund):
		c.reuse(ctx, r)
	}
}

// replay sends a finished request again and records the answer.
func (c *client) replay(ctx context.Context, r *Record) {
	a, ok := c.d.send(ctx, c.rng, r, c.apiKey(r.UserID))
	if ok {
		c.d.ledger.Update(r, func(r *Record) { r.Replays = append(r.Replays, a) })
		c.d.stats.Add("replays", 1)
	}
}

// reuse sends a finished request's key with another body.
func (c *client) reuse(ctx context.Context, r *Record) {
	var body map[string]any
	if err := json.Unmarshal(r.Body, &body); err != nil {
		return
	}
	switch r.Op {
	case OpCreate:
		body["amount"] = r.Amount%99_999_999 + 1
	case OpRefund:
		body["reason"] = "duplicate"
	}
	other := *r
	other.Body = mustJSON(body)
	a, ok := c.d.send(ctx, c.rng, &other, c.apiKey(r.UserID))
	if ok {
		c.d.ledger.Update(r, func(r *Record) { r.Reuses = append(r.Reuses, a) })
		c.d.stats.Add("reuses (same key, other body)", 1)
	}
}

// comeBackShare is the share of lone requests that, answered 503 with a
// short key TTL, come back only after the TTL. Each costs its client the
// TTL's wait, so it is small: at a half, the clients spent more than half
// their time waiting and sent a fifth of the requests.
const comeBackShare = 0.05

// send sends r, sometimes "double-clicked": twice at once with the same
// key, first to one instance and to the other; both senders retry until
// final and both answers are recorded. With a short key TTL, a lone sender
// answered 503 sometimes (comeBackShare) comes back only after the TTL, and then replays
// its answer at once: the key must not have expired under it (rule 8).
func (c *client) send(ctx context.Context, u user, r *Record) (Answer, bool) {
	c.register(r)
	senders, firstTo := 1, -1
	if c.rng.Float64() < 0.1 {
		senders, firstTo = 2, c.rng.IntN(2)
		c.d.stats.Add("double clicks", 1)
	}
	opts := sendOptions{first: -1, fresh: senders == 1}
	if senders == 1 && c.keyTTL > 0 && c.rng.Float64() < comeBackShare {
		// Past the TTL since the claim, but before the completer's finish
		// (a grace after the claim, at the earliest) is a TTL old.
		opts.comeBackAfter = c.keyTTL + completerGrace/4
	}
	var wg sync.WaitGroup
	for i, rng := range c.rngs(senders) {
		if firstTo >= 0 {
			opts.first = firstTo + i
		}
		wg.Go(func() {
			a, ok := c.d.sendWith(ctx, rng, opts, r, u.apiKey)
			c.recordAnswer(r, a, ok)
		})
	}
	wg.Wait()
	var first Answer
	ok, late := false, false
	c.d.ledger.Update(r, func(r *Record) {
		if len(r.Finals) > 0 {
			first, ok = r.Finals[0], true
		}
		late = r.CameBackLate
	})
	if ok {
		c.remember(r)
		if late {
			c.replay(ctx, r)
		}
	}
	return first, ok
}

// sendAll sends requests at once (a race) and returns their answers in order.
func (c *client) sendAll(ctx context.Context, u user, rs ...*Record) []Answer {
	answers := make([]Answer, len(rs))
	oks := make([]bool, len(rs))
	var wg sync.WaitGroup
	rngs := c.rngs(len(rs))
	for i, r := range rs {
		c.register(r)
		rng := rngs[i]
		wg.Go(func() {
			answers[i], oks[i] = c.d.sendWith(ctx, rng, sendOptions{first: -1, fresh: true}, r, u.apiKey)
			c.recordAnswer(r, answers[i], oks[i])
		})
	}
	wg.Wait()
	for i, r := range rs {
		if oks[i] {
			c.remember(r)
		}
	}
	return answers
}

// register enters a new logical request in the ledger.
func (c *client) register(r *Record) {
	c.d.ledger.Add(r)
	c.d.stats.Add("logical requests: "+string(r.Op), 1)
}

// recordAnswer records one sender's final answer to r, or that it gave up.
func (c *client) recordAnswer(r *Record, a Answer, ok bool) {
	c.d.ledger.Update(r, func(r *Record) {
		if ok {
			r.Finals = append(r.Finals, a)
		} else {
			r.GaveUp = true
		}
	})
}

// remember keeps r among the finished requests the client may replay, the
// keepDone newest.
func (c *client) remember(r *Record) {
	c.done = append(c.done, r)
	if len(c.done) > keepDone {
		c.done = c.done[1:]
	}
}

func (c *client) record(u user, key string, op Op, path string, body any, expect Expect) *Record {
	return &Record{Key: key, UserID: u.id, Op: op, Method: "POST", Path: path, Body: mustJSON(body), Expect: expect}
}

// actionRecord is a capture (of amount; 0: all) or a cancel of pay.
func (c *client) actionRecord(u user, pay string, op Op, amount int64, expect Expect) *Record {
	body := map[string]any{}
	if amount > 0 {
		body["amount"] = amount
	}
	r := c.record(u, c.newKey(), op, fmt.Sprintf("/v1/payments/%s/%s", pay, op), body, expect)
	r.Payment = pay
	return r
}

// refundRecord refunds amount (0: what is left) of pay.
func (c *client) refundRecord(u user, pay string, amount int64, expect Expect) *Record {
	body := map[string]any{"payment": pay}
	if amount > 0 {
		body["amount"] = amount
	}
	if c.rng.IntN(2) == 0 {
		body["reason"] = "requested_by_customer"
	}
	r := c.record(u, c.newKey(), OpRefund, "/v1/refunds", body, expect)
	r.Payment = pay
	return r
}

// rngs derives n generators from the client's, one per concurrent sender
// (a rand.Rand is not safe for concurrent use).
func (c *client) rngs(n int) []*rand.Rand {
	out := make([]*rand.Rand, n)
	for i := range out {
		out[i] = rand.New(rand.NewPCG(c.rng.Uint64(), c.rng.Uint64()))
	}
	return out
}

func (c *client) newKey() string {
	c.seq++
	return fmt.Sprintf("chaos-%s-c%02d-%06d", c.tag, c.id, c.seq)
}

func (c *client) apiKey(userID int64) string {
	for _, u := range c.users {
		if u.id == userID {
			return u.apiKey
		}
	}
	return ""
}

// mustJSON encodes a request body; maps encode with sorted keys, so the
// same body is the same bytes on every attempt.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("chaos: encoding a request body: %v", err))
	}
	return b
}

// dashboardRefund refunds amount of the PaymentIntent at the simulator
// directly, as Stripe's dashboard would: with no metadata of the service's,
// so that the service learns of it only from Stripe (refund.created, or its
// reconciler), and must show it as a refund of origin external. The
// simulator's faults may hit it like any call: whatever Stripe did is what
// the checker compares the service with.
func (c *client) dashboardRefund(ctx context.Context, intent string, amount int64) {
	if intent == "" || c.simURL == "" {
		return
	}
	form := url.Values{"payment_intent": {intent}, "amount": {strconv.FormatInt(amount, 10)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.simURL+"/v1/refunds", strings.NewReader(form.Encode()))
	if err != nil {
		return
	}
	req.Header.Set("Authorization", "Bearer sk_test_dashboard")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Idempotency-Key", "dashboard-"+c.newKey()) // the dashboard's own, as every mutating call carries one
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode == http.StatusOK {
		c.d.stats.Add("refunds made in the dashboard", 1)
	}
}
