package api_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const authoriseBody = `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","capture":false}`

func capturePath(id string) string { return "/v1/payments/" + id + "/capture" }
func cancelPath(id string) string  { return "/v1/payments/" + id + "/cancel" }

func TestCapture_authoriseThenCaptureAndReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)

	auth := b.createPayment(t, aliceKey, "auth-1", authoriseBody)
	require.Equal(t, "requires_capture", auth.Status)
	require.False(t, auth.Captured)
	require.Zero(t, auth.AmountCaptured)
	require.NotNil(t, auth.StripePaymentIntent)
	intents := b.simIntentsFor(t, auth.ID)
	require.Len(t, intents, 1)
	require.Equal(t, "requires_capture", intents[0].Status)

	first, firstBody := b.post(t, aliceKey, capturePath(auth.ID), "capture-1", "")
	require.Equal(t, http.StatusOK, first.StatusCode, string(firstBody))
	captured := decodePayment(t, firstBody)
	require.Equal(t, auth.ID, captured.ID)
	require.Equal(t, "succeeded", captured.Status)
	require.True(t, captured.Captured)
	require.EqualValues(t, 2000, captured.AmountCaptured)
	require.Equal(t, "succeeded", b.simIntentsFor(t, auth.ID)[0].Status)
	require.Equal(t, "succeeded", b.getPayment(t, aliceKey, auth.ID).Status)

	again, againBody := b.post(t, aliceKey, capturePath(auth.ID), "capture-1", "")
	requireReplayOf(t, first, firstBody, again, againBody)
	again, againBody = b.post(t, aliceKey, capturePath(auth.ID), "capture-1", "{ }")
	requireReplayOf(t, first, firstBody, again, againBody)
	require.Len(t, b.simRequests(http.MethodPost, "/v1/payment_intents/"+*auth.StripePaymentIntent+"/capture"), 1)

	k := b.keyState(t, aliceKey, "capture-1")
	require.Equal(t, capturePath(auth.ID), k.RequestPath)
	require.Equal(t, http.StatusOK, *k.ResponseCode)
}

func TestCapture_partialAmount(t *testing.T) {
	t.Parallel()
	b := setup(t)
	auth := b.createPayment(t, aliceKey, "auth-1", authoriseBody)

	resp, data := b.post(t, aliceKey, capturePath(auth.ID), "capture-1", `{"amount":500}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))
	pay := decodePayment(t, data)
	require.Equal(t, "succeeded", pay.Status)
	require.EqualValues(t, 2000, pay.Amount)
	require.EqualValues(t, 500, pay.AmountCaptured)
	require.EqualValues(t, 500, b.simIntentsFor(t, auth.ID)[0].AmountReceived)

	resp, data = b.post(t, aliceKey, capturePath(auth.ID), "capture-1", `{"amount":600}`)
	requireProblem(t, resp, data, http.StatusUnprocessableEntity, "idempotency_key_reused")
}

// A capture the payment's state does not allow is decided inside the flow:
// a final answer, stored and replayed.
func TestCapture_ofASucceededPaymentIsNotCapturableAndStored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pay := b.createPayment(t, aliceKey, "order-1", visaBody)

	first, firstBody := b.post(t, aliceKey, capturePath(pay.ID), "capture-1", "")
	requireProblem(t, first, firstBody, http.StatusBadRequest, "payment_not_capturable")
	again, againBody := b.post(t, aliceKey, capturePath(pay.ID), "capture-1", "")
	requireReplayOf(t, first, firstBody, again, againBody)

	k := b.keyState(t, aliceKey, "capture-1")
	require.Equal(t, "finished", k.RecoveryPoint)
	require.Equal(t, http.StatusBadRequest, *k.ResponseCode)
	require.Equal(t, "succeeded", b.getPayment(t, aliceKey, pay.ID).Status)
	require.Empty(t, b.stagedJobs(t, "alice@example.com", "capture-1"))
}

// Input the handler refuses before any work (validation) is not stored.
func TestCapture_amountAboveTheAuthorisedIsNotStored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	auth := b.createPayment(t, aliceKey, "auth-1", authoriseBody)

	for _, body := range []string{`{"amount":2001}`, `{"amount":0}`, `{"amount":-1}`, `{"amount":"5"}`, `{"amout":5}`, `{"amount":5`} {
		resp, data := b.post(t, aliceKey, capturePath(auth.ID), "capture-1", body)
		requireProblem(t, resp, data, http.StatusBadRequest, "validation_failed")
	}
	resp, data := b.do(t, http.MethodGet, "/v1/idempotency_keys/capture-1", aliceKey, nil, nil)
	requireProblem(t, resp, data, http.StatusNotFound, "not_found")
	require.Equal(t, "requires_capture", b.getPayment(t, aliceKey, auth.ID).Status)

	resp, data = b.post(t, aliceKey, capturePath(auth.ID), "capture-1", `{"amount":2000}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))
	require.EqualValues(t, 2000, decodePayment(t, data).AmountCaptured)
}

func TestCapture_anotherUsersPaymentIsNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bobs := b.createPayment(t, bobKey, "auth-1", authoriseBody)

	for _, path := range []string{capturePath(bobs.ID), cancelPath(bobs.ID), capturePath("pay_nope"), cancelPath("pay_nope")} {
		resp, data := b.post(t, aliceKey, path, "action-1", "")
		requireProblem(t, resp, data, http.StatusNotFound, "not_found")
	}
	resp, data := b.do(t, http.MethodGet, "/v1/idempotency_keys/action-1", aliceKey, nil, nil)
	requireProblem(t, resp, data, http.StatusNotFound, "not_found")
	require.Equal(t, "requires_capture", b.getPayment(t, bobKey, bobs.ID).Status)
	require.Len(t, b.sim.Requests(), 1, "only bob's creation reached Stripe")
}

func TestCancel_releasesTheAuthorisation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	auth := b.createPayment(t, aliceKey, "auth-1", authoriseBody)

	first, firstBody := b.post(t, aliceKey, cancelPath(auth.ID), "cancel-1", "")
	require.Equal(t, http.StatusOK, first.StatusCode, string(firstBody))
	pay := decodePayment(t, firstBody)
	require.Equal(t, "canceled", pay.Status)
	require.False(t, pay.Captured)
	require.Equal(t, "canceled", b.simIntentsFor(t, auth.ID)[0].Status)
	again, againBody := b.post(t, aliceKey, cancelPath(auth.ID), "cancel-1", "")
	requireReplayOf(t, first, firstBody, again, againBody)

	resp, data := b.post(t, aliceKey, capturePath(auth.ID), "capture-1", "")
	requireProblem(t, resp, data, http.StatusBadRequest, "payment_not_capturable")
	resp, data = b.post(t, aliceKey, cancelPath(auth.ID), "cancel-2", "")
	requireProblem(t, resp, data, http.StatusBadRequest, "payment_not_capturable")
	require.Equal(t, "canceled", b.getPayment(t, aliceKey, auth.ID).Status)
}

func TestCancel_afterCaptureIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	auth := b.createPayment(t, aliceKey, "auth-1", authoriseBody)
	resp, data := b.post(t, aliceKey, capturePath(auth.ID), "capture-1", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))

	first, firstBody := b.post(t, aliceKey, cancelPath(auth.ID), "cancel-1", "")
	requireProblem(t, first, firstBody, http.StatusBadRequest, "payment_not_capturable")
	again, againBody := b.post(t, aliceKey, cancelPath(auth.ID), "cancel-1", "")
	requireReplayOf(t, first, firstBody, again, againBody)
	pay := b.getPayment(t, aliceKey, auth.ID)
	require.Equal(t, "succeeded", pay.Status)
	require.EqualValues(t, 2000, pay.AmountCaptured)
	require.Equal(t, "succeeded", b.simIntentsFor(t, auth.ID)[0].Status)
}

func TestGetPayment_ownOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	resp, created := b.post(t, aliceKey, pathPayments, "order-1",
		`{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","description":"two mugs","metadata":{"order_id":"42"}}`)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(created))
	want := decodePayment(t, created)
	require.Equal(t, "two mugs", *want.Description)
	require.Equal(t, map[string]string{"order_id": "42"}, want.Metadata)
	require.Nil(t, want.FailureCode)
	require.Nil(t, want.FailureMessage)
	require.InDelta(t, time.Now().Unix(), want.Created, 60)

	got := b.getPayment(t, aliceKey, want.ID)
	require.Equal(t, want, got, "GET shows what the create answered")

	resp, data := b.do(t, http.MethodGet, "/v1/payments/"+want.ID, bobKey, nil, nil)
	requireProblem(t, resp, data, http.StatusNotFound, "not_found")
	resp, data = b.do(t, http.MethodGet, "/v1/payments/pay_nope", aliceKey, nil, nil)
	requireProblem(t, resp, data, http.StatusNotFound, "not_found")
}

