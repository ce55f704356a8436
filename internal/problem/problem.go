// Package problem is the error format of the API: RFC 9457 problem details
// (application/problem+json) with a stable, machine-readable code. Handlers
// write them, and flows store them as the final answer of a request (a
// declined card), so both share this one definition.
package problem

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// Code is the stable name of an error. Clients switch on it; it never changes meaning.
type Code string

// The codes of API.md, plus method_not_allowed.
const (
	Unauthorized                Code = "unauthorized"
	NotFound                    Code = "not_found"
	MethodNotAllowed            Code = "method_not_allowed"
	ValidationFailed            Code = "validation_failed"
	UnsupportedMediaType        Code = "unsupported_media_type"
	BodyTooLarge                Code = "body_too_large"
	IdempotencyKeyMissing       Code = "idempotency_key_missing"
	IdempotencyKeyInvalid       Code = "idempotency_key_invalid"
	IdempotencyKeyReused        Code = "idempotency_key_reused"
	IdempotencyKeyInUse         Code = "idempotency_key_in_use"
	CardDeclined                Code = "card_declined"
	RefundNotAllowed            Code = "refund_not_allowed"
	PaymentNotCapturable        Code = "payment_not_capturable"
	PaymentProcessorUnavailable Code = "payment_processor_unavailable"
	// ServiceUnavailable: the database cannot commit now (a failover, a
	// lost synchronous standby, a transaction past its deadline: 503, with
	// Retry-After); nothing final is stored, and a retry resumes.
	ServiceUnavailable Code = "service_unavailable"
	// PaymentProcessing: a capture, cancel or refund of a payment whose
	// creation has not finished (409, with Retry-After); nothing is stored.
	PaymentProcessing Code = "payment_processing"
	// IdempotencyKeyNeedsAttention: the key's request cannot be finished
	// without an operator (409, no Retry-After: `payments keys retry`).
	IdempotencyKeyNeedsAttention Code = "idempotency_key_needs_attention"
	WebhookSignatureInvalid      Code = "webhook_signature_invalid"
	RateLimited                  Code = "rate_limited"
	Internal                     Code = "internal"
)

// ContentType is the media type of a problem.
const ContentType = "application/problem+json"

// typeBase prefixes each code to make the problem's type URI.
const typeBase = "https://github.com/example/payments/blob/main/README.md#errors-"

// Problem is one problem detail. It is also an error.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	Code   Code   `json:"code"`
	// Extension members.
	DeclineCode string `json:"decline_code,omitempty"` // card_declined: the issuer's reason
	Payment     string `json:"payment,omitempty"`      // card_declined: the failed payment's id
	// RetryAfter, when positive, is sent as the Retry-After header (seconds).
	RetryAfter int `json:"-"`
}

// New returns a problem with the standard title of its status.
func New(status int, code Code, format string, args ...any) *Problem {
	return &Problem{
		Type: typeBase + string(code), Title: http.StatusText(status), Status: status,
		Detail: fmt.Sprintf(format, args...), Code: code,
	}
}

// WithRetryAfter tells the client to retry after seconds.
func (p *Problem) WithRetryAfter(seconds int) *Problem {
	p.RetryAfter = seconds
	return p
}

func (p *Problem) Error() string { return fmt.Sprintf("%d %s: %s", p.Status, p.Code, p.Detail) }

// JSON is the problem's body.
func (p *Problem) JSON() []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(p)
	return buf.Bytes()
}

// Write sends the problem as the response.
func Write(w http.ResponseWriter, p *Problem) {
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("Cache-Control", "no-store")
	if p.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(p.JSON())
}
