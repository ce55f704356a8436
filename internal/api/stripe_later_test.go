package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// Tests of what Stripe decides after answering (API.md section 2, "Stripe
// decides some outcomes later"): 3-D Secure, refunds that settle or fail
// later. docs/failure-scenarios.md names them.

const threeDSBody = `{"amount":2000,"currency":"usd","payment_method":"pm_card_authenticationRequired"}`

// A card that needs 3-D Secure cannot be completed server to server: 402
// card_declined authentication_required, the payment failed, and nothing
// left at Stripe that could still be captured or completed.
func TestCreate_threeDSecureCardIsDeclinedAsAuthenticationRequired(t *testing.T) {
	t.Parallel()
	b := setup(t)

	first, body := b.post(t, aliceKey, pathPayments, "3ds-1", threeDSBody)
	requireProblem(t, first, body, http.StatusPaymentRequired, "card_declined")
	p := decodeProblem(t, body)
	require.Equal(t, "authentication_required", p.DeclineCode)
	require.NotEmpty(t, p.Payment)

	pay := b.getPayment(t, aliceKey, p.Payment)
	require.Equal(t, "failed", pay.Status)
	require.Equal(t, "authentication_required", *pay.FailureCode)
	require.False(t, pay.Captured)

	intents := b.simIntentsFor(t, p.Payment)
	require.Len(t, intents, 1)
	require.Equal(t, "requires_payment_method", intents[0].Status, "the PaymentIntent cannot go on")
	require.Zero(t, intents[0].AmountCapturable)
	require.Zero(t, intents[0].AmountReceived)
	create := b.simRequests(http.MethodPost, "/v1/payment_intents")
	require.Len(t, create, 1)

	again, againBody := b.post(t, aliceKey, pathPayments, "3ds-1", threeDSBody)
	requireReplayOf(t, first, body, again, againBody)
	require.Equal(t, []string{"merchant_event payment.failed"}, b.stagedJobs(t, "alice@example.com", "3ds-1"))
}

// capture=false with a 3-D Secure card: the same refusal, and no
// authorisation to capture or cancel.
func TestCreate_threeDSecureCardWithCaptureFalse(t *testing.T) {
	t.Parallel()
	b := setup(t)

	resp, body := b.post(t, aliceKey, pathPayments, "3ds-auth",
		`{"amount":2000,"currency":"usd","payment_method":"pm_card_authenticationRequired","capture":false}`)
	requireProblem(t, resp, body, http.StatusPaymentRequired, "card_declined")
	p := decodeProblem(t, body)
	require.Equal(t, "authentication_required", p.DeclineCode)
	require.Equal(t, "failed", b.getPayment(t, aliceKey, p.Payment).Status, "never requires_capture")

	intents := b.simIntentsFor(t, p.Payment)
	require.Len(t, intents, 1)
	require.Equal(t, "requires_payment_method", intents[0].Status)
	require.Zero(t, intents[0].AmountCapturable)

	resp, body = b.post(t, aliceKey, capturePath(p.Payment), "3ds-capture", "")
	requireProblem(t, resp, body, http.StatusBadRequest, "payment_not_capturable")
	require.Empty(t, b.simRequests(http.MethodPost, "/v1/payment_intents/"+intents[0].ID+"/capture"),
		"a payment that was never authorised is refused before Stripe")
	require.Equal(t, "failed", b.getPayment(t, aliceKey, p.Payment).Status)
}
