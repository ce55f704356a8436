package api_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/clocktest"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stripesim"
)

// Rule 2: keys are scoped per user.
func TestIdempotency_keysAreScopedPerUser(t *testing.T) {
	t.Parallel()
	b := setup(t)

	alice := b.createPayment(t, aliceKey, "order-1", visaBody)
	bob := b.createPayment(t, bobKey, "order-1", `{"amount":3100,"currency":"eur","payment_method":"pm_card_mastercard"}`)
	require.NotEqual(t, alice.ID, bob.ID)
	require.EqualValues(t, 2000, alice.Amount)
	require.EqualValues(t, 3100, bob.Amount)
	require.Equal(t, 2, b.count(t, "SELECT count(*) FROM payments"))
	require.Len(t, b.simIntents(t), 2)

	// Stripe sees keys derived from each key row, never the client's own.
	creations := b.simRequests(http.MethodPost, "/v1/payment_intents")
	require.Len(t, creations, 2)
	require.NotEqual(t, creations[0].IdempotencyKey, creations[1].IdempotencyKey)
	for _, c := range creations {
		require.NotEqual(t, "order-1", c.IdempotencyKey)
		require.NotEmpty(t, c.IdempotencyKey)
	}
}

// Rule 3: the stored response is replayed, byte for byte.
func TestIdempotency_replayIsTheSameResponse(t *testing.T) {
	t.Parallel()
	b := setup(t)

	first, firstBody := b.post(t, aliceKey, pathPayments, "order-1", visaBody)
	require.Equal(t, http.StatusCreated, first.StatusCode, string(firstBody))
	require.Equal(t, "application/json", first.Header.Get("Content-Type"))
	pay := decodePayment(t, firstBody)
	require.Equal(t, "succeeded", pay.Status)
	require.True(t, pay.Captured)
	require.EqualValues(t, 2000, pay.AmountCaptured)
	require.NotNil(t, pay.StripePaymentIntent)

	for range 2 {
		again, againBody := b.post(t, aliceKey, pathPayments, "order-1", visaBody)
		requireReplayOf(t, first, firstBody, again, againBody)
	}
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM payments"))
	require.Len(t, b.simRequests(http.MethodPost, "/v1/payment_intents"), 1, "Stripe was called once")
	intents := b.simIntents(t)
	require.Len(t, intents, 1)
	require.Equal(t, *pay.StripePaymentIntent, intents[0].ID)
	require.Equal(t, pay.ID, intents[0].Metadata["payment"])
}

// Rule 3: a decline is a final answer, stored and replayed like a success.
func TestIdempotency_declineIsStoredAndReplayed(t *testing.T) {
	t.Parallel()
	b := setup(t)

	for card, declineCode := range map[string]string{
		"pm_card_chargeDeclined":                  "generic_decline",
		"pm_card_chargeDeclinedInsufficientFunds": "insufficient_funds",
		"pm_card_chargeDeclinedLostCard":          "lost_card",
	} {
		t.Run(card, func(t *testing.T) {
			body := fmt.Sprintf(`{"amount":2000,"currency":"usd","payment_method":%q}`, card)
			first, firstBody := b.post(t, aliceKey, pathPayments, "key-"+card, body)
			requireProblem(t, first, firstBody, http.StatusPaymentRequired, "card_declined")
			p := decodeProblem(t, firstBody)
			require.Equal(t, declineCode, p.DeclineCode)
			require.True(t, strings.HasPrefix(p.Payment, "pay_"), p.Payment)
			require.Empty(t, first.Header.Get("Retry-After"))

			pay := b.getPayment(t, aliceKey, p.Payment)
			require.Equal(t, "failed", pay.Status)
			require.False(t, pay.Captured)
			require.NotNil(t, pay.FailureCode)
			require.Equal(t, declineCode, *pay.FailureCode)

			again, againBody := b.post(t, aliceKey, pathPayments, "key-"+card, body)
			requireReplayOf(t, first, firstBody, again, againBody)

			k := b.keyState(t, aliceKey, "key-"+card)
			require.Equal(t, "finished", k.RecoveryPoint)
			require.NotNil(t, k.ResponseCode)
			require.Equal(t, http.StatusPaymentRequired, *k.ResponseCode)
			require.Len(t, b.simIntentsFor(t, p.Payment), 1)
		})
	}
	require.Len(t, b.simRequests(http.MethodPost, "/v1/payment_intents"), 3, "one Stripe call per key")
}

