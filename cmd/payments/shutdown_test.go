package main_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/dbtest"
)

// Issue 20, item 9: SIGTERM while a request waits on Stripe. The process
// gives in-flight requests --shutdown-timeout to finish, then cancels the
// rest: the client gets 503 with Retry-After (not an empty reply), the key
// is unlocked (not left locked for the lock timeout with nobody
// heartbeating it), and a retry sent to another instance at once resumes it,
// with one PaymentIntent at Stripe.
//
// Two places a request can be stuck: waiting on Stripe (a slow answer), and
// in the transaction that records Stripe's answer (a failpoint sleeps before
// its commit, which then runs on the cancelled context).
func TestServe_SIGTERMCancelsStuckRequestsAnswers503AndUnlocksTheirKeys(t *testing.T) {
	t.Parallel()
	for name, stuck := range map[string]struct{ fault, failpoints string }{
		"at Stripe":        {fault: `{"path_prefix":"/v1/payment_intents","method":"POST","kind":"delay","delay_ms":6000,"count":1}`},
		"in a transaction": {failpoints: "before_commit:payment_intent_created=sleep:3000"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sigtermWhileStuck(t, stuck.fault, stuck.failpoints)
		})
	}
}

func sigtermWhileStuck(t *testing.T, fault, failpoints string) {
	simURL := startSimulator(t)
	dbURL := dbtest.NewURL(t)
	seedDemoUsers(t, dbURL)
	// A lock timeout far longer than the test: only an unlock lets the
	// retry in at once.
	first, base := startServe(t, dbURL, simURL, "PAYMENTS_LOCK_TIMEOUT=90s", "PAYMENTS_SHUTDOWN_TIMEOUT=1s",
		"PAYMENTS_FAILPOINTS="+failpoints)
	if fault != "" {
		addSimFault(t, simURL, fault)
	}

	type answer struct {
		status     int
		body       []byte
		retryAfter string
		err        error
	}
	answered := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/payments", strings.NewReader(`{"amount":4200,"currency":"eur","payment_method":"pm_card_visa"}`))
		req.Header.Set("Authorization", "Bearer "+aliceKey)
		req.Header.Set("Idempotency-Key", "sigterm-mid-stripe")
		req.Header.Set("Content-Type", "application/json")
		resp, err := apiClient(t).Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		var a answer
		a.status, a.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
		a.body, a.err = io.ReadAll(resp.Body)
		answered <- a
	}()
	waitForKey(t, base, "sigterm-mid-stripe", "payment_created")

	sent := time.Now()
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGTERM))
	var a answer
	select {
	case a = <-answered:
	case <-time.After(15 * time.Second):
		t.Fatal("no answer within 15 s of SIGTERM")
	}
	require.NoError(t, a.err, "the client gets an answer, not an empty reply")
	require.Equal(t, http.StatusServiceUnavailable, a.status, string(a.body))
	var p struct{ Code string }
	require.NoError(t, json.Unmarshal(a.body, &p))
	require.Equal(t, "payment_processor_unavailable", p.Code)
	require.NotEmpty(t, a.retryAfter)
	require.Less(t, time.Since(sent), 10*time.Second, "answered soon after the shutdown timeout")
	select {
	case <-first.exited:
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not exit after SIGTERM")
	}
	require.Zero(t, first.cmd.ProcessState.ExitCode(), "a shutdown that cancelled requests is still a clean one")

	// Another instance: the key is unlocked, so the retry resumes it at once
	// (a locked key would answer 409 for 90 s).
	_, base2 := startServe(t, dbURL, simURL, "PAYMENTS_LOCK_TIMEOUT=90s")
	code, body := get(t, base2+"/v1/idempotency_keys/"+url.PathEscape("sigterm-mid-stripe"), aliceKey)
	require.Equal(t, http.StatusOK, code, body)
	var state struct {
		Locked        bool   `json:"locked"`
		RecoveryPoint string `json:"recovery_point"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &state))
	require.False(t, state.Locked, "the cancelled request left its key unlocked")
	require.Equal(t, "payment_created", state.RecoveryPoint)

	status, data := retryUntilFinal(t, func() (int, []byte, error) {
		return postIdempotent(t, base2, "/v1/payments", "sigterm-mid-stripe", `{"amount":4200,"currency":"eur","payment_method":"pm_card_visa"}`)
	})
	require.Equal(t, http.StatusCreated, status, string(data))
	require.Len(t, simPaymentIntents(t, simURL, paymentID(t, data)), 1, "one PaymentIntent")
}

// The worker's side of item 9: SIGTERM while the completer waits on
// Stripe. River lets running jobs finish for --shutdown-timeout, then
// cancels them; the completer's attempt unlocks its key, so the next
// process resumes it at once instead of after the lock timeout.
func TestWorker_SIGTERMCancelsACompleterStuckAtStripeAndUnlocksTheKey(t *testing.T) {
	t.Parallel()
	simURL := startSimulator(t)
	dbURL := dbtest.NewURL(t)
	seedDemoUsers(t, dbURL)
	doomed, base := startServe(t, dbURL, simURL, "PAYMENTS_FAILPOINTS=after_commit:payment_created=crash")
	_, _, err := createPayment(t, base, "worker-sigterm")
	require.Error(t, err)
	<-doomed.exited

	addSimFault(t, simURL, `{"path_prefix":"/v1/payment_intents","method":"POST","kind":"delay","delay_ms":8000,"count":1}`)
	worker := startProc(t, []string{"DATABASE_URL=" + dbURL, "STRIPE_API_BASE=" + simURL, "STRIPE_SECRET_KEY=",
		"PAYMENTS_LOCK_TIMEOUT=90s", "PAYMENTS_COMPLETER_INTERVAL=200ms", "PAYMENTS_COMPLETER_GRACE=100ms",
		"PAYMENTS_SHUTDOWN_TIMEOUT=1s", "PAYMENTS_FAILPOINTS=", "PAYMENTS_METRICS_ADDR=127.0.0.1:0"}, "worker")
	worker.waitFor(t, &worker.stderr, metricsListening)

	pool := dbtestPool(t, dbURL)
	locked := func() bool {
		var locked bool
		require.NoError(t, pool.QueryRow(t.Context(),
			"SELECT locked_at IS NOT NULL FROM idempotency_keys WHERE idempotency_key = 'worker-sigterm'").Scan(&locked))
		return locked
	}
	// The crashed request left the key locked for 1 s (startServe's lock
	// timeout); wait for the completer to take it and call Stripe.
	require.Eventually(t, func() bool {
		for _, r := range simRequests(t, simURL) {
			if r.Path == "/v1/payment_intents" && r.Method == http.MethodPost {
				return locked()
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "the completer is at Stripe")

	require.Zero(t, worker.signalAndWait(t, syscall.SIGTERM), "a clean exit")
	require.False(t, locked(), "the cancelled completer unlocked the key")
}

// simRequest is one entry of the simulator's request log, logged on arrival.
type simRequest struct {
	Method string `json:"method"`
	Path   string `json:"path"`
}

func simRequests(t *testing.T, simURL string) []simRequest {
	t.Helper()
	resp, err := http.Get(simURL + "/_sim/requests")
	require.NoError(t, err)
	defer resp.Body.Close()
	var log []simRequest
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&log))
	return log
}
