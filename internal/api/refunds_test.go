package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/stripesim"
)

const pathRefunds = "/v1/refunds"

// refundJSON is the API's Refund object.
type refundJSON struct {
	ID            string  `json:"id"`
	Object        string  `json:"object"`
	Payment       string  `json:"payment"`
	Amount        int64   `json:"amount"`
	Status        string  `json:"status"`
	StripeRefund  *string `json:"stripe_refund"`
	Reason        *string `json:"reason"`
	FailureReason *string `json:"failure_reason"`
	Origin        string  `json:"origin"`
	Created       int64   `json:"created"`
}

var refundID = regexp.MustCompile(`^re_[0-9a-f]{24}$`)

func decodeRefund(t *testing.T, data []byte) refundJSON {
	t.Helper()
	var re refundJSON
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&re), string(data))
	require.Equal(t, "refund", re.Object)
	require.Regexp(t, refundID, re.ID)
	return re
}

// refundBody is a POST /v1/refunds body; amount 0 leaves the amount out.
func refundBody(paymentID string, amount int64) string {
	if amount == 0 {
		return fmt.Sprintf(`{"payment":%q}`, paymentID)
	}
	return fmt.Sprintf(`{"payment":%q,"amount":%d}`, paymentID, amount)
}

// refund posts body as apiKey's refund with idemKey and requires a 201.
func (b *testBundle) refund(t *testing.T, apiKey, idemKey, body string) refundJSON {
	t.Helper()
	resp, data := b.post(t, apiKey, pathRefunds, idemKey, body)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(data))
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	return decodeRefund(t, data)
}

// simRefund is a refund as the simulator holds it.
type simRefund struct {
	ID            string            `json:"id"`
	Amount        int64             `json:"amount"`
	PaymentIntent string            `json:"payment_intent"`
	Reason        *string           `json:"reason"`
	Status        string            `json:"status"`
	Metadata      map[string]string `json:"metadata"`
}

// simRefundsFor returns the refunds the simulator made on a PaymentIntent.
func (b *testBundle) simRefundsFor(t *testing.T, intent string) []simRefund {
	t.Helper()
	raw, err := b.sim.Objects("refund")
	require.NoError(t, err)
	var out []simRefund
	for _, r := range raw {
		var re simRefund
		require.NoError(t, json.Unmarshal(r, &re))
		if re.PaymentIntent == intent {
			out = append(out, re)
		}
	}
	return out
}

// captured creates a captured payment of amount for apiKey.
func (b *testBundle) captured(t *testing.T, apiKey, idemKey string, amount int64) paymentJSON {
	t.Helper()
	pay := b.createPayment(t, apiKey, idemKey, fmt.Sprintf(`{"amount":%d,"currency":"usd","payment_method":"pm_card_visa"}`, amount))
	require.Equal(t, "succeeded", pay.Status)
	require.EqualValues(t, amount, pay.AmountCaptured)
	return pay
}

func TestRefund_fullRefundByDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pay := b.captured(t, aliceKey, "order-1", 2000)

	re := b.refund(t, aliceKey, "refund-1", refundBody(pay.ID, 0))
	require.Equal(t, pay.ID, re.Payment)
	require.EqualValues(t, 2000, re.Amount, "the amount defaults to what is left")
	require.Equal(t, "succeeded", re.Status)
	require.Nil(t, re.Reason)
	require.InDelta(t, time.Now().Unix(), re.Created, 60)

	simRefunds := b.simRefundsFor(t, *pay.StripePaymentIntent)
	require.Len(t, simRefunds, 1)
	require.NotNil(t, re.StripeRefund)
	require.Equal(t, simRefunds[0].ID, *re.StripeRefund)
	require.EqualValues(t, 2000, simRefunds[0].Amount)
	require.Equal(t, re.ID, simRefunds[0].Metadata["refund"])
	require.NotEmpty(t, simRefunds[0].Metadata["idempotency_key_id"])

	after := b.getPayment(t, aliceKey, pay.ID)
	require.EqualValues(t, 2000, after.AmountRefunded)
	require.Equal(t, "succeeded", after.Status, "a refunded payment stays succeeded")

	resp, data := b.do(t, http.MethodGet, "/v1/refunds/"+re.ID, aliceKey, nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))
	require.Equal(t, re, decodeRefund(t, data), "GET shows what the refund answered")

	for _, path := range []string{"/v1/refunds/" + re.ID, "/v1/refunds/re_nope"} {
		resp, data = b.do(t, http.MethodGet, path, bobKey, nil, nil)
		requireProblem(t, resp, data, http.StatusNotFound, "not_found")
	}

	k := b.keyState(t, aliceKey, "refund-1")
	require.Equal(t, "finished", k.RecoveryPoint)
	require.Equal(t, pathRefunds, k.RequestPath)
	require.Equal(t, http.StatusCreated, *k.ResponseCode)
}