// Rule 4: a known key with another request is 422; canonical JSON is the same request.
func TestIdempotency_reuseWithAnotherRequestIs422(t *testing.T) {
	t.Parallel()
	b := setup(t)

	body := `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","metadata":{"order_id":"1","b":"2"}}`
	first, firstBody := b.post(t, aliceKey, pathPayments, "order-1", body)
	require.Equal(t, http.StatusCreated, first.StatusCode, string(firstBody))
	pay := decodePayment(t, firstBody)

	for name, other := range map[string]string{
		"another amount":      `{"amount":2001,"currency":"usd","payment_method":"pm_card_visa","metadata":{"order_id":"1","b":"2"}}`,
		"another metadata":    `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","metadata":{"order_id":"2","b":"2"}}`,
		"a field left out":    `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`,
		"a default spelt out": `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","metadata":{"order_id":"1","b":"2"},"capture":true}`,
	} {
		t.Run(name, func(t *testing.T) {
			resp, data := b.post(t, aliceKey, pathPayments, "order-1", other)
			requireProblem(t, resp, data, http.StatusUnprocessableEntity, "idempotency_key_reused")
			require.Empty(t, resp.Header.Get("Idempotent-Replayed"))
		})
	}

	// The same key on another route is another request too.
	resp, data := b.post(t, aliceKey, "/v1/payments/"+pay.ID+"/capture", "order-1", "")
	requireProblem(t, resp, data, http.StatusUnprocessableEntity, "idempotency_key_reused")
	resp, data = b.post(t, aliceKey, "/v1/payments/"+pay.ID+"/cancel", "order-1", "")
	requireProblem(t, resp, data, http.StatusUnprocessableEntity, "idempotency_key_reused")

	// Key order and white space do not make another request.
	for _, same := range []string{
		`{"metadata":{"b":"2","order_id":"1"},"payment_method":"pm_card_visa","currency":"usd","amount":2000}`,
		"{\n  \"amount\" : 2000,\t\"currency\":\"usd\",\r\n \"payment_method\": \"pm_card_visa\", \"metadata\": { \"order_id\": \"1\", \"b\": \"2\" }\n}\n",
		`{"amount":2000,"currency":"\u0075sd","payment_method":"pm_card_visa","metadata":{"order_id":"1","b":"2"}}`,
	} {
		again, againBody := b.post(t, aliceKey, pathPayments, "order-1", same)
		requireReplayOf(t, first, firstBody, again, againBody)
	}

	// A key first used on capture is refused on create.
	auth := b.createPayment(t, aliceKey, "auth-1", `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","capture":false}`)
	resp, data = b.post(t, aliceKey, "/v1/payments/"+auth.ID+"/capture", "capture-1", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))
	resp, data = b.post(t, aliceKey, pathPayments, "capture-1", visaBody)
	requireProblem(t, resp, data, http.StatusUnprocessableEntity, "idempotency_key_reused")

	require.Equal(t, 2, b.count(t, "SELECT count(*) FROM payments"))
	require.Len(t, b.simRequests(http.MethodPost, "/v1/payment_intents"), 2)
}

// startSlowCreate arms a delay on PaymentIntent creation, starts a create
// with idemKey, and returns once that request is inside Stripe. The returned
// channel yields its answer.
func (b *testBundle) startSlowCreate(t *testing.T, idemKey string, delay time.Duration) <-chan answer {
	t.Helper()
	b.addFault(t, stripesim.FaultDelay, delay)
	before := len(b.simRequests(http.MethodPost, "/v1/payment_intents"))
	done := make(chan answer, 1)
	go func() {
		resp, body, err := b.send(jsonRequest{apiKey: aliceKey, path: pathPayments, idemKey: idemKey, body: visaBody})
		done <- answer{resp, body, err}
	}()
	requireEventually(t, "the first request reaches Stripe", func() bool {
		return len(b.simRequests(http.MethodPost, "/v1/payment_intents")) > before
	})
	return done
}

type answer struct {
	resp *http.Response
	body []byte
	err  error
}

