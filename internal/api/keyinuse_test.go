package api_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/stripesim"
)

// The README's crash walkthrough: a request's process died holding its
// key's lock. Retries get 409 idempotency_key_in_use until the lock lapses;
// Retry-After used to say 1 s all along (90 s of retries every second).
// Once the holder is overdue with renewing its lock, Retry-After says when
// the lock lapses; while the holder renews it, soon.
func TestKeyInUse_retryAfterSaysWhenADeadHoldersLockLapses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const body = `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`
	b.addFault(t, stripesim.FaultError500, 0)
	resp, data := b.post(t, aliceKey, pathPayments, "dead-holder", body)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(data))

	lock := func(age, left string) {
		t.Helper()
		_, err := b.pool.Exec(context.Background(), `UPDATE idempotency_keys
			SET locked_at = now() - $1::interval, lock_expires_at = now() + $2::interval WHERE idempotency_key = 'dead-holder'`, age, left)
		require.NoError(t, err)
	}
	retryAfter := func() int {
		t.Helper()
		resp, data := b.post(t, aliceKey, pathPayments, "dead-holder", body)
		requireProblem(t, resp, data, http.StatusConflict, "idempotency_key_in_use")
		seconds, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		require.NoError(t, err, "Retry-After %q", resp.Header.Get("Retry-After"))
		return seconds
	}

	lock("60 seconds", "30 seconds") // a 90 s lock its holder last renewed 60 s ago
	require.InDelta(t, 30, retryAfter(), 1, "when the lock lapses")
	lock("5 seconds", "85 seconds") // renewed 5 s ago: the holder is alive
	require.Equal(t, 1, retryAfter())
}
