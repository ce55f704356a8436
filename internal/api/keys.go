package api

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/go-chi/chi/v5"

	"github.com/example/payments/internal/problem"
	"github.com/example/payments/internal/recovery"
)

// keyObject is the idempotency-key state of API.md.
type keyObject struct {
	Object        string `json:"object"`
	Key           string `json:"key"`
	RecoveryPoint string `json:"recovery_point"`
	Locked        bool   `json:"locked"`
	RequestMethod string `json:"request_method"`
	RequestPath   string `json:"request_path"`
	ResponseCode  *int   `json:"response_code"`
	Created       int64  `json:"created"`
	// ExpiresAt is a TTL after the final answer was stored; null while the
	// request is unfinished, since such a key never expires (rule 8).
	ExpiresAt *int64 `json:"expires_at"`
}

// getIdempotencyKey answers GET /v1/idempotency_keys/{key}: where one of the
// caller's requests stands.
func (s *Server) getIdempotencyKey(w http.ResponseWriter, r *http.Request) error {
	key, ok := ParseIdempotencyKey(keyParam(r))
	if !ok {
		return problem.New(http.StatusNotFound, problem.NotFound, "No such idempotency key.")
	}
	k, err := s.engine.Lookup(r.Context(), userFrom(r.Context()).ID, key)
	if errors.Is(err, recovery.ErrKeyNotFound) {
		return problem.New(http.StatusNotFound, problem.NotFound, "No such idempotency key.")
	}
	if err != nil {
		return err
	}
	obj := keyObject{
		Object: "idempotency_key", Key: k.Key, RecoveryPoint: string(k.RecoveryPoint), Locked: k.Locked,
		RequestMethod: k.Method, RequestPath: k.Path, Created: k.Created.Unix(),
	}
	if k.ResponseCode != 0 {
		obj.ResponseCode = &k.ResponseCode
	}
	if !k.Expires.IsZero() {
		expires := k.Expires.Unix()
		obj.ExpiresAt = &expires
	}
	writeJSON(w, http.StatusOK, obj)
	return nil
}

// keyParam is the {key} of the path, unescaped. chi routes on r.URL.RawPath
// when it is set, that is when the path holds escapes its decoded form cannot
// reproduce (a key holding "/" arrives as %2F), and its parameters are then
// still escaped.
func keyParam(r *http.Request) string {
	key := chi.URLParam(r, "key")
	if r.URL.RawPath == "" {
		return key
	}
	unescaped, err := url.PathUnescape(key)
	if err != nil {
		return "" // not a key: 404
	}
	return unescaped
}
