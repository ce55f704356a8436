// Package stripesim is a stateful stand-in for Stripe's test mode, for tests
// and for `payments dev`. It owns an in-memory copy of the few Stripe objects
// the service uses (customers, payment intents, charges, refunds), Stripe's
// idempotency layer, fault injection and signed webhook delivery; made by
// Open, it also keeps them in a file across restarts (persist.go). It must
// never be reachable from production: `payments serve` does not start it, and
// its control surface answers loopback clients only.
//
// # The Stripe API it speaks
//
// The simulator accepts what stripe-go v76 sends (form-encoded bodies,
// `Stripe-Version: 2023-10-16`, `Authorization: Bearer sk_test_...`) on:
//
//	POST /v1/customers                       GET /v1/customers/{id}
//	POST /v1/payment_intents                 GET /v1/payment_intents/{id}
//	POST /v1/payment_intents/{id}/capture    GET /v1/payment_intents/search
//	POST /v1/payment_intents/{id}/cancel     GET /v1/payment_intents?created[gte]=...
//	POST /v1/refunds                         GET /v1/refunds/{id}
//	                                         GET /v1/refunds?payment_intent=pi_...
//
// and answers with Stripe's JSON objects and Stripe's error shape
// (`{"error": {"type": ..., "code": ..., "message": ...}}` plus a
// `Request-Id` header). Unknown parameters are rejected as Stripe does, so a
// typo in the service fails here instead of in production.
//
// Test payment methods: pm_card_visa and pm_card_mastercard succeed;
// pm_card_chargeDeclined, pm_card_chargeDeclinedInsufficientFunds and
// pm_card_chargeDeclinedLostCard are declined with a 402 card_error whose
// decline_code is generic_decline, insufficient_funds and lost_card. Any other
// payment method is 400 resource_missing. As in Stripe's test mode, some
// outcomes come later:
//
//   - pm_card_authenticationRequired needs 3-D Secure: confirming it leaves
//     the payment intent requires_action, with a next_action; with
//     error_on_requires_action=true it is a 402 card_error
//     authentication_required and the intent is requires_payment_method.
//   - A refund of pm_card_refundFail answers succeeded, and about two seconds
//     later fails (failure_reason expired_or_canceled_card).
//   - A refund of pm_card_pendingRefund answers pending, and about two
//     seconds later succeeds.
//   - pm_card_createDispute is charged normally, and about two seconds after
//     the capture the customer's bank disputes the whole charge (reason
//     fraudulent, status needs_response; charge.dispute.created and
//     charge.dispute.funds_withdrawn). POST /_sim/disputes/{id}/close
//     decides it (won or lost), and a refund of a charge disputed and not
//     won is 400 charge_disputed (disputes.go).
//
// Each later change of a refund sends charge.refund.updated. "Later" is on the
// simulator's clock (Config.Now plus what Advance added): due changes are
// applied before every request, by Advance and POST /_sim/advance, and by a
// wall-clock timer, so tests need not sleep and `payments dev` behaves like
// Stripe.
//
// # Idempotency
//
// Like Stripe, every POST may carry an Idempotency-Key; keys are scoped by API
// key and kept for 24 hours (measured with Config.Now), then forgotten with
// their stored answers, as GET /v1/events forgets events after 30 days:
// a month of history holds no older ones in memory. A request is handled
// in this order (see serveAPI):
//
//  1. Authentication, form parsing and fault selection. `error_500` and
//     `rate_limit` faults answer here, before anything executes: nothing is
//     stored, the key stays free.
//  2. The key is claimed. A finished key replays its stored response with
//     `Idempotent-Replayed: true`; a key still running is 409
//     idempotency_key_in_use; a key first used with another method, path or
//     parameters (compared as decoded form values, order-insensitive) is 400
//     idempotency_error.
//  3. A `delay` fault sleeps here, with the key already claimed and without
//     holding the simulator's lock.
//  4. The operation runs under the lock. A request rejected by validation
//     before executing (missing or malformed parameters, unknown ids) releases
//     the key, as Stripe does; any other outcome is stored, including card
//     declines (402) and state errors such as capturing a succeeded payment
//     intent or over-refunding (400).
//     A `stored_error_500` fault acts here instead: nothing executes, and a
//     500 is stored under the key as the request's result, so every retry
//     with the key gets that 500 again, replayed, as at Stripe. A `late_500`
//     fault stores and answers the same 500, and executes the operation
//     `delay_ms` later on the simulator's clock, its result dropped: the
//     500 of a Stripe that answered while the request was still being
//     processed, whose object appears after the client was told 500.
//     A `processing` fault executes the request, but a confirmation it
//     makes answers processing, and succeeds `delay_ms` later.
//  5. `lost_response` and `drop_connection` faults act on the way out: the
//     operation executed and its result is stored, but the client sees a 500
//     or a closed connection. A retry with the same key gets the real result.
//
// # Control surface
//
// Loopback clients (anyone else gets 403) can inspect and steer the simulator;
// every answer is JSON:
//
//	GET    /_sim/objects?type=T  every object of type T (payment_intent, charge,
//	                             refund, dispute, customer or event), as a JSON array
//	GET    /_sim/requests        the /v1 requests received, in arrival order
//	GET    /_sim/faults          the faults still armed
//	POST   /_sim/faults          arm a fault: {"path_prefix": "/v1/payment_intents",
//	                             "method": "POST", "kind": "lost_response",
//	                             "count": 1, "delay_ms": 0}; optionally
//	                             "idempotency_key_suffix": "-capture" to hit
//	                             only requests whose key ends so
//	DELETE /_sim/faults          disarm every fault
//	GET    /_sim/late_requests   {"late_requests": N}: requests a late_500
//	                             answered that have not executed yet
//	POST   /_sim/disputes/{id}/close {"status": "won"|"lost"}: decide a dispute
//	POST   /_sim/reset           forget everything
//	POST   /_sim/advance         {"seconds": N}: move the clock N seconds
//	                             forward and apply what falls due (later
//	                             refund outcomes, authorisations not
//	                             captured within 7 days, expired
//	                             idempotency keys)
//	GET    /_sim/webhook_faults  the webhook faults still armed
//	POST   /_sim/webhook_faults  garble the next webhooks: {"kind": "duplicate"
//	                             | "reorder" | "delay" | "drop", "count": 1,
//	                             "delay_ms": 0, "type": "optional event type"}
//	DELETE /_sim/webhook_faults  disarm them, and send what reorder held back
//
// The same operations are available to Go tests as methods (AddFault,
// Requests, Objects, Reset, Advance...).
//
// # Webhooks
//
// With Config.WebhookURL set, every state change produces a Stripe event
// (api_version 2023-10-16, so stripe-go's webhook.ConstructEvent accepts it),
// delivered asynchronously, signed in Stripe's `Stripe-Signature` format, one
// at a time in order of creation, and retried with exponential backoff a
// bounded number of times. Delivery never blocks an API request. Stripe
// promises neither order nor a single delivery; webhook faults
// (webhook_faults.go) make the simulator send an event twice (duplicate),
// after the next event about the same object (reorder), or delay_ms late
// (delay), so that receivers can be tested against that.
//
// # Known simplifications
//
// Payment methods keep their test id (Stripe would clone pm_card_visa into a
// fresh pm_ id). Capturing part of an authorisation, or canceling it,
// releases the rest, which the charge's amount_refunded counts as Stripe's
// does; the simulator makes no refund object for it. Search is immediately
// consistent, whereas Stripe's search index lags by up to a minute.
//
// # Stripe's rules on amounts
//
// A payment intent's currency must be one Stripe charges in, and its amount
// at least the currency's minimum charge (400 amount_too_small), from the
// table in package currency, which the API shares. Captures and refunds
// have no minimum.
package stripesim