func TestRefund_partialRefundsUpToTheCapturedAmount(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pay := b.captured(t, aliceKey, "order-1", 2000)

	first := b.refund(t, aliceKey, "refund-1", fmt.Sprintf(`{"payment":%q,"amount":500,"reason":"requested_by_customer"}`, pay.ID))
	require.EqualValues(t, 500, first.Amount)
	require.Equal(t, "requested_by_customer", *first.Reason)
	require.EqualValues(t, 500, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)

	b.refund(t, aliceKey, "refund-2", refundBody(pay.ID, 700))
	require.EqualValues(t, 1200, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
	last := b.refund(t, aliceKey, "refund-3", refundBody(pay.ID, 0))
	require.EqualValues(t, 800, last.Amount, "the default is what is left")
	require.EqualValues(t, 2000, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)

	resp, data := b.post(t, aliceKey, pathRefunds, "refund-4", refundBody(pay.ID, 1))
	requireProblem(t, resp, data, http.StatusBadRequest, "refund_not_allowed")
	resp, data = b.post(t, aliceKey, pathRefunds, "refund-5", refundBody(pay.ID, 0))
	requireProblem(t, resp, data, http.StatusBadRequest, "refund_not_allowed")

	var sum int64
	simRefunds := b.simRefundsFor(t, *pay.StripePaymentIntent)
	for _, re := range simRefunds {
		sum += re.Amount
	}
	require.Len(t, simRefunds, 3)
	require.EqualValues(t, 2000, sum)
	require.Equal(t, "requested_by_customer", *simRefunds[0].Reason)
	require.Len(t, b.simRequests(http.MethodPost, "/v1/refunds"), 3, "the refused refunds never reached Stripe")
	require.Equal(t, 3, b.count(t, "SELECT count(*) FROM refunds WHERE payment_id = $1", pay.ID))
	require.EqualValues(t, 2000, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
}

// Nothing was captured: there is nothing to refund.
func TestRefund_ofAnAuthorisationIsNotAllowed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	auth := b.createPayment(t, aliceKey, "auth-1", authoriseBody)

	resp, data := b.post(t, aliceKey, pathRefunds, "refund-1", refundBody(auth.ID, 0))
	requireProblem(t, resp, data, http.StatusBadRequest, "refund_not_allowed")
	resp, data = b.post(t, aliceKey, pathRefunds, "refund-2", refundBody(auth.ID, 500))
	requireProblem(t, resp, data, http.StatusBadRequest, "refund_not_allowed")

	resp, data = b.post(t, aliceKey, pathPayments, "declined", `{"amount":2000,"currency":"usd","payment_method":"pm_card_chargeDeclined"}`)
	requireProblem(t, resp, data, http.StatusPaymentRequired, "card_declined")
	resp, data = b.post(t, aliceKey, pathRefunds, "refund-3", refundBody(decodeProblem(t, data).Payment, 0))
	requireProblem(t, resp, data, http.StatusBadRequest, "refund_not_allowed")

	require.Empty(t, b.simRequests(http.MethodPost, "/v1/refunds"))
	require.Zero(t, b.count(t, "SELECT count(*) FROM refunds"))
	require.Equal(t, "requires_capture", b.getPayment(t, aliceKey, auth.ID).Status)
}

// refund_not_allowed is decided inside the flow, so it is stored: the same
// key answers it again even once the payment could be refunded.
func TestRefund_notAllowedIsStoredAndReplayed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	auth := b.createPayment(t, aliceKey, "auth-1", authoriseBody)

	first, firstBody := b.post(t, aliceKey, pathRefunds, "refund-1", refundBody(auth.ID, 0))
	requireProblem(t, first, firstBody, http.StatusBadRequest, "refund_not_allowed")
	k := b.keyState(t, aliceKey, "refund-1")
	require.Equal(t, "finished", k.RecoveryPoint)
	require.Equal(t, http.StatusBadRequest, *k.ResponseCode)

	resp, data := b.post(t, aliceKey, capturePath(auth.ID), "capture-1", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))

	again, againBody := b.post(t, aliceKey, pathRefunds, "refund-1", refundBody(auth.ID, 0))
	requireReplayOf(t, first, firstBody, again, againBody)
	require.Empty(t, b.simRequests(http.MethodPost, "/v1/refunds"))

	b.refund(t, aliceKey, "refund-2", refundBody(auth.ID, 0)) // a new key is a new request
}

