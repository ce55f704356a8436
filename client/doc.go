// Package client is the client half of idempotency keys with recovery
// points: a Go client of the payments API (docs/API.md sections 2, 7 and 8;
// the OpenAPI document at GET /openapi.json) that makes one key per intent
// and retries with it until the service gives its one final answer.
//
//	c := client.New("http://127.0.0.1:8080", "sk_dev_alice_0123456789abcdef")
//	p, err := c.CreatePayment(ctx, client.CreatePaymentParams{
//		Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_visa",
//	}, client.WithIdempotencyKey("order-1001"))
//
// What a call does:
//
//   - Every POST carries an Idempotency-Key: the caller's
//     (WithIdempotencyKey), or else a new random one, made once per call
//     and sent again on every retry of that call. The service executes the
//     first request with a key and replays its stored answer to the others,
//     so a retry can never charge twice; the result's Replayed field (and
//     Error.Replayed) says when an answer was such a replay. Pass your own
//     key (an order id, say) when the call itself may be repeated, after a
//     crash of your program for instance: only a key you stored can be sent
//     again by the next run.
//   - It retries what may succeed if tried again: an attempt that got no
//     answer (a refused or dropped connection, a time-out), 409
//     idempotency_key_in_use (the first request with the key is still
//     running, or its process died and its lock has not lapsed yet), 409
//     payment_processing, 429 (over the rate limit) and 5xx (503
//     payment_processor_unavailable: Stripe is unreachable, and the retry
//     resumes the request where it stopped). It waits between attempts with
//     exponential back-off and full jitter (a random wait up to a bound that
//     doubles with each attempt), and never less than the answer's
//     Retry-After. It stops at the context's deadline (without sleeping
//     past it), or when the next attempt would start after the retry budget
//     (WithRetryBudget; DefaultRetryBudget, 200 s, outlasts the lock a
//     crashed process leaves on a key: the service's lock timeout is 90 s),
//     or after WithMaxAttempts attempts if set.
//   - It never retries a final answer: a 2xx, or a 4xx other than 409 and
//     429 (a declined card, an invalid request, a key reused for another
//     request). Those come back at once, the 4xx as *Error.
//
// Every error a call returns once it has sent a request carries the call's
// Idempotency-Key, the one to send again for the same intent:
//
//   - *Error for an answer that is not a 2xx (errors.As), with the status,
//     the stable problem code (CodeCardDeclined, ...), the card's decline
//     code, the failed payment's id, the key and the request's id
//     (X-Request-Id, the service's name of it in its logs). When retries
//     run out, or the context ends, the error wraps the last answer's
//     *Error (and ctx.Err()).
//   - *NetworkError when no usable answer came back: every attempt failed
//     before a whole answer arrived, the context ended first (errors.Is
//     context.DeadlineExceeded), or the answer was over MaxResponseBytes
//     (ErrResponseTooLarge) or not the JSON expected. Whether the request
//     ran is not known; sent again with the same key, it runs once.
//
// Requests carry the User-Agent "payments-go/<version> <Go version>".
//
// The paged lists are iterators over every page (ListPayments, ListEvents,
// ListWebhookEndpoints; one page: ListPaymentsPage, ...):
//
//	for p, err := range c.ListPayments(ctx, client.ListParams{Limit: client.Int64(100)}) {
//		if err != nil {
//			return err
//		}
//		...
//	}
//
// Optional request fields are pointers (Int64, String, Bool): nil leaves
// a field out, and a value set is sent, zero included.
//
// Package webhook (client/webhook) verifies the deliveries of the
// merchant's webhook endpoints.
//
// WithObserver sees every attempt as it happened (its status, headers, raw
// body or error, and the wait before the next one), for logs and metrics,
// and for test suites such as this repository's chaos suite, which records
// every raw answer for its invariant checker.
package client
