package client

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Code is the stable, machine-readable name of an error (the problem's
// "code"); switch on it, never on the text.
type Code string

// The codes the API answers with (docs/API.md section 2).
const (
	CodeUnauthorized                Code = "unauthorized"
	CodeNotFound                    Code = "not_found"
	CodeMethodNotAllowed            Code = "method_not_allowed"
	CodeValidationFailed            Code = "validation_failed"
	CodeUnsupportedMediaType        Code = "unsupported_media_type"
	CodeBodyTooLarge                Code = "body_too_large"
	CodeIdempotencyKeyMissing       Code = "idempotency_key_missing"
	CodeIdempotencyKeyInvalid       Code = "idempotency_key_invalid"
	CodeIdempotencyKeyReused        Code = "idempotency_key_reused"
	CodeIdempotencyKeyInUse         Code = "idempotency_key_in_use"
	CodeCardDeclined                Code = "card_declined"
	CodeRefundNotAllowed            Code = "refund_not_allowed"
	CodePaymentDisputed             Code = "payment_disputed"
	CodePaymentNotCapturable        Code = "payment_not_capturable"
	CodePaymentProcessorUnavailable Code = "payment_processor_unavailable"
	// CodePaymentProcessing: a capture, cancel or refund of a payment whose
	// creation has not finished; nothing was stored for the key, so the same
	// call with the same key may be made again after Retry-After.
	CodePaymentProcessing Code = "payment_processing"
	// CodeIdempotencyKeyNeedsAttention: the key's request cannot be finished
	// without an operator (`payments keys retry`); retrying does not help.
	CodeIdempotencyKeyNeedsAttention Code = "idempotency_key_needs_attention"
	CodeWebhookSignatureInvalid      Code = "webhook_signature_invalid"
	CodeRateLimited                  Code = "rate_limited"
	CodeInternal                     Code = "internal"
)

// requestIDHeader is where the service names the request in its logs.
const requestIDHeader = "X-Request-Id"

// Error is an answer that is not a 2xx: the API's problem details (RFC 9457).
// A call that got no answer at all returns a *NetworkError instead.
type Error struct {
	Status      int    // the HTTP status
	Code        Code   // the stable code, such as CodeCardDeclined
	DeclineCode string // card_declined: the issuer's reason, such as "insufficient_funds"
	Payment     string // card_declined: the id of the payment, now failed
	Title       string
	Detail      string // for people: never parse it
	Type        string // a URI naming the kind of problem
	// Replayed is true when the answer was replayed from the key's stored
	// answer: the request was not executed again (a declined card stays
	// declined).
	Replayed bool
	// IdempotencyKey is the key the call was sent with ("" for a GET),
	// the one to send again (WithIdempotencyKey) for the same intent.
	IdempotencyKey string
	// RequestID is the answer's X-Request-Id: the service's name of the
	// request in its logs, for a support ticket.
	RequestID string
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("payments: %d %s", e.Status, e.Code)
	if e.Code == "" {
		msg = fmt.Sprintf("payments: %d %s", e.Status, http.StatusText(e.Status))
	}
	if e.DeclineCode != "" {
		msg += " (" + e.DeclineCode + ")"
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// toError reads a non-2xx answer. A body that is not a problem (a proxy's
// error page, say) still gives an Error, with its status and no code.
func toError(a Attempt) *Error {
	var p struct {
		Type        string `json:"type"`
		Title       string `json:"title"`
		Detail      string `json:"detail"`
		Code        Code   `json:"code"`
		DeclineCode string `json:"decline_code"`
		Payment     string `json:"payment"`
	}
	_ = json.Unmarshal(a.Body, &p)
	return &Error{
		Status: a.Status, Code: p.Code, DeclineCode: p.DeclineCode, Payment: p.Payment,
		Title: p.Title, Detail: p.Detail, Type: p.Type, Replayed: a.Replayed(), IdempotencyKey: a.IdempotencyKey,
		RequestID: a.Header.Get(requestIDHeader),
	}
}

// NetworkError is a call that ended without an answer it could use: every
// attempt failed before a whole answer came back (a refused or dropped
// connection, a time-out), the context ended first, or the answer could
// not be read (over MaxResponseBytes, or not the JSON expected). Whether
// the service executed the request is not known: send it again with the
// same IdempotencyKey, and it runs once, or its stored answer is replayed.
// errors.Is sees through it to the cause (context.DeadlineExceeded,
// ErrResponseTooLarge, ...).
type NetworkError struct {
	Method, Path   string // the call's route
	IdempotencyKey string // the key every attempt carried ("" for a GET)
	RequestID      string // X-Request-Id, when an answer came back but could not be read
	Attempts       int    // how many attempts were sent
	Err            error  // why the last one, or the call, ended
}

func (e *NetworkError) Error() string {
	msg := fmt.Sprintf("payments: %s %s: no usable answer", e.Method, e.Path)
	if e.IdempotencyKey != "" {
		msg += " (Idempotency-Key " + e.IdempotencyKey + ")"
	}
	return msg + ": " + e.Err.Error()
}

func (e *NetworkError) Unwrap() error { return e.Err }