func TestRefund_replayIsByteIdentical(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pay := b.captured(t, aliceKey, "order-1", 2000)

	body := fmt.Sprintf(`{"payment":%q,"amount":750,"reason":"duplicate"}`, pay.ID)
	first, firstBody := b.post(t, aliceKey, pathRefunds, "refund-1", body)
	require.Equal(t, http.StatusCreated, first.StatusCode, string(firstBody))
	again, againBody := b.post(t, aliceKey, pathRefunds, "refund-1", body)
	requireReplayOf(t, first, firstBody, again, againBody)
	reordered := fmt.Sprintf(`{ "reason": "duplicate", "amount": 750, "payment": %q }`, pay.ID)
	again, againBody = b.post(t, aliceKey, pathRefunds, "refund-1", reordered)
	requireReplayOf(t, first, firstBody, again, againBody)

	require.Len(t, b.simRequests(http.MethodPost, "/v1/refunds"), 1)
	require.Len(t, b.simRefundsFor(t, *pay.StripePaymentIntent), 1)
	require.EqualValues(t, 750, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
}

func TestRefund_keyReusedWithAnotherBodyIs422(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pay := b.captured(t, aliceKey, "order-1", 2000)
	other := b.captured(t, aliceKey, "order-2", 2000)
	b.refund(t, aliceKey, "refund-1", refundBody(pay.ID, 500))

	for _, body := range []string{refundBody(pay.ID, 600), refundBody(pay.ID, 0), refundBody(other.ID, 500),
		fmt.Sprintf(`{"payment":%q,"amount":500,"reason":"fraudulent"}`, pay.ID)} {
		resp, data := b.post(t, aliceKey, pathRefunds, "refund-1", body)
		requireProblem(t, resp, data, http.StatusUnprocessableEntity, "idempotency_key_reused")
	}
	resp, data := b.post(t, aliceKey, pathPayments, "refund-1", visaBody)
	requireProblem(t, resp, data, http.StatusUnprocessableEntity, "idempotency_key_reused")

	require.Len(t, b.simRequests(http.MethodPost, "/v1/refunds"), 1)
	require.EqualValues(t, 500, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
	require.Zero(t, b.getPayment(t, aliceKey, other.ID).AmountRefunded)
}

// Two refunds with different keys race for the last of a payment: the
// pending refund reserves its amount under the payment's row lock, so one
// wins, the other is refused before it reaches Stripe, and nothing is
// refunded twice.
func TestRefund_concurrentRefundsNeverOverRefund(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const rounds = 6
	for round := range rounds {
		pay := b.captured(t, aliceKey, fmt.Sprintf("order-%d", round), 1000)

		type answer struct {
			status int
			body   []byte
			err    error
		}
		answers := make([]answer, 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range answers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				resp, body, err := b.send(jsonRequest{
					apiKey: aliceKey, path: pathRefunds, idemKey: fmt.Sprintf("race-%d-%d", round, i), body: refundBody(pay.ID, 600),
				})
				answers[i] = answer{body: body, err: err}
				if err == nil {
					answers[i].status = resp.StatusCode
				}
			}()
		}
		close(start)
		wg.Wait()

		created, refused := 0, 0
		for _, a := range answers {
			require.NoError(t, a.err)
			switch a.status {
			case http.StatusCreated:
				created++
			case http.StatusBadRequest:
				require.Equal(t, "refund_not_allowed", decodeProblem(t, a.body).Code, string(a.body))
				refused++
			default:
				require.FailNow(t, "unexpected answer", "round %d: %d %s", round, a.status, a.body)
			}
		}
		require.Equal(t, 1, created, "round %d", round)
		require.Equal(t, 1, refused, "round %d", round)

		var sum int64
		for _, re := range b.simRefundsFor(t, *pay.StripePaymentIntent) {
			sum += re.Amount
		}
		require.EqualValues(t, 600, sum, "round %d: Stripe refunded once", round)
		require.EqualValues(t, 600, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
		require.Equal(t, 1, b.count(t, "SELECT count(*) FROM refunds WHERE payment_id = $1", pay.ID))
	}
	require.Len(t, b.simRequests(http.MethodPost, "/v1/refunds"), rounds, "no loser reached Stripe")
}

func TestRefund_anotherUsersPaymentIsNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bobs := b.captured(t, bobKey, "order-1", 2000)

	for _, body := range []string{refundBody(bobs.ID, 0), refundBody(bobs.ID, 500), refundBody("pay_nope", 0)} {
		resp, data := b.post(t, aliceKey, pathRefunds, "refund-1", body)
		requireProblem(t, resp, data, http.StatusNotFound, "not_found")
	}
	resp, data := b.do(t, http.MethodGet, "/v1/idempotency_keys/refund-1", aliceKey, nil, nil)
	requireProblem(t, resp, data, http.StatusNotFound, "not_found")
	require.Empty(t, b.simRequests(http.MethodPost, "/v1/refunds"))
	require.Zero(t, b.getPayment(t, bobKey, bobs.ID).AmountRefunded)
}

// Input the handler refuses before any work is not stored: the client may
// fix it and use the key again.
func TestRefund_validationFailuresStoreNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pay := b.captured(t, aliceKey, "order-1", 2000)

	for _, body := range []string{
		``, `{}`, `{"payment":""}`, `{"payment":5}`, `[]`,
		fmt.Sprintf(`{"payment":%q,"amount":0}`, pay.ID),
		fmt.Sprintf(`{"payment":%q,"amount":-1}`, pay.ID),
		fmt.Sprintf(`{"payment":%q,"amount":100000000}`, pay.ID),
		fmt.Sprintf(`{"payment":%q,"amount":"5"}`, pay.ID),
		fmt.Sprintf(`{"payment":%q,"amount":5.5}`, pay.ID),
		fmt.Sprintf(`{"payment":%q,"reason":"because"}`, pay.ID),
		fmt.Sprintf(`{"payment":%q,"reason":null,"currency":"usd"}`, pay.ID),
		fmt.Sprintf(`{"payment":%q`, pay.ID),
	} {
		resp, data := b.post(t, aliceKey, pathRefunds, "refund-1", body)
		requireProblem(t, resp, data, http.StatusBadRequest, "validation_failed")
	}
	resp, data := b.post(t, aliceKey, pathRefunds, "", refundBody(pay.ID, 0))
	requireProblem(t, resp, data, http.StatusBadRequest, "idempotency_key_missing")

	resp, data = b.do(t, http.MethodGet, "/v1/idempotency_keys/refund-1", aliceKey, nil, nil)
	requireProblem(t, resp, data, http.StatusNotFound, "not_found")
	require.Empty(t, b.simRequests(http.MethodPost, "/v1/refunds"))

	re := b.refund(t, aliceKey, "refund-1", refundBody(pay.ID, 999))
	require.EqualValues(t, 999, re.Amount)
}

