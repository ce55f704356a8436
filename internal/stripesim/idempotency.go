package stripesim

import (
	"maps"
	"net/url"
	"slices"
	"time"
)

// keyRetention is how long Stripe remembers an idempotency key: keys are
// removed "automatically after they're at least 24 hours old. We generate a
// new request if a key is reused after the original is pruned"
// (docs.stripe.com/idempotency). forgetExpiredKeys drops them, and their
// stored responses with them, as the simulator's clock passes them.
const keyRetention = 24 * time.Hour

// keyScope names an idempotency key: keys are per API key, as at Stripe.
type keyScope struct {
	apiKey string
	key    string
}

// keyEntry is a claimed idempotency key.
type keyEntry struct {
	request fingerprint
	created time.Time
	result  *response // nil while the first request still runs
}

// fingerprint is what a key's later requests must repeat.
type fingerprint struct {
	method string
	path   string
	params url.Values
}

// endpoint names the route, as Stripe's error messages do.
func (f fingerprint) endpoint() string {
	return f.path
}

// matches compares method, path and decoded parameters, ignoring their order.
func (f fingerprint) matches(other fingerprint) bool {
	return f.method == other.method &&
		f.path == other.path &&
		maps.EqualFunc(f.params, other.params, slices.Equal[[]string])
}

// claimKey takes c's idempotency key for c. When it cannot (the key already
// has a result, is held by another request or was used for another request)
// it returns the response to send instead.
func (s *Simulator) claimKey(c *call) (res response, mayExecute bool) {
	s.mu.Lock()
	defer s.mu.Unlock()

	now := s.now()
	s.state.forgetExpiredKeys(now)
	scope := keyScope{apiKey: c.apiKey, key: c.idempotencyKey}
	request := fingerprint{method: c.method, path: c.path, params: c.form}

	entry, ok := s.state.keys[scope]
	switch {
	case !ok:
		c.claim = &keyEntry{request: request, created: now}
		s.state.keys[scope] = c.claim
		s.state.keyOrder = append(s.state.keyOrder, claimedKey{scope, c.claim})
		return response{}, true
	case !entry.request.matches(request):
		return errorResponse(c, idempotencyMismatch(c.idempotencyKey, entry.request, request)), false
	case entry.result == nil:
		return errorResponse(c, idempotencyKeyInUse(c.idempotencyKey)), false
	default:
		replay := *entry.result
		replay.replayed = true
		return replay, false
	}
}

// settleKey stores res under c's key if execution began, and otherwise
// frees the key so that the client may correct the request and reuse it.
func (st *state) settleKey(c *call, res response, executed bool) {
	if executed {
		c.claim.result = &res
		return
	}
	scope := keyScope{apiKey: c.apiKey, key: c.idempotencyKey}
	if st.keys[scope] == c.claim { // a Reset may have replaced it meanwhile
		delete(st.keys, scope)
	}
}

// storeWithoutExecuting answers e and stores it under the key c claimed, as
// if execution had begun and failed: Stripe replays such a 500 to every
// later request with the key (FaultStoredError500).
func (s *Simulator) storeWithoutExecuting(c *call, e *apiError) response {
	s.mu.Lock()
	defer s.mu.Unlock()

	res := errorResponse(c, e)
	if c.claim != nil {
		s.state.settleKey(c, res, true)
	}
	s.changed()
	return res
}

// claimedKey is one claim, in the order keys were claimed.
type claimedKey struct {
	scope keyScope
	entry *keyEntry
}

// forgetExpiredKeys drops keys older than keyRetention. Finished and running
// keys alike: a request running for a day is not worth protecting. Keys are
// claimed in time order, so the expired ones are at the front of keyOrder,
// and a call costs only what it drops (a scan of every key on every call
// made long benchmarks slower and slower).
func (st *state) forgetExpiredKeys(now time.Time) {
	n := 0
	for _, c := range st.keyOrder {
		if now.Sub(c.entry.created) < keyRetention {
			break
		}
		if st.keys[c.scope] == c.entry { // not freed or replaced meanwhile
			delete(st.keys, c.scope)
		}
		n++
	}
	st.keyOrder = st.keyOrder[n:]
}
