package api

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/problem"
	"github.com/example/payments/internal/recovery"
)

// MaxIdempotencyKeyLength is the longest key accepted, as at Stripe.
const MaxIdempotencyKeyLength = 255

// echoIdempotencyKey repeats a request's Idempotency-Key on its response,
// whatever the response is.
func echoIdempotencyKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if key := r.Header.Get("Idempotency-Key"); key != "" {
			w.Header().Set("Idempotency-Key", key)
		}
		next.ServeHTTP(w, r)
	})
}

// idempotencyKey reads the Idempotency-Key header: 1 to 255 visible ASCII
// characters, bare or as an RFC 8941 string ("abc" names the key abc).
func idempotencyKey(r *http.Request) (string, error) {
	values := r.Header.Values("Idempotency-Key")
	switch {
	// Only an absent header is missing; one sent empty is invalid (a key is 1 to 255 characters).
	case len(values) == 0:
		return "", problem.New(http.StatusBadRequest, problem.IdempotencyKeyMissing,
			"Send an Idempotency-Key header with every POST: a unique value (a UUID, say) per logical request.")
	case len(values) > 1:
		return "", problem.New(http.StatusBadRequest, problem.IdempotencyKeyInvalid, "Send one Idempotency-Key header, not %d.", len(values))
	}
	key, ok := ParseIdempotencyKey(values[0])
	if !ok {
		return "", problem.New(http.StatusBadRequest, problem.IdempotencyKeyInvalid,
			"An Idempotency-Key is 1 to %d visible ASCII characters (no spaces), bare or in double quotes.", MaxIdempotencyKeyLength)
	}
	return key, nil
}

// ParseIdempotencyKey returns the key a header value names, and whether it
// is valid. A value in double quotes is an RFC 8941 sf-string, whose
// backslash escapes (\" and \\) are undone.
func ParseIdempotencyKey(value string) (string, bool) {
	key := value
	if strings.HasPrefix(value, `"`) {
		var ok bool
		if key, ok = unquoteSFString(value); !ok {
			return "", false
		}
	}
	if len(key) == 0 || len(key) > MaxIdempotencyKeyLength {
		return "", false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return "", false
		}
	}
	return key, true
}

// unquoteSFString parses an RFC 8941 sf-string: DQUOTE *chr DQUOTE, where
// chr is a printable ASCII character other than " and \, or one of them
// escaped with a backslash. Nothing may follow the closing quote.
func unquoteSFString(s string) (string, bool) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			i++
			if i >= len(s) || (s[i] != '"' && s[i] != '\\') {
				return "", false
			}
			b.WriteByte(s[i])
		case c == '"':
			return b.String(), i == len(s)-1
		case c < 0x20 || c > 0x7e:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return "", false // no closing quote
}

// readIdempotent reads what every idempotent route starts with, in this
// order: the Idempotency-Key, then the JSON body, decoded into dst (an empty
// body only when allowEmpty). It returns what the route passes to its flow.
func readIdempotent(r *http.Request, dst any, allowEmpty bool) (payments.Idempotent, error) {
	key, err := idempotencyKey(r)
	if err != nil {
		return payments.Idempotent{}, err
	}
	body, err := readBody(r)
	if err != nil {
		return payments.Idempotent{}, err
	}
	if err := decodeJSON(body, dst, allowEmpty); err != nil {
		return payments.Idempotent{}, err
	}
	return payments.Idempotent{
		UserID: userFrom(r.Context()).ID, Key: key, Method: r.Method, Path: r.URL.Path, Body: body,
	}, nil
}

// writeExecution answers with what the engine returned: the final response
// (marked when replayed), or the problem its error means.
func (s *Server) writeExecution(w http.ResponseWriter, r *http.Request, resp recovery.Response, err error) {
	if err != nil {
		s.writeError(w, r, executionProblem(err))
		return
	}
	contentType := "application/json"
	if resp.Status >= 400 {
		contentType = problem.ContentType
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Cache-Control", "no-store")
	if resp.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// executionProblem turns the engine's errors into answers. Anything else
// stays an error: the key is resumable and the client gets a 500.
func executionProblem(err error) error {
	switch {
	case errors.Is(err, recovery.ErrKeyReused):
		return problem.New(http.StatusUnprocessableEntity, problem.IdempotencyKeyReused,
			"This Idempotency-Key was first used for a different request (method, path or body). Use a new key for a new request.")
	case errors.Is(err, recovery.ErrKeyInUse), errors.Is(err, recovery.ErrLockLost):
		return problem.New(http.StatusConflict, problem.IdempotencyKeyInUse,
			"A request with this Idempotency-Key is in progress. Retry with the same key shortly.").WithRetryAfter(1)
	case errors.Is(err, db.ErrSerialization):
		// Conflicts with requests for other keys, which kept the database
		// from running this one within its time budget: not 409, since no
		// other request holds this key (rule 5). Like an unreachable Stripe,
		// nothing final was stored, and a retry resumes.
		return problem.New(http.StatusServiceUnavailable, problem.PaymentProcessorUnavailable,
			"The service was too busy to run this request. Nothing is lost: retry with the same Idempotency-Key and the request resumes where it stopped.").WithRetryAfter(1)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The request's context ended before its work did: the process is
		// shutting down (it cancels what is still running at its shutdown
		// timeout), or the client went away. The engine unlocked the key at
		// its last recovery point, so a retry to any instance resumes it.
		return problem.New(http.StatusServiceUnavailable, problem.PaymentProcessorUnavailable,
			"The request was interrupted before it finished (the service may be restarting). Nothing is lost: retry with the same Idempotency-Key and the request resumes where it stopped.").WithRetryAfter(1)
	case recovery.IsTransient(err):
		return problem.New(http.StatusServiceUnavailable, problem.PaymentProcessorUnavailable,
			"The payment processor could not be reached. Nothing is lost: retry with the same Idempotency-Key and the request resumes where it stopped.").WithRetryAfter(2)
	default:
		return err
	}
}