// Rule 5: while the first request runs, another with its key is 409, and
// nothing is stored for the 409.
func TestIdempotency_inUseWhileTheFirstRequestRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	done := b.startSlowCreate(t, "order-1", time.Second)

	resp, body := b.post(t, aliceKey, pathPayments, "order-1", visaBody)
	requireProblem(t, resp, body, http.StatusConflict, "idempotency_key_in_use")
	requireRetryAfter(t, resp)
	require.Equal(t, "order-1", resp.Header.Get("Idempotency-Key"))
	require.Empty(t, resp.Header.Get("Idempotent-Replayed"))

	k := b.keyState(t, aliceKey, "order-1")
	require.True(t, k.Locked)
	require.Equal(t, "payment_created", k.RecoveryPoint)
	require.Nil(t, k.ResponseCode)

	first := <-done
	require.NoError(t, first.err)
	require.Equal(t, http.StatusCreated, first.resp.StatusCode, string(first.body))

	// The 409 was not stored: the key answers with the first request's 201.
	again, againBody := b.post(t, aliceKey, pathPayments, "order-1", visaBody)
	requireReplayOf(t, first.resp, first.body, again, againBody)
	require.Len(t, b.simRequests(http.MethodPost, "/v1/payment_intents"), 1)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM payments"))
}

// Rule 6: a request refused by validation, authentication or the body
// rules stores nothing; fixed, it may use the same key.
func TestIdempotency_validationFailuresStoreNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const key = "order-1"

	metadata := func(n, keyLen, valueLen int) string {
		m := make([]string, 0, n)
		for i := range n {
			k := fmt.Sprintf("%0*d", keyLen, i)
			m = append(m, fmt.Sprintf("%q:%q", k, strings.Repeat("v", valueLen)))
		}
		return `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","metadata":{` + strings.Join(m, ",") + `}}`
	}
	for name, body := range map[string]string{
		"amount zero":              `{"amount":0,"currency":"usd","payment_method":"pm_card_visa"}`,
		"amount too large":         `{"amount":100000000,"currency":"usd","payment_method":"pm_card_visa"}`,
		"amount negative":          `{"amount":-5,"currency":"usd","payment_method":"pm_card_visa"}`,
		"amount a fraction":        `{"amount":20.5,"currency":"usd","payment_method":"pm_card_visa"}`,
		"amount a string":          `{"amount":"2000","currency":"usd","payment_method":"pm_card_visa"}`,
		"amount missing":           `{"currency":"usd","payment_method":"pm_card_visa"}`,
		"currency upper-case":      `{"amount":2000,"currency":"USD","payment_method":"pm_card_visa"}`,
		"currency too long":        `{"amount":2000,"currency":"usdd","payment_method":"pm_card_visa"}`,
		"currency missing":         `{"amount":2000,"payment_method":"pm_card_visa"}`,
		"payment_method missing":   `{"amount":2000,"currency":"usd"}`,
		"payment_method empty":     `{"amount":2000,"currency":"usd","payment_method":""}`,
		"unknown field":            `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","amout":1}`,
		"bad JSON":                 `{"amount":2000,"currency":"usd",`,
		"not an object":            `[1,2]`,
		"two objects":              visaBody + visaBody,
		"empty object":             `{}`,
		"51 metadata keys":         metadata(51, 2, 1),
		"metadata key of 41 bytes": metadata(1, 41, 1),
		"metadata value 501 bytes": metadata(1, 1, 501),
		"description too long":     `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","description":"` + strings.Repeat("d", 1001) + `"}`,
	} {
		t.Run(name, func(t *testing.T) {
			resp, data := b.post(t, aliceKey, pathPayments, key, body)
			requireProblem(t, resp, data, http.StatusBadRequest, "validation_failed")
			require.Equal(t, key, resp.Header.Get("Idempotency-Key"))
		})
	}
	jsonHeader := http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {key}}
	resp, data := b.do(t, http.MethodPost, pathPayments, "", strings.NewReader(visaBody), jsonHeader)
	requireProblem(t, resp, data, http.StatusUnauthorized, "unauthorized")
	resp, data = b.do(t, http.MethodPost, pathPayments, "sk_dev_mallory_0000000000000000", strings.NewReader(visaBody), jsonHeader)
	requireProblem(t, resp, data, http.StatusUnauthorized, "unauthorized")
	big := `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","description":"` + strings.Repeat("x", 64<<10) + `"}`
	resp, data = b.do(t, http.MethodPost, pathPayments, aliceKey, strings.NewReader(big), jsonHeader)
	requireProblem(t, resp, data, http.StatusRequestEntityTooLarge, "body_too_large")
	// Without a Content-Length (chunked), the limit is found while reading.
	resp, data = b.do(t, http.MethodPost, pathPayments, aliceKey, io.MultiReader(strings.NewReader(big)), jsonHeader)
	requireProblem(t, resp, data, http.StatusRequestEntityTooLarge, "body_too_large")
	resp, data = b.do(t, http.MethodPost, pathPayments, aliceKey, strings.NewReader(visaBody),
		http.Header{"Content-Type": {"text/plain"}, "Idempotency-Key": {key}})
	requireProblem(t, resp, data, http.StatusUnsupportedMediaType, "unsupported_media_type")

	require.Zero(t, b.keyRows(t), "nothing was stored")
	require.Zero(t, b.count(t, "SELECT count(*) FROM payments"))
	require.Empty(t, b.sim.Requests())

	// At the limits, the request is valid, and the key is free for it.
	pay := b.createPayment(t, aliceKey, key, metadata(50, 40, 500))
	require.Len(t, pay.Metadata, 50)
	require.Equal(t, 1, b.keyRows(t))
}

