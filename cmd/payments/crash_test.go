package main_test

// Crash recovery through the real binary: the service is killed at each
// failpoint of the create-payment flow, restarted, and the client's retry
// with the same key must get the one right answer, with one charge at Stripe.

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/users"
)

var simListening = regexp.MustCompile(`Stripe simulator listening on (http://\S+)`)

// startSimulator runs `payments stripesim` on a free port; it outlives the
// service's crashes, as Stripe would.
func startSimulator(t *testing.T) string {
	t.Helper()
	sim := startProc(t, nil, "stripesim", "--addr", "127.0.0.1:0")
	return sim.waitFor(t, &sim.stdout, simListening)
}

// startServe runs `payments serve` against dbURL and the simulator at simURL.
func startServe(t *testing.T, dbURL, simURL string, env ...string) (*proc, string) {
	t.Helper()
	env = append([]string{"DATABASE_URL=" + dbURL, "STRIPE_API_BASE=" + simURL, "STRIPE_SECRET_KEY=",
		"PAYMENTS_ADDR=127.0.0.1:0", "PAYMENTS_LOCK_TIMEOUT=1s", "PAYMENTS_FAILPOINTS="}, env...)
	p := startProc(t, env, "serve")
	return p, "http://" + p.waitFor(t, &p.stderr, listening)
}

// postIdempotent posts body to path with the Idempotency-Key key, as alice;
// err is set when the connection died without an answer.
func postIdempotent(t testing.TB, base, path, key, body string) (int, []byte, error) {
	req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := apiClient(t).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// createPayment posts the same create request every time.
func createPayment(t testing.TB, base, key string) (int, []byte, error) {
	return postIdempotent(t, base, "/v1/payments", key,
		`{"amount":4200,"currency":"eur","payment_method":"pm_card_visa","metadata":{"order":"crash-1"}}`)
}

// retryUntilFinal retries post like a good client: while the answer is 409
// (the dead holder's lock has not lapsed yet) or 503, wait and try again.
func retryUntilFinal(t *testing.T, post func() (int, []byte, error)) (int, []byte) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, data, err := post()
		require.NoError(t, err)
		if status != http.StatusConflict && status != http.StatusServiceUnavailable {
			return status, data
		}
		require.True(t, time.Now().Before(deadline), "still %d: %s", status, data)
		time.Sleep(100 * time.Millisecond)
	}
}

// simPaymentIntents lists the simulator's PaymentIntents made for payment id.
func simPaymentIntents(t *testing.T, simURL, paymentID string) []map[string]any {
	t.Helper()
	resp, err := http.Get(simURL + "/_sim/objects?type=payment_intent")
	require.NoError(t, err)
	defer resp.Body.Close()
	var all []map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&all))
	var mine []map[string]any
	for _, pi := range all {
		if md, ok := pi["metadata"].(map[string]any); ok && md["payment"] == paymentID {
			mine = append(mine, pi)
		}
	}
	return mine
}

// comparable is the part of a payment that is the same on every run.
func comparable(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var p map[string]any
	require.NoError(t, json.Unmarshal(body, &p))
	for _, k := range []string{"id", "stripe_payment_intent", "created"} {
		require.NotEmpty(t, p[k], "field %s", k)
		delete(p, k)
	}
	return p
}

func TestCrash_createPaymentRecoversAtEveryFailpoint(t *testing.T) {
	t.Parallel()
	simURL := startSimulator(t)

	// A clean run, for the answer every crashed run must end with.
	cleanDB := dbtest.NewURL(t)
	seedDemoUsers(t, cleanDB)
	_, base := startServe(t, cleanDB, simURL)
	status, cleanBody, err := createPayment(t, base, "clean-run")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(cleanBody))
	clean := comparable(t, cleanBody)

	failpoints := []string{
		"before_commit:started", "after_commit:started",
		"before_commit:payment_created", "after_commit:payment_created",
		"after_call:payment_intent",
		"before_commit:payment_intent_created", "after_commit:payment_intent_created",
		"before_commit:finished", "after_commit:finished",
	}
	for _, fp := range failpoints {
		t.Run(fp, func(t *testing.T) {
			t.Parallel()
			dbURL := dbtest.NewURL(t)
			seedDemoUsers(t, dbURL)
			key := "crash-" + fp

			doomed, base := startServe(t, dbURL, simURL, "PAYMENTS_FAILPOINTS="+fp+"=crash")
			_, _, err := createPayment(t, base, key)
			require.Error(t, err, "the process dies before it can answer")
			select {
			case <-doomed.exited:
			case <-time.After(10 * time.Second):
				t.Fatal("the service did not crash")
			}
			require.Equal(t, -1, doomed.cmd.ProcessState.ExitCode(), "killed by a signal")

			_, base = startServe(t, dbURL, simURL)
			status, body := retryUntilFinal(t, func() (int, []byte, error) { return createPayment(t, base, key) })
			require.Equal(t, http.StatusCreated, status, string(body))
			require.Equal(t, clean, comparable(t, body), "the same answer as a clean run")

			var pay struct{ ID, StripePaymentIntent string }
			require.NoError(t, json.Unmarshal(body, &pay))
			pis := simPaymentIntents(t, simURL, pay.ID)
			require.Len(t, pis, 1, "Stripe saw one PaymentIntent for the payment")

			status, replay, err := createPayment(t, base, key)
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, status)
			require.Equal(t, string(body), string(replay), "later retries replay the same answer")
		})
	}
}

func seedDemoUsers(t *testing.T, dbURL string) {
	t.Helper()
	pool := dbtestPool(t, dbURL)
	require.NoError(t, users.SeedDemoUsers(context.Background(), pool))
}