func TestGetIdempotencyKey_state(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createPayment(t, aliceKey, "order-1", visaBody)

	resp, data := b.do(t, http.MethodGet, "/v1/idempotency_keys/order-1", aliceKey, nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	k := b.keyState(t, aliceKey, "order-1")
	created := k.Created
	require.InDelta(t, time.Now().Unix(), created, 60)
	status := http.StatusCreated
	require.NotNil(t, k.ExpiresAt)
	require.InDelta(t, created+24*60*60, *k.ExpiresAt, 1, "a TTL after the answer was stored, the instant the request ran")
	require.Equal(t, keyState{
		Object: "idempotency_key", Key: "order-1", RecoveryPoint: "finished", Locked: false,
		RequestMethod: "POST", RequestPath: "/v1/payments", ResponseCode: &status,
		Created: created, ExpiresAt: k.ExpiresAt,
	}, k)
	require.Equal(t, k, b.keyState(t, aliceKey, `"order-1"`), "the quoted form names the key here too")

	for _, path := range []string{"/v1/idempotency_keys/order-2", "/v1/idempotency_keys/" + url.PathEscape("a b")} {
		resp, data = b.do(t, http.MethodGet, path, aliceKey, nil, nil)
		requireProblem(t, resp, data, http.StatusNotFound, "not_found")
	}
	resp, data = b.do(t, http.MethodGet, "/v1/idempotency_keys/order-1", bobKey, nil, nil)
	requireProblem(t, resp, data, http.StatusNotFound, "not_found")
}

// A key may hold any visible ASCII character, including those a URL path
// must escape; the key's state is found by its escaped form.
func TestGetIdempotencyKey_reservedCharacters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, key := range []string{"a/b", "order#1?x=y", "100%", "a%2Fb", `a"b\c`, "a+b&c"} {
		b.createPayment(t, aliceKey, key, visaBody)
		require.Equal(t, key, b.keyState(t, aliceKey, key).Key, key)
	}
}

func TestStagedJobs_eachStateChangeStagesItsJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const alice = "alice@example.com"

	b.createPayment(t, aliceKey, "captured", visaBody)
	require.Equal(t, []string{"merchant_event payment.succeeded", "receipt_email"}, b.stagedJobs(t, alice, "captured"))

	resp, data := b.post(t, aliceKey, pathPayments, "declined", `{"amount":2000,"currency":"usd","payment_method":"pm_card_chargeDeclined"}`)
	requireProblem(t, resp, data, http.StatusPaymentRequired, "card_declined")
	require.Equal(t, []string{"merchant_event payment.failed"}, b.stagedJobs(t, alice, "declined"))

	auth := b.createPayment(t, aliceKey, "authorised", authoriseBody)
	require.Empty(t, b.stagedJobs(t, alice, "authorised"))

	resp, data = b.post(t, aliceKey, capturePath(auth.ID), "capture", `{"amount":1500}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))
	require.Equal(t, []string{"merchant_event payment.captured", "receipt_email"}, b.stagedJobs(t, alice, "capture"))
	var receiptAmount int64
	var receiptPayment string
	require.NoError(t, b.pool.QueryRow(t.Context(), `
		SELECT (j.args->>'amount')::bigint, j.args->>'payment' FROM staged_jobs j
		JOIN idempotency_keys k ON k.id = j.idempotency_key_id
		WHERE k.idempotency_key = 'capture' AND j.kind = 'receipt_email'`).Scan(&receiptAmount, &receiptPayment))
	require.EqualValues(t, 1500, receiptAmount, "the receipt is for what was captured")
	require.Equal(t, auth.ID, receiptPayment)

	auth2 := b.createPayment(t, aliceKey, "authorised-2", authoriseBody)
	resp, data = b.post(t, aliceKey, cancelPath(auth2.ID), "cancel", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))
	require.Equal(t, []string{"merchant_event payment.canceled"}, b.stagedJobs(t, alice, "cancel"))

	// Replays stage nothing more.
	b.createPayment(t, aliceKey, "captured", visaBody)
	require.Equal(t, 6, b.count(t, "SELECT count(*) FROM staged_jobs"))
}

func TestCancel_ofADeclinedPaymentIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	resp, body := b.do(t, http.MethodPost, "/v1/payments", aliceKey,
		strings.NewReader(`{"amount":1000,"currency":"usd","payment_method":"pm_card_chargeDeclined","capture":false}`),
		http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {"declined-then-cancel"}})
	require.Equal(t, http.StatusPaymentRequired, resp.StatusCode, string(body))
	var declined struct{ Payment string }
	require.NoError(t, json.Unmarshal(body, &declined))

	resp, body = b.do(t, http.MethodPost, "/v1/payments/"+declined.Payment+"/cancel", aliceKey, nil,
		http.Header{"Idempotency-Key": {"cancel-declined"}})
	requireProblem(t, resp, body, http.StatusBadRequest, "payment_not_capturable")
	resp, body = b.do(t, http.MethodGet, "/v1/payments/"+declined.Payment, aliceKey, nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), `"status":"failed"`, "a declined payment stays failed")
}
