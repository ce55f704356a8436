package stripeclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/stripesim"
)

// conformanceRow is one thing the service (or Stripe, on its own) does to
// the simulator. want is the status of each answer the row gets, in the
// order they come back; every one of them must be an answer Stripe's own
// document allows.
type conformanceRow struct {
	name string
	want []int
	run  func(e *simEnv)
}

// conformanceRows are the calls the service makes, each way Stripe may
// answer them, and Stripe's common failures. A route the simulator gains
// gets its row here (TestSimulatorAnswersAsStripeDocuments fails, naming
// the route, until it has one).
var conformanceRows = []conformanceRow{
	{"list payment intents", []int{200, 402, 200, 200}, func(e *simEnv) {
		e.pay("pm_card_visa", false)
		e.pay("pm_card_chargeDeclined", false)
		e.send("GET", "/v1/payment_intents?limit=3", "", "")
		e.send("GET", "/v1/payment_intents?limit=1&created[gte]=0", "", "")
	}},
	{"list payment intents by metadata, as the service reconciles", []int{200, 200}, func(e *simEnv) {
		e.pay("pm_card_visa", false)
		_, _ = e.client.ListPaymentIntentsByMetadata(e.ctx, time.Unix(0, 0), time.Now().Add(time.Hour), "key_row", "kr_conformance")
	}},
	{"create a customer", []int{200}, func(e *simEnv) {
		e.send("POST", "/v1/customers", e.key(), "email=jenny%40example.com&metadata[order]=42")
	}},
	{"retrieve a customer", []int{200, 200}, func(e *simEnv) {
		cus := e.send("POST", "/v1/customers", e.key(), "name=Jenny")
		e.send("GET", "/v1/customers/"+cus.id(), "", "")
	}},
	{"retrieve a missing customer", []int{404}, func(e *simEnv) {
		e.send("GET", "/v1/customers/cus_missing", "", "")
	}},

	// Payments, as the service creates them (confirmed at once,
	// error_on_requires_action=true).
	{"pay with pm_card_visa", []int{200}, func(e *simEnv) { e.pay("pm_card_visa", false) }},
	{"pay with pm_card_mastercard", []int{200}, func(e *simEnv) { e.pay("pm_card_mastercard", false) }},
	{"authorise for manual capture", []int{200}, func(e *simEnv) { e.pay("pm_card_visa", true) }},
	{"decline generic_decline", []int{402}, func(e *simEnv) { e.pay("pm_card_chargeDeclined", false) }},
	{"decline insufficient_funds", []int{402}, func(e *simEnv) { e.pay("pm_card_chargeDeclinedInsufficientFunds", false) }},
	{"decline lost_card", []int{402}, func(e *simEnv) { e.pay("pm_card_chargeDeclinedLostCard", false) }},
	{"3-D Secure with error_on_requires_action", []int{402}, func(e *simEnv) {
		e.pay("pm_card_authenticationRequired", false)
	}},
	{"unknown payment method", []int{400}, func(e *simEnv) { e.pay("pm_card_nonexistent", false) }},

	// Payment intents as Stripe's other clients create them.
	{"3-D Secure, requires_action", []int{200}, func(e *simEnv) {
		e.send("POST", "/v1/payment_intents", e.key(), "amount=2000&currency=usd&payment_method_types[0]=card"+
			"&payment_method=pm_card_authenticationRequired&confirm=true")
	}},
	{"create without confirming", []int{200}, func(e *simEnv) {
		e.send("POST", "/v1/payment_intents", e.key(), "amount=2000&currency=usd&payment_method_types[0]=card")
	}},
	{"create with a payment method, unconfirmed", []int{200}, func(e *simEnv) {
		e.send("POST", "/v1/payment_intents", e.key(), "amount=2000&currency=usd&payment_method=pm_card_visa")
	}},

	// Retrieval.
	{"retrieve a payment intent", []int{200, 200}, func(e *simEnv) { e.get(e.pay("pm_card_visa", false)) }},
	{"retrieve a declined payment intent", []int{402, 200}, func(e *simEnv) { e.get(e.pay("pm_card_chargeDeclined", false)) }},
	{"retrieve after 3-D Secure failed", []int{402, 200}, func(e *simEnv) {
		e.get(e.pay("pm_card_authenticationRequired", false))
	}},
	{"retrieve a payment intent in requires_action", []int{200, 200}, func(e *simEnv) {
		pi := e.send("POST", "/v1/payment_intents", e.key(), "amount=2000&currency=usd"+
			"&payment_method=pm_card_authenticationRequired&confirm=true")
		e.get(pi.id())
	}},
	{"retrieve a missing payment intent", []int{404}, func(e *simEnv) { e.get("pi_missing") }},
	{"authorisation expires after 7 days", []int{200, 200}, func(e *simEnv) {
		id := e.pay("pm_card_visa", true)
		e.sim.Advance(8 * 24 * time.Hour)
		e.get(id)
	}},

	// Capture and cancel.
	{"capture all", []int{200, 200}, func(e *simEnv) {
		_, _ = e.client.CapturePaymentIntent(e.ctx, e.key(), e.pay("pm_card_visa", true), 0)
	}},
	{"capture part", []int{200, 200}, func(e *simEnv) {
		_, _ = e.client.CapturePaymentIntent(e.ctx, e.key(), e.pay("pm_card_visa", true), 1500)
	}},
	{"capture more than authorised", []int{200, 400}, func(e *simEnv) {
		_, _ = e.client.CapturePaymentIntent(e.ctx, e.key(), e.pay("pm_card_visa", true), 5000)
	}},
	{"capture a payment that succeeded", []int{200, 400}, func(e *simEnv) {
		_, _ = e.client.CapturePaymentIntent(e.ctx, e.key(), e.pay("pm_card_visa", false), 0)
	}},
	{"capture a missing payment intent", []int{404}, func(e *simEnv) {
		_, _ = e.client.CapturePaymentIntent(e.ctx, e.key(), "pi_missing", 0)
	}},
	{"cancel an authorisation", []int{200, 200}, func(e *simEnv) {
		_, _ = e.client.CancelPaymentIntent(e.ctx, e.key(), e.pay("pm_card_visa", true))
	}},
	{"cancel a declined payment intent", []int{402, 200}, func(e *simEnv) {
		_, _ = e.client.CancelPaymentIntent(e.ctx, e.key(), e.pay("pm_card_chargeDeclined", false))
	}},
	{"cancel a payment that succeeded", []int{200, 400}, func(e *simEnv) {
		_, _ = e.client.CancelPaymentIntent(e.ctx, e.key(), e.pay("pm_card_visa", false))
	}},

	// Search (the service no longer calls it; the simulator still serves it).
	{"search by metadata", []int{200, 200}, func(e *simEnv) {
		e.pay("pm_card_visa", false)
		e.send("GET", "/v1/payment_intents/search?query=metadata%5B%27key_row%27%5D%3A%27kr_conformance%27", "", "")
	}},
	{"search finding nothing", []int{200}, func(e *simEnv) {
		e.send("GET", "/v1/payment_intents/search?query=metadata%5B%27key_row%27%5D%3A%27nobody%27", "", "")
	}},

	// Refunds.
	{"refund all", []int{200, 200}, func(e *simEnv) { e.refund(e.pay("pm_card_visa", false), 0) }},
	{"refund part, then the rest", []int{200, 200, 200}, func(e *simEnv) {
		pi := e.pay("pm_card_visa", false)
		e.refund(pi, 500)
		e.refund(pi, 0)
	}},
	{"refund more than is left", []int{200, 400}, func(e *simEnv) { e.refund(e.pay("pm_card_visa", false), 5000) }},
	{"refund a refunded payment", []int{200, 200, 400}, func(e *simEnv) {
		pi := e.pay("pm_card_visa", false)
		e.refund(pi, 0)
		e.refund(pi, 0)
	}},
	{"refund an authorisation", []int{200, 400}, func(e *simEnv) { e.refund(e.pay("pm_card_visa", true), 0) }},
	{"refund a missing payment intent", []int{400}, func(e *simEnv) { e.refund("pi_missing", 0) }},
	{"refund after a partial capture", []int{200, 200, 200}, func(e *simEnv) {
		pi := e.pay("pm_card_visa", true)
		_, _ = e.client.CapturePaymentIntent(e.ctx, e.key(), pi, 1500)
		e.refund(pi, 0)
	}},
	{"retrieve a refund", []int{200, 200, 200}, func(e *simEnv) {
		_, _ = e.client.GetRefund(e.ctx, e.refund(e.pay("pm_card_visa", false), 0))
	}},
	{"retrieve a missing refund", []int{404}, func(e *simEnv) { _, _ = e.client.GetRefund(e.ctx, "re_missing") }},
	{"refund that pends, then succeeds", []int{200, 200, 200, 200}, func(e *simEnv) {
		re := e.refund(e.pay("pm_card_pendingRefund", false), 0)
		_, _ = e.client.GetRefund(e.ctx, re) // pending
		e.sim.Advance(time.Minute)
		_, _ = e.client.GetRefund(e.ctx, re) // succeeded
	}},
	{"refund that fails later", []int{200, 200, 200}, func(e *simEnv) {
		re := e.refund(e.pay("pm_card_refundFail", false), 0)
		e.sim.Advance(time.Minute)
		_, _ = e.client.GetRefund(e.ctx, re) // failed, with a failure_reason
	}},
	{"list a payment intent's refunds", []int{200, 200, 200, 200}, func(e *simEnv) {
		pi := e.pay("pm_card_visa", false)
		e.refund(pi, 500)
		e.refund(pi, 500)
		_, _ = e.client.ListRefunds(e.ctx, pi)
	}},
	{"list refunds of nothing", []int{200}, func(e *simEnv) { _, _ = e.client.ListRefunds(e.ctx, "pi_missing") }},
	{"list events, as the reconciler reads Stripe's event log", []int{200, 200, 200, 200}, func(e *simEnv) {
		e.pay("pm_card_visa", false)
		e.send("GET", "/v1/events?limit=2&type=payment_intent.*", "", "")
		e.send("GET", "/v1/events?limit=1&types[0]=charge.succeeded&types[1]=payment_intent.succeeded&created[gte]=0", "", "")
		page, err := e.client.ListEvents(e.ctx, stripeclient.EventsQuery{Since: time.Unix(1, 0), Types: []string{"payment_intent.succeeded"}})
		if err != nil || len(page.Events) != 1 || page.HasMore {
			e.t.Errorf("ListEvents: %d events, has_more %v, %v", len(page.Events), page.HasMore, err)
		}
	}},
	{"list events after a missing one", []int{400}, func(e *simEnv) {
		e.send("GET", "/v1/events?starting_after=evt_missing", "", "")
	}},

	// Disputes, as pm_card_createDispute makes them, and what they change.
	{"a dispute opens, is retrieved, refuses a refund and is lost", []int{200, 200, 400, 200}, func(e *simEnv) {
		pi := e.pay("pm_card_createDispute", false)
		e.sim.Advance(time.Minute)
		dp := disputeOf(e, pi)
		e.send("GET", "/v1/disputes/"+dp, "", "")
		e.refund(pi, 0) // 400 charge_disputed
		require.NoError(e.t, e.sim.CloseDispute(dp, "lost"))
		_, _ = e.client.GetPaymentIntent(e.ctx, pi)
	}},
	{"a dispute is won", []int{200, 200, 200}, func(e *simEnv) {
		pi := e.pay("pm_card_createDispute", false)
		e.sim.Advance(time.Minute)
		dp := disputeOf(e, pi)
		require.NoError(e.t, e.sim.CloseDispute(dp, "won"))
		e.send("GET", "/v1/disputes/"+dp, "", "")
		e.refund(pi, 500)
	}},
	{"retrieve a missing dispute", []int{404}, func(e *simEnv) { e.send("GET", "/v1/disputes/dp_missing", "", "") }},

	// Processing, then succeeded (the processing fault).
	{"a payment that processes, then succeeds", []int{200, 200}, func(e *simEnv) {
		require.NoError(e.t, e.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/payment_intents", Method: "POST",
			Kind: stripesim.FaultProcessing, DelayMS: 1000}))
		pi := e.pay("pm_card_visa", false)
		e.sim.Advance(time.Minute)
		e.get(pi)
	}},
	// A late 500 on a refund: the 500 now, the refund later.
	{"a refund's late 500, then the refund Stripe made", []int{200, 500, 200}, func(e *simEnv) {
		pi := e.pay("pm_card_visa", false)
		require.NoError(e.t, e.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/refunds", Method: "POST",
			Kind: stripesim.FaultLate500, DelayMS: 1000}))
		e.refund(pi, 500)
		e.sim.Advance(time.Minute)
		_, _ = e.client.ListRefunds(e.ctx, pi)
	}},

	// Idempotency.
	{"replayed payment", []int{200, 200}, func(e *simEnv) {
		key := e.key()
		e.payWithKey(key, "pm_card_visa", false)
		e.payWithKey(key, "pm_card_visa", false)
		e.requireReplayed(1)
	}},
	{"replayed decline", []int{402, 402}, func(e *simEnv) {
		key := e.key()
		e.payWithKey(key, "pm_card_chargeDeclined", false)
		e.payWithKey(key, "pm_card_chargeDeclined", false)
		e.requireReplayed(1)
	}},
	{"replayed refund", []int{200, 200, 200}, func(e *simEnv) {
		pi, key := e.pay("pm_card_visa", false), e.key()
		for range 2 {
			_, _ = e.client.CreateRefund(e.ctx, key, stripeclient.RefundRequest{PaymentIntent: pi})
		}
		e.requireReplayed(2)
	}},
	{"key reused with other parameters: idempotency_error", []int{200, 400}, func(e *simEnv) {
		key := e.key()
		e.payWithKey(key, "pm_card_visa", false)
		e.payWithKey(key, "pm_card_mastercard", false)
	}},
	{"key reused on another endpoint: idempotency_error", []int{200, 400}, func(e *simEnv) {
		key := e.key()
		e.payWithKey(key, "pm_card_visa", false)
		e.send("POST", "/v1/customers", key, "name=Jenny")
	}},
	{"key in use: 409 idempotency_key_in_use", []int{409, 200}, func(e *simEnv) {
		require.NoError(e.t, e.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/customers", Kind: stripesim.FaultDelay, DelayMS: 2000}))
		first := make(chan error, 1)
		go func() {
			_, err := e.trySend(testKey, "POST", "/v1/customers", "in-use", "name=Jenny")
			first <- err
		}()
		// The first request claims the key right after it takes the fault.
		e.eventually(func() bool { return len(e.sim.Faults()) == 0 })
		e.send("POST", "/v1/customers", "in-use", "name=Jenny")
		require.NoError(e.t, <-first)
	}},

	// Stripe's failures.
	{"429 lock_timeout", []int{429}, func(e *simEnv) {
		e.fault(stripesim.FaultRateLimit)
		e.pay("pm_card_visa", false)
	}},
	{"500 before executing", []int{500}, func(e *simEnv) {
		e.fault(stripesim.FaultError500)
		e.pay("pm_card_visa", false)
	}},
	{"500 after executing (lost response), then the replay", []int{500, 200}, func(e *simEnv) {
		e.fault(stripesim.FaultLostResponse)
		key := e.key()
		e.payWithKey(key, "pm_card_visa", false)
		e.payWithKey(key, "pm_card_visa", false)
	}},
	{"stored 500, then its replay", []int{500, 500}, func(e *simEnv) {
		e.fault(stripesim.FaultStoredError500)
		key := e.key()
		e.payWithKey(key, "pm_card_visa", false)
		e.payWithKey(key, "pm_card_visa", false)
		e.requireReplayed(1)
	}},
	{"dropped connection (no answer), then the replay", []int{200}, func(e *simEnv) {
		e.fault(stripesim.FaultDropConnection)
		key := e.key()
		require.Empty(e.t, e.payWithKey(key, "pm_card_visa", false), "the first request gets no answer")
		e.payWithKey(key, "pm_card_visa", false)
		e.requireReplayed(0)
	}},
	{"slow answer", []int{200}, func(e *simEnv) {
		require.NoError(e.t, e.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/payment_intents", Kind: stripesim.FaultDelay, DelayMS: 50}))
		e.pay("pm_card_visa", false)
	}},
	{"idempotency key over 255 characters", []int{400}, func(e *simEnv) {
		e.send("POST", "/v1/payment_intents", strings.Repeat("k", 256), "amount=2000&currency=usd")
	}},
	{"no API key", []int{401}, func(e *simEnv) {
		e.sendAs("", "GET", "/v1/payment_intents/pi_123", "", "")
	}},
	{"a live key", []int{401}, func(e *simEnv) {
		e.sendAs("sk_live_123", "GET", "/v1/payment_intents/pi_123", "", "")
	}},
	{"unknown parameter", []int{400}, func(e *simEnv) {
		e.send("POST", "/v1/payment_intents", e.key(), "amount=2000&currency=usd&bogus_param=1")
	}},
	{"missing amount", []int{400}, func(e *simEnv) {
		e.send("POST", "/v1/payment_intents", e.key(), "currency=usd")
	}},
	{"amount not an integer", []int{400}, func(e *simEnv) {
		e.send("POST", "/v1/payment_intents", e.key(), "amount=twenty&currency=usd")
	}},
	{"amount under the currency's minimum", []int{400}, func(e *simEnv) {
		e.send("POST", "/v1/payment_intents", e.key(), "amount=49&currency=usd&payment_method=pm_card_visa&confirm=true")
	}},
	{"currency Stripe does not support", []int{400}, func(e *simEnv) {
		e.send("POST", "/v1/payment_intents", e.key(), "amount=2000&currency=zzz")
	}},
	{"bad capture_method", []int{400}, func(e *simEnv) {
		e.send("POST", "/v1/payment_intents", e.key(), "amount=2000&currency=usd&capture_method=sometimes")
	}},
	{"confirm without a payment method", []int{400}, func(e *simEnv) {
		e.send("POST", "/v1/payment_intents", e.key(), "amount=2000&currency=usd&confirm=true")
	}},
	{"refund without a payment intent", []int{400}, func(e *simEnv) {
		e.send("POST", "/v1/refunds", e.key(), "amount=100")
	}},
	{"search without a query", []int{400}, func(e *simEnv) {
		e.send("GET", "/v1/payment_intents/search", "", "")
	}},
}

// TestSimulatorAnswersAsStripeDocuments holds every answer of the simulator
// to Stripe's published OpenAPI document for the API version the service
// speaks: a 200 body must be of the operation's response schema, any other
// status of Stripe's error schema. It catches a field the simulator sends as
// null where Stripe never does, a required field it leaves out, a value of
// the wrong type or enum, an answer to a route Stripe does not have, and a
// field, at any depth, that the document does not define. The events each
// row causes are held to the event schema, and the object each carries to
// its own type's schema, the same way.
func TestSimulatorAnswersAsStripeDocuments(t *testing.T) {
	t.Parallel()
	spec, err := loadStripeSpec()
	require.NoError(t, err, "Stripe's OpenAPI document (from stripe-mock %s)", stripeMockVersion)

	names := map[string]bool{}
	covered := map[string]bool{} // "GET /v1/refunds/{refund}": routes some row's answers came from
	var checked atomic.Int64
	t.Cleanup(func() {
		t.Logf("%d answers and events of %d rows checked against Stripe's document", checked.Load(), len(conformanceRows))
	})
	for _, row := range conformanceRows {
		require.False(t, names[row.name], "two rows named %q", row.name)
		names[row.name] = true
		t.Run(row.name, func(t *testing.T) {
			e := newSimEnv(t)
			row.run(e)
			answers := e.rec.snapshot()
			statuses := make([]int, len(answers))
			for i, a := range answers {
				statuses[i] = a.status
			}
			require.Equal(t, row.want, statuses, "the statuses of the row's answers")
			for _, a := range answers {
				checked.Add(1)
				if route, err := spec.route(a.method, a.path); err == nil {
					covered[a.method+" "+route.Path] = true
				}
				if err := spec.checkAnswer(a.method, a.path, a.status, a.header, a.body); err != nil {
					t.Errorf("%s %s -> %d is not an answer Stripe's document allows: %v\nbody: %s",
						a.method, a.path, a.status, err, clipBody(a.body))
				}
			}
			// The events the row caused, as the simulator sends them to webhooks.
			events, err := e.sim.Objects("event")
			require.NoError(t, err)
			for _, ev := range events {
				checked.Add(1)
				if err := spec.checkEvent(ev); err != nil {
					t.Errorf("an event Stripe's document does not allow: %v\nevent: %s", err, clipBody(ev))
				}
			}
		})
	}

	// A route the simulator gains needs its row: every operation of Stripe's
	// document is tried on a fresh simulator, and each one it serves (it does
	// not answer "Unrecognized request URL") must be one some row covered.
	served := servedOperations(t, spec)
	require.Contains(t, served, "POST /v1/payment_intents", "the probe finds the simulator's routes")
	var uncovered []string
	for _, op := range served {
		if !covered[op] {
			uncovered = append(uncovered, op)
		}
	}
	require.Empty(t, uncovered, "the simulator serves these, and no row of conformanceRows calls them: add rows")
}

// servedOperations are the operations of Stripe's document that a fresh
// simulator serves, as "METHOD /path/{param}", sorted.
func servedOperations(t *testing.T, spec *stripeSpec) []string {
	e := newSimEnv(t)
	var served []string
	for _, r := range spec.routes {
		for method := range r.item.Operations() {
			path := r.template
			for _, seg := range r.segments {
				if strings.HasPrefix(seg, "{") {
					path = strings.Replace(path, seg, "probe", 1)
				}
			}
			a, err := e.trySend(testKey, method, path, "", "")
			require.NoError(t, err, "%s %s", method, path)
			errObj, _ := a["error"].(map[string]any)
			msg, _ := errObj["message"].(string)
			if !strings.HasPrefix(msg, "Unrecognized request URL") {
				served = append(served, method+" "+r.template)
			}
		}
	}
	slices.Sort(served)
	return served
}

// TestStripeSpecCatchesWhatStripeNeverSends is the checker's negative
// control: answers Stripe's document forbids are caught, with the field.
func TestStripeSpecCatchesWhatStripeNeverSends(t *testing.T) {
	t.Parallel()
	spec, err := loadStripeSpec()
	require.NoError(t, err)

	bad := []struct {
		method, path string
		status       int
		body, want   string
	}{
		{"GET", "/v1/refunds/re_1", 200,
			`{"id":"re_1","object":"refund","amount":100,"created":1,"currency":"usd","failure_reason":null}`,
			"at /failure_reason: Value is not nullable"},
		{"GET", "/v1/payment_intents/pi_1", 200,
			`{"id":"pi_1","object":"payment_intent","amount":100,"created":1,"currency":"usd","livemode":false,` +
				`"capture_method":"automatic","confirmation_method":"automatic","payment_method_types":["card"],"status":"succeeded",` +
				`"last_payment_error":{"type":"card_error","payment_method":{"id":"pm_card_visa","object":"payment_method","type":"card"}}}`,
			`property "billing_details" is missing`},
		{"GET", "/v1/payment_intents/pi_1", 200, `{"id":"pi_1","object":"payment_intent","status":"done"}`,
			`property "amount" is missing`},
		{"POST", "/v1/refunds", 402, `{"error":{"type":"decline"}}`, "at /error/type: value is not one of the allowed values"},
		{"GET", "/v1/nothing_here", 404, `{"error":{"type":"invalid_request_error"}}`, "no operation of Stripe's API"},
		{"GET", "/v1/refunds/re_1", 200,
			`{"id":"re_1","object":"refund","amount":100,"created":1,"currency":"usd","metadata":{"a":"b"},"failure_reasn":"x"}`,
			"fields Stripe's document does not define: /failure_reasn"},
		{"POST", "/v1/payment_intents", 402,
			`{"error":{"type":"card_error","payment_method":{"id":"pm_1","object":"payment_method","type":"card","created":1,"livemode":false,` +
				`"billing_details":{"address":null},"card":{"brand":"visa","exp_month":1,"exp_year":2030,"funding":"credit","last4":"4242","lastfour":"4242"}}}}`,
			"fields Stripe's document does not define: /error/payment_method/card/lastfour"},
	}
	for _, b := range bad {
		err := spec.checkAnswer(b.method, b.path, b.status, jsonHeader(), []byte(b.body))
		require.Error(t, err, "%s %s -> %d %s", b.method, b.path, b.status, b.body)
		require.Contains(t, err.Error(), b.want)
	}
	// An event is held to the event schema and its object to its own.
	err = spec.checkEvent([]byte(`{"id":"evt_1","object":"event","created":1,"livemode":false,"pending_webhooks":0,` +
		`"type":"charge.succeeded","data":{"object":{"id":"ch_1","object":"charge","amount":100}}}`))
	require.ErrorContains(t, err, `data.object: at /amount_captured: property "amount_captured" is missing`)
	err = spec.checkEvent([]byte(`{"id":"evt_1","object":"event","created":1,"type":"charge.succeeded","data":{"object":{"object":"charge"}}}`))
	require.ErrorContains(t, err, `property "livemode" is missing`)

	// And the route finder prefers the fixed segment: search is search.
	route, err := spec.route("GET", "/v1/payment_intents/search")
	require.NoError(t, err)
	require.Equal(t, "/v1/payment_intents/search", route.Path)
}

func jsonHeader() http.Header {
	return http.Header{"Content-Type": {"application/json"}}
}

// simEnv is one row's simulator, reached over real HTTP by the service's
// client and by raw requests, every answer recorded.
type simEnv struct {
	t      *testing.T
	ctx    context.Context
	sim    *stripesim.Simulator
	url    string
	client *stripeclient.Client
	http   *http.Client
	rec    *recorder
	keys   int
}

func newSimEnv(t *testing.T) *simEnv {
	sim := stripesim.New(stripesim.Config{})
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(func() {
		srv.Close()
		sim.Close()
	})
	rec := &recorder{next: http.DefaultTransport}
	httpClient := &http.Client{Transport: rec, Timeout: 10 * time.Second}
	return &simEnv{
		t: t, ctx: context.Background(), sim: sim, url: srv.URL, rec: rec, http: httpClient,
		client: newClient(t, srv.URL, func(c *stripeclient.Config) { c.HTTPClient = httpClient }),
	}
}

// key is a fresh idempotency key.
func (e *simEnv) key() string {
	e.keys++
	return fmt.Sprintf("conformance-%d", e.keys)
}

// pay creates and confirms a payment intent of 20.00 USD as the service
// does and returns its id (from the error's payment_intent on a decline),
// or "" when there is none.
func (e *simEnv) pay(pm string, manual bool) string { return e.payWithKey(e.key(), pm, manual) }

func (e *simEnv) payWithKey(key, pm string, manual bool) string {
	pi, err := e.client.CreatePaymentIntent(e.ctx, key, stripeclient.PaymentIntentRequest{
		Amount: 2000, Currency: "usd", PaymentMethod: pm, CaptureManually: manual,
		Metadata: map[string]string{"key_row": "kr_conformance"},
	})
	if err == nil {
		return pi.ID
	}
	if d, ok := stripeclient.AsDecline(err); ok && d.PaymentIntent != "" {
		return d.PaymentIntent
	}
	return ""
}

// get retrieves a payment intent as the service does.
func (e *simEnv) get(id string) { _, _ = e.client.GetPaymentIntent(e.ctx, id) }

// refund refunds amount (0: the rest) as the service does and returns the
// refund's id.
func (e *simEnv) refund(pi string, amount int64) string {
	re, err := e.client.CreateRefund(e.ctx, e.key(), stripeclient.RefundRequest{
		PaymentIntent: pi, Amount: amount, Reason: "requested_by_customer", Metadata: map[string]string{"key_row": "kr_r"},
	})
	if err != nil {
		return ""
	}
	return re.ID
}

// fault arms one fault of kind on payment intents.
func (e *simEnv) fault(kind stripesim.FaultKind) {
	require.NoError(e.t, e.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/payment_intents", Kind: kind}))
}

// disputeOf is the id of the dispute of payment intent pi, read through
// the control surface (no answer recorded).
func disputeOf(e *simEnv, pi string) string {
	disputes, err := e.sim.Objects("dispute")
	require.NoError(e.t, err)
	for _, raw := range disputes {
		var dp struct {
			ID            string `json:"id"`
			PaymentIntent string `json:"payment_intent"`
		}
		require.NoError(e.t, json.Unmarshal(raw, &dp))
		if dp.PaymentIntent == pi {
			return dp.ID
		}
	}
	require.FailNow(e.t, "no dispute of "+pi)
	return ""
}

// answer is a decoded JSON answer.
type answer map[string]any

func (a answer) id() string {
	id, _ := a["id"].(string)
	return id
}

// send sends a raw request with the test key, as stripe-go would shape it.
func (e *simEnv) send(method, path, idempotencyKey, form string) answer {
	return e.sendAs(testKey, method, path, idempotencyKey, form)
}

func (e *simEnv) sendAs(apiKey, method, path, idempotencyKey, form string) answer {
	a, err := e.trySend(apiKey, method, path, idempotencyKey, form)
	require.NoError(e.t, err)
	return a
}

// trySend is sendAs for a goroutine other than the test's: it returns what
// went wrong instead of failing the test.
func (e *simEnv) trySend(apiKey, method, path, idempotencyKey, form string) (answer, error) {
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(form)
	} else if form != "" {
		path += "?" + form
	}
	req, err := http.NewRequest(method, e.url+path, body)
	if err != nil {
		return nil, err
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	req.Header.Set("Stripe-Version", stripesim.APIVersion)
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	resp, err := e.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var a answer
	return a, json.NewDecoder(resp.Body).Decode(&a)
}

// requireReplayed requires the i-th answer so far to be a replay.
func (e *simEnv) requireReplayed(i int) {
	answers := e.rec.snapshot()
	require.Greater(e.t, len(answers), i)
	require.Equal(e.t, "true", answers[i].header.Get("Idempotent-Replayed"), "answer %d replayed", i)
}

func (e *simEnv) eventually(cond func() bool) {
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		require.True(e.t, time.Now().Before(deadline), "condition not met within 5s")
		time.Sleep(5 * time.Millisecond)
	}
}

// recorder is a transport that keeps every answer.
type recorder struct {
	next    http.RoundTripper
	mu      sync.Mutex
	answers []recorded
}

type recorded struct {
	method, path string
	status       int
	header       http.Header
	body         []byte
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answers = append(r.answers, recorded{req.Method, req.URL.Path, resp.StatusCode, resp.Header.Clone(), body})
	return resp, nil
}

func (r *recorder) snapshot() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.answers...)
}

func clipBody(b []byte) string {
	const max = 1500
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}