// Rule 7: when Stripe fails, the answer is 503 with nothing final stored, and
// a retry with the same key finishes the work with one PaymentIntent.
func TestIdempotency_stripeUnavailableIsResumable(t *testing.T) {
	t.Parallel()
	for _, kind := range []stripesim.FaultKind{
		stripesim.FaultError500, stripesim.FaultLostResponse, stripesim.FaultDropConnection, stripesim.FaultRateLimit,
	} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.addFault(t, kind, 0)

			resp, data := b.post(t, aliceKey, pathPayments, "order-1", visaBody)
			requireProblem(t, resp, data, http.StatusServiceUnavailable, "payment_processor_unavailable")
			requireRetryAfter(t, resp)
			require.Equal(t, "order-1", resp.Header.Get("Idempotency-Key"))

			k := b.keyState(t, aliceKey, "order-1")
			require.Equal(t, "payment_created", k.RecoveryPoint, "unfinished")
			require.False(t, k.Locked, "unlocked, so a retry need not wait")
			require.Nil(t, k.ResponseCode)
			var paymentID, status string
			require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT id, status FROM payments").Scan(&paymentID, &status))
			require.Equal(t, "processing", status)

			first, firstBody := b.post(t, aliceKey, pathPayments, "order-1", visaBody)
			require.Equal(t, http.StatusCreated, first.StatusCode, string(firstBody))
			require.Empty(t, first.Header.Get("Idempotent-Replayed"), "the retry did the work")
			pay := decodePayment(t, firstBody)
			require.Equal(t, paymentID, pay.ID, "the retry resumed the same payment")
			require.Equal(t, "succeeded", pay.Status)

			intents := b.simIntentsFor(t, pay.ID)
			require.Len(t, intents, 1, "exactly one PaymentIntent")
			require.Len(t, b.simIntents(t), 1)
			require.Equal(t, *pay.StripePaymentIntent, intents[0].ID)
			creations := b.simRequests(http.MethodPost, "/v1/payment_intents")
			require.Len(t, creations, 2)
			require.Equal(t, creations[0].IdempotencyKey, creations[1].IdempotencyKey, "the same derived key on the retry")
			require.Equal(t, kind == stripesim.FaultLostResponse || kind == stripesim.FaultDropConnection, creations[1].Replayed,
				"Stripe replays what it did the first time")

			again, againBody := b.post(t, aliceKey, pathPayments, "order-1", visaBody)
			requireReplayOf(t, first, firstBody, again, againBody)
			require.Equal(t, 1, b.count(t, "SELECT count(*) FROM payments"))
		})
	}
}

// Rule 8: after its TTL a key is new again.
func TestIdempotency_keysExpire(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(time.Now().Truncate(time.Second))
	b := setup(t, setupOpts{engine: recovery.Config{Now: clock.Now, KeyTTL: time.Hour}})
	other := `{"amount":5000,"currency":"usd","payment_method":"pm_card_visa"}`

	first := b.createPayment(t, aliceKey, "order-1", visaBody)
	k := b.keyState(t, aliceKey, "order-1")
	require.Equal(t, clock.Now().Unix(), k.Created)
	require.Equal(t, k.Created+3600, *k.ExpiresAt)

	clock.Advance(time.Hour - time.Second)
	resp, data := b.post(t, aliceKey, pathPayments, "order-1", other)
	requireProblem(t, resp, data, http.StatusUnprocessableEntity, "idempotency_key_reused")
	resp, data = b.post(t, aliceKey, pathPayments, "order-1", visaBody)
	require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"), string(data))

	clock.Advance(time.Second)
	resp, data = b.do(t, http.MethodGet, "/v1/idempotency_keys/order-1", aliceKey, nil, nil)
	requireProblem(t, resp, data, http.StatusNotFound, "not_found")

	resp, data = b.post(t, aliceKey, pathPayments, "order-1", other)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(data))
	require.Empty(t, resp.Header.Get("Idempotent-Replayed"))
	second := decodePayment(t, data)
	require.NotEqual(t, first.ID, second.ID)
	require.EqualValues(t, 5000, second.Amount)

	// The key now names the new request; the old payment is still there.
	resp, data = b.post(t, aliceKey, pathPayments, "order-1", visaBody)
	requireProblem(t, resp, data, http.StatusUnprocessableEntity, "idempotency_key_reused")
	require.Equal(t, "succeeded", b.getPayment(t, aliceKey, first.ID).Status)
	require.Equal(t, clock.Now().Unix(), b.keyState(t, aliceKey, "order-1").Created)
	require.Equal(t, 1, b.keyRows(t))
	require.Len(t, b.simIntents(t), 2)
}

