package api_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stripesim"
)

// Rule 7: a key unfinished past Stripe's idempotency window with nothing
// found at Stripe answers 409 idempotency_key_needs_attention, without
// Retry-After (retrying cannot help: an operator must re-drive it), and
// keeps answering so; it once answered 500 internal.
func TestIdempotency_keyPastStripesWindowNeedsAttention(t *testing.T) {
	t.Parallel()
	var now atomic.Pointer[time.Time]
	start := time.Now()
	now.Store(&start)
	b := setup(t, setupOpts{engine: recovery.Config{Now: func() time.Time { return *now.Load() }}})

	// Stripe fails before making the PaymentIntent: the key waits at payment_created.
	b.addFault(t, stripesim.FaultError500, 0)
	resp, data := b.post(t, aliceKey, pathPayments, "old-key", visaBody)
	requireProblem(t, resp, data, http.StatusServiceUnavailable, "payment_processor_unavailable")

	later := start.Add(25 * time.Hour) // Stripe may have forgotten the child key by now
	now.Store(&later)
	for range 2 {
		resp, data = b.post(t, aliceKey, pathPayments, "old-key", visaBody)
		requireProblem(t, resp, data, http.StatusConflict, "idempotency_key_needs_attention")
		require.Empty(t, resp.Header.Get("Retry-After"), "retrying cannot help")
		require.Contains(t, string(data), "payments keys retry")
	}
	require.Len(t, b.simRequests(http.MethodPost, "/v1/payment_intents"), 1, "the creation was not sent to Stripe again")
}