// Stripe answers 500: nothing final is stored, and the retry with the same
// key resumes at the Stripe call, with the same child key, refunding once.
func TestRefund_stripeUnavailableIsResumable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pay := b.captured(t, aliceKey, "order-1", 2000)
	require.NoError(t, b.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/refunds", Method: http.MethodPost, Kind: stripesim.FaultError500}))

	resp, data := b.post(t, aliceKey, pathRefunds, "refund-1", refundBody(pay.ID, 0))
	requireProblem(t, resp, data, http.StatusServiceUnavailable, "payment_processor_unavailable")
	requireRetryAfter(t, resp)
	k := b.keyState(t, aliceKey, "refund-1")
	require.Equal(t, "refund_created", k.RecoveryPoint)
	require.False(t, k.Locked)
	require.Nil(t, k.ResponseCode)
	require.Zero(t, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)

	re := b.refund(t, aliceKey, "refund-1", refundBody(pay.ID, 0))
	require.EqualValues(t, 2000, re.Amount)
	require.Len(t, b.simRefundsFor(t, *pay.StripePaymentIntent), 1, "exactly one Stripe refund")
	calls := b.simRequests(http.MethodPost, "/v1/refunds")
	require.Len(t, calls, 2)
	require.Equal(t, calls[0].IdempotencyKey, calls[1].IdempotencyKey, "the retry forwards the same child key")
	require.EqualValues(t, 2000, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM refunds"))
}

func TestRefund_stagesItsEventAndReceipt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const alice = "alice@example.com"
	pay := b.captured(t, aliceKey, "order-1", 2000)

	re := b.refund(t, aliceKey, "refund-1", refundBody(pay.ID, 500))
	require.Equal(t, []string{"merchant_event refund.succeeded", "receipt_email"}, b.stagedJobs(t, alice, "refund-1"))

	var receipt struct {
		Payment, Currency, Reason, Refund string
		Amount                            int64
	}
	var event struct {
		Type   string
		Object refundJSON
	}
	var receiptArgs, eventArgs []byte
	require.NoError(t, b.pool.QueryRow(context.Background(), `
		SELECT (SELECT j.args FROM staged_jobs j WHERE j.idempotency_key_id = k.id AND j.kind = 'receipt_email'),
		       (SELECT j.args FROM staged_jobs j WHERE j.idempotency_key_id = k.id AND j.kind = 'merchant_event')
		FROM idempotency_keys k WHERE k.idempotency_key = 'refund-1'`).Scan(&receiptArgs, &eventArgs))
	require.NoError(t, json.Unmarshal(receiptArgs, &receipt))
	require.NoError(t, json.Unmarshal(eventArgs, &event))
	require.Equal(t, "refund", receipt.Reason)
	require.Equal(t, re.ID, receipt.Refund)
	require.Equal(t, pay.ID, receipt.Payment)
	require.EqualValues(t, 500, receipt.Amount, "the receipt is for the refund, not the payment")
	require.Equal(t, "usd", receipt.Currency)
	require.Equal(t, "refund.succeeded", event.Type)
	require.Equal(t, re, event.Object, "the event carries the refund object")

	// A refusal changes nothing, so it announces nothing; a replay stages nothing more.
	resp, data := b.post(t, aliceKey, pathRefunds, "refund-2", refundBody(pay.ID, 1501))
	requireProblem(t, resp, data, http.StatusBadRequest, "refund_not_allowed")
	require.Empty(t, b.stagedJobs(t, alice, "refund-2"))
	b.refund(t, aliceKey, "refund-1", refundBody(pay.ID, 500))
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM staged_jobs j JOIN idempotency_keys k ON k.id = j.idempotency_key_id
		WHERE k.flow = 'refund_payment'`))
}

// When Stripe refuses a refund our books allowed (it was refunded behind
// our back, say), the refund is failed, its amount is free again, and the
// refusal is the stored answer.
func TestRefund_stripeRefusalFailsTheRefund(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const alice = "alice@example.com"
	pay := b.captured(t, aliceKey, "order-1", 1000)

	// 700 refunded at Stripe directly, not through the service.
	direct := httptest.NewServer(b.sim.Handler())
	t.Cleanup(direct.Close)
	stripe, err := stripeclient.New(stripeclient.Config{SecretKey: "sk_test_dashboard", APIBase: direct.URL})
	require.NoError(t, err)
	_, err = stripe.CreateRefund(context.Background(), "dashboard-refund", stripeclient.RefundRequest{PaymentIntent: *pay.StripePaymentIntent, Amount: 700})
	require.NoError(t, err)

	first, firstBody := b.post(t, aliceKey, pathRefunds, "refund-1", refundBody(pay.ID, 0))
	requireProblem(t, first, firstBody, http.StatusBadRequest, "refund_not_allowed")
	require.Contains(t, string(firstBody), "greater than unrefunded amount", "Stripe's reason is passed on")
	again, againBody := b.post(t, aliceKey, pathRefunds, "refund-1", refundBody(pay.ID, 0))
	requireReplayOf(t, first, firstBody, again, againBody)

	var status, failure string
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT status, failure_reason FROM refunds WHERE payment_id = $1", pay.ID).Scan(&status, &failure))
	require.Equal(t, "failed", status)
	require.Contains(t, failure, "greater than unrefunded amount")
	require.Equal(t, []string{"merchant_event refund.failed"}, b.stagedJobs(t, alice, "refund-1"))
	require.Zero(t, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)

	// The failed refund holds nothing: what Stripe has left can still be refunded.
	re := b.refund(t, aliceKey, "refund-2", refundBody(pay.ID, 300))
	require.Equal(t, "succeeded", re.Status)
	require.EqualValues(t, 300, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
}
