package stripeclient

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/example/payments/internal/telemetry"
)

// StripeIdempotencyKeyAttribute is the attribute of a Stripe call's span
// that holds the Idempotency-Key it sent: the child key derived from the
// request's key row (API.md section 3), the one to search Stripe's logs
// and the simulator's /_sim/requests for.
const StripeIdempotencyKeyAttribute = "payments.stripe_idempotency_key"

// traced makes each call through c an HTTP client span when tracing is on
// (telemetry.ClientTransport), carrying the idempotency key the call sent;
// with tracing off it is c.
func traced(c *http.Client) *http.Client {
	if !telemetry.Enabled() {
		return c
	}
	t := *c
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	t.Transport = telemetry.ClientTransport(keyOnSpan{next}, stripeSpanName)
	return &t
}

// keyOnSpan runs inside the client span (otelhttp starts it, then calls
// this), so it reads the key from the request as stripe-go sent it.
type keyOnSpan struct{ next http.RoundTripper }

func (t keyOnSpan) RoundTrip(r *http.Request) (*http.Response, error) {
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		trace.SpanFromContext(r.Context()).SetAttributes(attribute.String(StripeIdempotencyKeyAttribute, key))
	}
	return t.next.RoundTrip(r)
}

// stripeSpanName is "POST /v1/payment_intents/{id}/capture": the path with
// Stripe's object ids (pi_3Mtw...: a prefix, an underscore, then upper-case
// letters or digits, where Stripe's own path words are lower-case) replaced,
// so that span names stay few.
func stripeSpanName(r *http.Request) string {
	segments := strings.Split(r.URL.Path, "/")
	for i, s := range segments {
		if _, rest, ok := strings.Cut(s, "_"); ok && strings.ContainsAny(rest, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
			segments[i] = "{id}"
		}
	}
	return r.Method + " " + strings.Join(segments, "/")
}
