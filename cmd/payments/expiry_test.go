package main_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/dbtest"
)

// addSimFault adds one fault to the simulator at simURL (API.md section 4).
func addSimFault(t *testing.T, simURL, fault string) {
	t.Helper()
	resp, err := http.Post(simURL+"/_sim/faults", "application/json", bytes.NewBufferString(fault))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// The second charge of issue 14: Stripe's answer was lost, the request
// answered 503, and a retry finished it after the key's TTL had run out
// since the claim. The next retry must replay that answer (rule 8: a key
// expires a TTL after its final answer was stored), not run the request,
// and charge, again.
func TestServe_aKeyThatFinishesAfterItsTTLIsReplayedNotRunAgain(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	simURL := startSimulator(t)
	dbURL := dbtest.NewURL(t)
	seedDemoUsers(t, dbURL)
	_, base := startServe(t, dbURL, simURL, "PAYMENTS_IDEMPOTENCY_KEY_TTL="+ttl.String())

	addSimFault(t, simURL, `{"path_prefix":"/v1/payment_intents","method":"POST","kind":"lost_response","count":1}`)
	status, data, err := createPayment(t, base, "late-finish")
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, status, string(data))

	// Real time must pass: the binary reads the real clock. The key is
	// unfinished, so it must not expire meanwhile.
	time.Sleep(ttl + 500*time.Millisecond)
	status, first, err := createPayment(t, base, "late-finish")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(first))
	finished := time.Now()

	status, again, err := createPayment(t, base, "late-finish")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(again))
	require.Equal(t, first, again, "replayed byte for byte")

	var pay struct{ ID string }
	require.NoError(t, json.Unmarshal(first, &pay))
	require.Len(t, simPaymentIntents(t, simURL, pay.ID), 1, "one PaymentIntent")
	pool := dbtestPool(t, dbURL)
	var payments int
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM payments").Scan(&payments))
	require.Equal(t, 1, payments)

	code, body := get(t, base+"/v1/idempotency_keys/"+url.PathEscape("late-finish"), aliceKey)
	require.Equal(t, http.StatusOK, code, body)
	var k struct {
		ExpiresAt int64 `json:"expires_at"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &k))
	require.InDelta(t, finished.Add(ttl).Unix(), k.ExpiresAt, 1, "a TTL after the finish")
}