// Rule 9: every response to a request with a key echoes it.
func TestIdempotency_keyIsEchoedOnEveryResponse(t *testing.T) {
	t.Parallel()
	b := setup(t)
	requireEcho := func(resp *http.Response, data []byte, status int, key string) {
		t.Helper()
		require.Equal(t, status, resp.StatusCode, string(data))
		require.Equal(t, key, resp.Header.Get("Idempotency-Key"))
	}

	resp, data := b.post(t, aliceKey, pathPayments, "k-201", visaBody)
	requireEcho(resp, data, http.StatusCreated, "k-201")
	resp, data = b.post(t, aliceKey, pathPayments, "k-201", visaBody)
	requireEcho(resp, data, http.StatusCreated, "k-201")
	require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
	resp, data = b.post(t, aliceKey, pathPayments, `"k-201"`, visaBody)
	requireEcho(resp, data, http.StatusCreated, `"k-201"`)
	resp, data = b.post(t, aliceKey, pathPayments, "k-201", `{"amount":60,"currency":"usd","payment_method":"pm_card_visa"}`)
	requireEcho(resp, data, http.StatusUnprocessableEntity, "k-201")
	resp, data = b.post(t, aliceKey, pathPayments, "k-400", `{"amount":0}`)
	requireEcho(resp, data, http.StatusBadRequest, "k-400")
	resp, data = b.post(t, aliceKey, pathPayments, "k 400", visaBody)
	requireEcho(resp, data, http.StatusBadRequest, "k 400")
	resp, data = b.post(t, "", pathPayments, "k-401", visaBody)
	requireEcho(resp, data, http.StatusUnauthorized, "k-401")
	resp, data = b.post(t, aliceKey, pathPayments, "k-402", `{"amount":2000,"currency":"usd","payment_method":"pm_card_chargeDeclined"}`)
	requireEcho(resp, data, http.StatusPaymentRequired, "k-402")
	resp, data = b.post(t, aliceKey, "/v1/payments/pay_nope/capture", "k-404", "")
	requireEcho(resp, data, http.StatusNotFound, "k-404")
	resp, data = b.do(t, http.MethodPost, pathPayments, aliceKey, strings.NewReader(visaBody),
		http.Header{"Content-Type": {"text/plain"}, "Idempotency-Key": {"k-415"}})
	requireEcho(resp, data, http.StatusUnsupportedMediaType, "k-415")

	b.addFault(t, stripesim.FaultError500, 0)
	resp, data = b.post(t, aliceKey, pathPayments, "k-503", visaBody)
	requireEcho(resp, data, http.StatusServiceUnavailable, "k-503")

	done := b.startSlowCreate(t, "k-409", 500*time.Millisecond)
	resp, data = b.post(t, aliceKey, pathPayments, "k-409", visaBody)
	requireEcho(resp, data, http.StatusConflict, "k-409")
	first := <-done
	require.NoError(t, first.err)
	requireEcho(first.resp, first.body, http.StatusCreated, "k-409")
}

