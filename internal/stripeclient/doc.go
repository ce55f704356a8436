// Package stripeclient is the service's only door to Stripe: a thin wrapper
// over stripe-go v76 that fixes how every call is made and says what every
// failure means. It owns the client configuration (key, base URL, timeout,
// retries, logging) and the classification of errors into Terminal and
// Transient, on which the idempotency engine decides whether to store a
// result or retry. It never derives idempotency keys (the caller passes the
// key it persisted before the first attempt) and never keeps state.
//
// # One client, no globals
//
// New builds its own stripe-go client.API and backends; the package-level
// stripe.Key and default backends are never touched, so several clients
// (say, one against the simulator and one against stripe-mock in a test) can
// coexist. Config.APIBase points the client at the simulator or stripe-mock;
// a sk_live_ key is refused unless Config.AllowLive is set.
//
// # One write per call, one decoding per answer
//
// The client's stripe-go backend is stripe-go's own but for Call and
// CallRaw (sizedBackend, backend.go): a request's form goes out with its
// Content-Length in one write, where stripe-go sent it chunked in three,
// and a payment intent or refund is decoded once, where stripe-go runs
// encoding/json over it three times (TestCallsSendTheirLengthAndDecodeAsStripeGo;
// BenchmarkCreatePaymentIntent measures it).
//
// # Every mutating call carries the caller's idempotency key
//
// CreatePaymentIntent, CapturePaymentIntent, CancelPaymentIntent and
// CreateRefund take the key as an argument and refuse to run without one
// (ErrNoIdempotencyKey): stripe-go would otherwise invent a random key per
// call, and a retry after a lost response would charge twice.
//
// # No retries inside stripe-go (MaxNetworkRetries = 0)
//
// By default stripe-go retries a request up to twice, on the same
// *http.Request and so with the same Idempotency-Key: after network errors,
// 409 Conflict, 429 lock_timeout, 503, any answer carrying
// Stripe-Should-Retry: true, and 5xx on non-POST requests. Those retries are
// safe (same key), but this wrapper turns them off, for three reasons:
//
//   - One retry policy in one place. The idempotency engine already retries
//     transient failures with backoff, releases its lock in between and lets
//     the completer finish abandoned work. A second hidden loop underneath
//     would multiply attempts and make them invisible to its logs and metrics.
//   - A bounded call. With retries, one call could take three timeouts plus
//     seconds of sleeps, past what the engine's lock heartbeat and
//     PAYMENTS_LOCK_TIMEOUT (90s) are sized for. Without, a call takes at most
//     Config.Timeout.
//   - Honest tests. Every request the simulator counts is one the engine
//     decided to make (TestNoHiddenRetries proves it for each failure
//     stripe-go would have retried).
//
// One resend remains below stripe-go, in Go's own http.Transport: a request
// carrying an Idempotency-Key is sent again, once, when a reused keep-alive
// connection dies before any answer, because the transport cannot tell that
// from a server closing an idle connection. It is kept: the key makes it
// safe, it hides only that race, and the caller still sees one call with
// Stripe's real answer (TestTransportResendsOnReusedConnection).
//
// # Timeouts
//
// Each HTTP request is bounded by Config.Timeout (30s by default) and by the
// caller's context, whichever ends first. stripe-go's own default is 80s;
// 30s still leaves a slow confirm (a card network taking its time) room to
// finish, and leaves the engine a wide margin inside its 90s lock timeout. A
// timeout is Transient: the charge may have happened, and only a retry with
// the same key can tell.
//
// # Error classes
//
// Classify sorts every error a call returns:
//
//	Terminal   Stripe's final answer for this key: card errors (402), invalid
//	           requests (400, 404 and other 4xx), idempotency_error 400 (the
//	           key was used with other parameters). Store it; a retry with the
//	           same key gets the same answer.
//	Transient  the call may or may not have taken effect: network errors,
//	           timeouts, a cancelled or expired context, 5xx, 429, 409
//	           (idempotency_key_in_use: the first attempt still runs), 401 and
//	           403 (a key problem is the operator's to fix, not the request's
//	           final answer), and anything unrecognised. Retry later with the
//	           same key; never store it as final.
//
// One Transient error is marked: ErrChildKeySpent, a 5xx that Stripe
// replayed from its idempotency store (Idempotent-Replayed: true). Stripe
// stores a request's result once its execution began, 500s included, so a
// retry with that key gets the same 500 for as long as Stripe keeps the key:
// the caller must find out whether the object exists and then use another
// key (the recovery engine's child-key generations).
//
// AsDecline extracts a card decline's details (code, decline_code, message
// and the payment intent's id) from a Terminal card error.
package stripeclient
