package api

import (
	"net/http"

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
	param, ok := pathParam(r, "key")
	key, valid := ParseIdempotencyKey(param)
	if !ok || !valid {
		return recovery.ErrKeyNotFound
	}
	k, err := s.engine.Lookup(r.Context(), userFrom(r.Context()).ID, key)
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
