package webhook_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/example/payments/client/webhook"
)

// An endpoint's handler verifies each delivery before it acts on it, and
// refuses what the service did not sign.
func ExampleVerify() {
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // the endpoint's, from CreateWebhookEndpoint
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return
		}
		if err := webhook.Verify(secret, r.Header, body, webhook.DefaultTolerance); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// Act on the event, once per webhook-id.
		w.WriteHeader(http.StatusNoContent)
	})

	body := []byte(`{"id":"evt_1","object":"event","type":"payment.succeeded","data":{"object":{}},"created":1763800000}`)
	for _, signer := range []string{secret, "whsec_c2VjcmV0LW9mLWFub3RoZXItZW5kcG9pbnQ="} {
		answer := httptest.NewRecorder()
		handler.ServeHTTP(answer, delivery(signer, "evt_1", body))
		fmt.Println(answer.Code)
	}
	// Output:
	// 204
	// 400
}

// delivery is a request as the service sends it: its delivery worker
// signs with the Standard Webhooks library.
func delivery(secret, id string, body []byte) *http.Request {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		panic(err)
	}
	now := time.Now()
	signature, err := wh.Sign(id, now, body)
	if err != nil {
		panic(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/hooks", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(webhook.HeaderID, id)
	r.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	r.Header.Set(webhook.HeaderSignature, signature)
	return r
}
