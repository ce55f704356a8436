package stripesim

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// apiError is Stripe's error object, the value of "error" in an error
// response and of a payment intent's last_payment_error.
type apiError struct {
	status int // HTTP status of the response carrying it

	Type          string          `json:"type"`
	Code          string          `json:"code,omitempty"`
	DeclineCode   string          `json:"decline_code,omitempty"`
	DocURL        string          `json:"doc_url,omitempty"`
	Message       string          `json:"message"`
	Param         string          `json:"param,omitempty"`
	Charge        string          `json:"charge,omitempty"`
	PaymentIntent json.RawMessage `json:"payment_intent,omitempty"`
	PaymentMethod *paymentMethod  `json:"payment_method,omitempty"`
}

// Stripe's error types.
const (
	typeInvalidRequest = "invalid_request_error"
	typeCard           = "card_error"
	typeIdempotency    = "idempotency_error"
	typeAPI            = "api_error"
)

func invalidRequest(status int, code, param, format string, args ...any) *apiError {
	e := &apiError{
		status:  status,
		Type:    typeInvalidRequest,
		Code:    code,
		Param:   param,
		Message: fmt.Sprintf(format, args...),
	}
	if code != "" {
		e.DocURL = "https://stripe.com/docs/error-codes/" + code
	}
	return e
}

func unknownParameter(name string) *apiError {
	return invalidRequest(http.StatusBadRequest, "parameter_unknown", name,
		"Received unknown parameter: %s", name)
}

func missingParameter(name string) *apiError {
	return invalidRequest(http.StatusBadRequest, "parameter_missing", name,
		"Missing required param: %s.", name)
}

func invalidParameter(name, format string, args ...any) *apiError {
	return invalidRequest(http.StatusBadRequest, "parameter_invalid", name, format, args...)
}

func noSuchObject(status int, kind, param, id string) *apiError {
	return invalidRequest(status, "resource_missing", param, "No such %s: '%s'", kind, id)
}

func unexpectedState(pi *paymentIntent, verb, allowed string) *apiError {
	e := invalidRequest(http.StatusBadRequest, "payment_intent_unexpected_state", "",
		"This PaymentIntent could not be %s because it has a status of %s. "+
			"Only a PaymentIntent with one of the following statuses may be %s: %s.",
		verb, pi.Status, verb, allowed)
	e.PaymentIntent = snapshot(pi)
	return e
}

func unauthenticated(format string, args ...any) *apiError {
	return invalidRequest(http.StatusUnauthorized, "", "", format, args...)
}

func unrecognizedURL(c *call) outcome {
	return rejected(invalidRequest(http.StatusNotFound, "", "",
		"Unrecognized request URL (%s: %s). Please see https://stripe.com/docs or we can help at https://support.stripe.com/.",
		c.method, c.path))
}

func internalError() *apiError {
	return &apiError{
		status:  http.StatusInternalServerError,
		Type:    typeAPI,
		Message: "An unknown error occurred (simulated by stripesim).",
	}
}

func lockTimeout() *apiError {
	return invalidRequest(http.StatusTooManyRequests, "lock_timeout", "",
		"This object cannot be accessed right now because another API request or Stripe process is currently accessing it. "+
			"If you see this error intermittently, retry the request (simulated by stripesim).")
}

func idempotencyKeyInUse(key string) *apiError {
	return &apiError{
		status: http.StatusConflict,
		Type:   typeIdempotency,
		Code:   "idempotency_key_in_use",
		Message: fmt.Sprintf("There is currently another in-progress request using this Idempotent Key "+
			"(that probably means you submitted twice, and the other request is still going through): %s. "+
			"Please try again later.", key),
	}
}

func idempotencyMismatch(key string, first, now fingerprint) *apiError {
	e := &apiError{status: http.StatusBadRequest, Type: typeIdempotency}
	if first.endpoint() != now.endpoint() {
		e.Message = fmt.Sprintf("Keys for idempotent requests can only be used for the same endpoint they were first used for "+
			"('%s' vs '%s'). Try using a key other than '%s' if you meant to execute a different request.",
			first.endpoint(), now.endpoint(), key)
		return e
	}
	e.Message = fmt.Sprintf("Keys for idempotent requests can only be used with the same parameters they were first used with. "+
		"Try using a key other than '%s' if you meant to execute a different request.", key)
	return e
}

// body encodes e the way Stripe sends it: {"error": {...}}.
func (e *apiError) body() []byte {
	return snapshot(struct {
		Error *apiError `json:"error"`
	}{e})
}
