package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/stripesim"
)

// Capture, cancel or refund of a payment still processing (its creation
// answered 503 and has not finished) is 409 payment_processing with
// Retry-After, and nothing is stored for the key: once the creation
// finishes, the same request with the same key runs. It once stored a final
// 400 payment_not_capturable ("never authorised"), replayed forever.
func TestPaymentProcessing_actionsWaitForTheOutcomeAndStoreNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		action  string
		capture bool
		path    func(payment string) string
		body    func(payment string) string
		want    int
		status  string
	}{
		{"capture", false, func(p string) string { return "/v1/payments/" + p + "/capture" }, func(string) string { return "" }, http.StatusOK, "succeeded"},
		{"cancel", false, func(p string) string { return "/v1/payments/" + p + "/cancel" }, func(string) string { return "" }, http.StatusOK, "canceled"},
		{"refund", true, func(string) string { return "/v1/refunds" }, func(p string) string { return `{"payment":"` + p + `"}` }, http.StatusCreated, "succeeded"},
	} {
		t.Run(tc.action, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			create := fmt.Sprintf(`{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","capture":%v}`, tc.capture)
			b.addFault(t, stripesim.FaultError500, 0)
			resp, data := b.post(t, aliceKey, pathPayments, "create", create)
			requireProblem(t, resp, data, http.StatusServiceUnavailable, "payment_processor_unavailable")
			payments := b.list(t, aliceKey, "")
			require.Len(t, payments.Data, 1)
			id := payments.Data[0]["id"].(string)
			require.Equal(t, "processing", payments.Data[0]["status"])

			for range 2 {
				resp, data = b.post(t, aliceKey, tc.path(id), "action", tc.body(id))
				requireProblem(t, resp, data, http.StatusConflict, "payment_processing")
				requireRetryAfter(t, resp)
				require.Empty(t, resp.Header.Get("Idempotent-Replayed"))
			}
			resp, data = b.do(t, http.MethodGet, "/v1/idempotency_keys/action", aliceKey, nil, nil)
			requireProblem(t, resp, data, http.StatusNotFound, "not_found") // nothing stored for the key

			b.createPayment(t, aliceKey, "create", create) // the retry finishes the creation
			resp, data = b.post(t, aliceKey, tc.path(id), "action", tc.body(id))
			require.Equal(t, tc.want, resp.StatusCode, string(data))
			var out struct {
				Status string `json:"status"`
			}
			require.NoError(t, json.Unmarshal(data, &out), string(data))
			require.Equal(t, tc.status, out.Status)
			again, againData := b.post(t, aliceKey, tc.path(id), "action", tc.body(id))
			requireReplayOf(t, resp, data, again, againData)
		})
	}
}
