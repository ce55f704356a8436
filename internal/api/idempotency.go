package api

import (
	"net/http"
	"strings"

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
func readIdempotent(r *http.Request, dst any, allowEmpty bool) (payments.KeyedRequest, error) {
	key, err := idempotencyKey(r)
	if err != nil {
		return payments.KeyedRequest{}, err
	}
	body, err := readBody(r)
	if err != nil {
		return payments.KeyedRequest{}, err
	}
	// The request is what decodeJSON took: the body without its null
	// fields, fingerprinted and stored as such.
	body, err = decodeJSON(body, dst, allowEmpty)
	if err != nil {
		return payments.KeyedRequest{}, err
	}
	return payments.KeyedRequest{
		UserID: userFrom(r.Context()).ID, Key: key, Method: r.Method, Path: r.URL.Path, Body: body,
	}, nil
}

// writeExecution answers with what the engine returned: the final response
// (marked when replayed), or the problem its error means (problemFor).
func (s *Server) writeExecution(w http.ResponseWriter, r *http.Request, resp recovery.Response, err error) {
	if err != nil {
		s.writeError(w, r, err)
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
