package main_test

// Crash recovery of the refund flow through the real binary: a captured
// payment is refunded by a service that is killed at one of the flow's
// failpoints; after a restart the client's retry with the same key must get
// the refund, with exactly one refund at Stripe.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/dbtest"
)

// postRefund posts a refund with the Idempotency-Key key.
func postRefund(t testing.TB, base, key, body string) (int, []byte, error) {
	return postIdempotent(t, base, "/v1/refunds", key, body)
}

// simRefunds lists the simulator's refunds of a PaymentIntent.
func simRefunds(t *testing.T, simURL, intent string) []map[string]any {
	t.Helper()
	resp, err := http.Get(simURL + "/_sim/objects?type=refund")
	require.NoError(t, err)
	defer resp.Body.Close()
	var all []map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&all))
	var mine []map[string]any
	for _, re := range all {
		if re["payment_intent"] == intent {
			mine = append(mine, re)
		}
	}
	return mine
}

func TestCrash_refundRecoversAtEveryFailpoint(t *testing.T) {
	t.Parallel()
	simURL := startSimulator(t)

	failpoints := []string{
		"before_commit:started", "after_commit:started",
		"before_commit:refund_created", "after_commit:refund_created",
		"after_call:refund",
		"before_commit:stripe_refund_created", "after_commit:stripe_refund_created",
		"before_commit:finished", "after_commit:finished",
	}
	for _, fp := range failpoints {
		t.Run(fp, func(t *testing.T) {
			t.Parallel()
			dbURL := dbtest.NewURL(t)
			seedDemoUsers(t, dbURL)

			// The payment is made and captured by a healthy service: the
			// finished failpoints fire in every flow.
			_, base := startServe(t, dbURL, simURL)
			status, created, err := createPayment(t, base, "order-"+fp)
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, status, string(created))
			var pay struct {
				ID                  string `json:"id"`
				StripePaymentIntent string `json:"stripe_payment_intent"`
				AmountCaptured      int64  `json:"amount_captured"`
			}
			require.NoError(t, json.Unmarshal(created, &pay))
			require.EqualValues(t, 4200, pay.AmountCaptured)

			key := "refund-" + fp
			body := fmt.Sprintf(`{"payment":%q,"amount":1500,"reason":"requested_by_customer"}`, pay.ID)
			doomed, doomedBase := startServe(t, dbURL, simURL, "PAYMENTS_FAILPOINTS="+fp+"=crash")
			_, _, err = postRefund(t, doomedBase, key, body)
			require.Error(t, err, "the process dies before it can answer")
			select {
			case <-doomed.exited:
			case <-time.After(10 * time.Second):
				t.Fatal("the service did not crash")
			}
			require.Equal(t, -1, doomed.cmd.ProcessState.ExitCode(), "killed by a signal")

			_, base = startServe(t, dbURL, simURL)
			status, answer := retryUntilFinal(t, func() (int, []byte, error) { return postRefund(t, base, key, body) })
			require.Equal(t, http.StatusCreated, status, string(answer))
			var re struct {
				ID           string  `json:"id"`
				Object       string  `json:"object"`
				Payment      string  `json:"payment"`
				Amount       int64   `json:"amount"`
				Status       string  `json:"status"`
				StripeRefund string  `json:"stripe_refund"`
				Reason       *string `json:"reason"`
			}
			require.NoError(t, json.Unmarshal(answer, &re))
			require.Equal(t, "refund", re.Object)
			require.Equal(t, pay.ID, re.Payment)
			require.EqualValues(t, 1500, re.Amount)
			require.Equal(t, "succeeded", re.Status)
			require.Equal(t, "requested_by_customer", *re.Reason)

			refunds := simRefunds(t, simURL, pay.StripePaymentIntent)
			require.Len(t, refunds, 1, "Stripe saw one refund for the payment")
			require.Equal(t, re.StripeRefund, refunds[0]["id"])
			require.EqualValues(t, 1500, refunds[0]["amount"])
			require.Equal(t, re.ID, refunds[0]["metadata"].(map[string]any)["refund"])

			status, got := get(t, base+"/v1/payments/"+pay.ID, aliceKey)
			require.Equal(t, http.StatusOK, status, got)
			var after struct {
				AmountRefunded int64 `json:"amount_refunded"`
			}
			require.NoError(t, json.Unmarshal([]byte(got), &after))
			require.EqualValues(t, 1500, after.AmountRefunded)

			status, got = get(t, base+"/v1/refunds/"+re.ID, aliceKey)
			require.Equal(t, http.StatusOK, status, got)
			require.JSONEq(t, string(answer), got, "GET shows the refund the retry answered")
			status, got = get(t, base+"/v1/idempotency_keys/"+url.PathEscape(key), aliceKey)
			require.Equal(t, http.StatusOK, status, got)
			require.Contains(t, got, `"recovery_point":"finished"`)

			status, replay, err := postRefund(t, base, key, body)
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, status)
			require.Equal(t, string(answer), string(replay), "later retries replay the same answer")
		})
	}
}