// Rule 3 and 5 under load: many identical requests at once make one payment.
func TestIdempotency_stormOfIdenticalRequestsChargesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 50

	start := make(chan struct{})
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			resp, body, err := b.send(jsonRequest{apiKey: aliceKey, path: pathPayments, idemKey: "storm", body: visaBody})
			answers[i] = answer{resp, body, err}
		})
	}
	close(start)
	wg.Wait()

	// Whatever happened, the key now answers with the one stored response.
	final, finalBody := b.post(t, aliceKey, pathPayments, "storm", visaBody)
	require.Equal(t, http.StatusCreated, final.StatusCode, string(finalBody))
	created, inUse := 0, 0
	for _, a := range answers {
		require.NoError(t, a.err)
		switch a.resp.StatusCode {
		case http.StatusCreated:
			created++
			require.Equal(t, string(finalBody), string(a.body))
		default:
			inUse++
			requireProblem(t, a.resp, a.body, http.StatusConflict, "idempotency_key_in_use")
			requireRetryAfter(t, a.resp)
		}
	}
	t.Logf("%d created (first or replayed), %d in use", created, inUse)

	pay := decodePayment(t, finalBody)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM payments"))
	require.Equal(t, 1, b.keyRows(t))
	require.Len(t, b.simIntents(t), 1)
	require.Len(t, b.simIntentsFor(t, pay.ID), 1)
	require.Equal(t, 1, b.simIntentCreations(), "Stripe executed one creation")
}

// The heartbeat keeps a slow request's lock alive past the lock timeout.
func TestIdempotency_heartbeatKeepsTheLockDuringASlowStripeCall(t *testing.T) {
	t.Parallel()
	const lockTimeout = 600 * time.Millisecond
	b := setup(t, setupOpts{engine: recovery.Config{LockTimeout: lockTimeout}})
	done := b.startSlowCreate(t, "order-1", 2*time.Second)

	// Wait (without sleeping blindly) until a heartbeat has moved the lock
	// past the point where it would have expired had nobody renewed it.
	requireEventually(t, "a heartbeat renews the lock past the lock timeout", func() bool {
		return b.count(t, `SELECT count(*) FROM idempotency_keys
			WHERE locked_at > created_at + make_interval(secs => $1) AND now() > created_at + make_interval(secs => $1)`,
			lockTimeout.Seconds()+0.1) == 1
	})
	resp, data := b.post(t, aliceKey, pathPayments, "order-1", visaBody)
	requireProblem(t, resp, data, http.StatusConflict, "idempotency_key_in_use")
	require.True(t, b.keyState(t, aliceKey, "order-1").Locked)
	require.Len(t, b.simRequests(http.MethodPost, "/v1/payment_intents"), 1, "no second attempt reached Stripe")

	first := <-done
	require.NoError(t, first.err)
	require.Equal(t, http.StatusCreated, first.resp.StatusCode, string(first.body))
	require.Len(t, b.simRequests(http.MethodPost, "/v1/payment_intents"), 1)
	require.Len(t, b.simIntents(t), 1)
}

// Concurrent SERIALIZABLE transactions conflict; the client never sees that
// as a 500, and a retry with the same key finishes the work.
func TestIdempotency_serializationFailuresAreNeverA500(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 40

	start := make(chan struct{})
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			body := fmt.Sprintf(`{"amount":%d,"currency":"usd","payment_method":"pm_card_visa"}`, 1000+i)
			resp, data, err := b.send(jsonRequest{apiKey: aliceKey, path: pathPayments, idemKey: fmt.Sprintf("k-%d", i), body: body})
			answers[i] = answer{resp, data, err}
		})
	}
	close(start)
	wg.Wait()

	// Different keys: never 409 (rule 5). Conflicts that outlast the
	// transaction's retry budget would be 503 with Retry-After, and resumable.
	unavailable := 0
	for i, a := range answers {
		require.NoError(t, a.err)
		if a.resp.StatusCode == http.StatusCreated {
			require.EqualValues(t, 1000+i, decodePayment(t, a.body).Amount)
			continue
		}
		unavailable++
		requireProblem(t, a.resp, a.body, http.StatusServiceUnavailable, "payment_processor_unavailable")
		requireRetryAfter(t, a.resp)
		body := fmt.Sprintf(`{"amount":%d,"currency":"usd","payment_method":"pm_card_visa"}`, 1000+i)
		requireEventually(t, "a retry finishes", func() bool {
			resp, data := b.post(t, aliceKey, pathPayments, fmt.Sprintf("k-%d", i), body)
			require.Contains(t, []int{http.StatusCreated, http.StatusServiceUnavailable}, resp.StatusCode, string(data))
			return resp.StatusCode == http.StatusCreated
		})
	}
	t.Logf("%d of %d answered 503 first", unavailable, n)
	require.Equal(t, n, b.count(t, "SELECT count(*) FROM payments WHERE status = 'succeeded'"))
	require.Equal(t, n, b.count(t, "SELECT count(*) FROM idempotency_keys WHERE recovery_point = 'finished'"))
	require.Len(t, b.simIntents(t), n)
}
