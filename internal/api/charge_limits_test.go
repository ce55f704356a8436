package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 20, item 3: Stripe refuses a charge under its currency's minimum
// (amount_too_small) and a currency it does not charge in. The API refuses
// both before any work (API.md section 2), with 400 validation_failed:
// nothing is stored, nothing reaches Stripe, and the key may be used again
// for the fixed request (rule 6). Before, `amount: 1` and any three letters
// were accepted and became a failed payment.
func TestCreate_amountUnderTheMinimumOrAnUnsupportedCurrencyIs400BeforeAnyWork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tt := range []struct{ name, body, detail string }{
		{"usd under 50", `{"amount":49,"currency":"usd","payment_method":"pm_card_visa"}`, "0.50 usd"},
		{"usd 1", `{"amount":1,"currency":"usd","payment_method":"pm_card_visa"}`, "0.50 usd"},
		{"eur under 50", `{"amount":49,"currency":"eur","payment_method":"pm_card_visa"}`, "0.50 eur"},
		{"gbp under 30", `{"amount":29,"currency":"gbp","payment_method":"pm_card_visa"}`, "0.30 gbp"},
		{"jpy under 50", `{"amount":49,"currency":"jpy","payment_method":"pm_card_visa"}`, "50 jpy"},
		{"unknown currency", `{"amount":2000,"currency":"xyz","payment_method":"pm_card_visa"}`, `"xyz"`},
		{"three-decimal currency", `{"amount":2000,"currency":"kwd","payment_method":"pm_card_visa"}`, `"kwd"`},
	} {
		resp, data := b.post(t, aliceKey, pathPayments, asKey(tt.name), tt.body)
		requireRefusal(t, resp, data, http.StatusBadRequest, "validation_failed", tt.detail)
	}
	b.requireNothingStored(t, 0, 0, 0)

	// The same keys, with the request fixed: executed as new.
	for name, body := range map[string]string{
		"usd under 50":     `{"amount":50,"currency":"usd","payment_method":"pm_card_visa"}`,
		"gbp under 30":     `{"amount":30,"currency":"gbp","payment_method":"pm_card_visa"}`,
		"jpy under 50":     `{"amount":50,"currency":"jpy","payment_method":"pm_card_visa"}`,
		"unknown currency": `{"amount":2000,"currency":"chf","payment_method":"pm_card_visa"}`,
	} {
		pay := b.createPayment(t, aliceKey, asKey(name), body)
		require.Equal(t, "succeeded", pay.Status, name)
	}
}

// The minimum is a charge's: capturing part of an authorisation, or
// refunding part of a charge, may take less (Stripe's amount_to_capture and
// a refund's amount have no minimum of their own).
func TestCaptureAndRefund_mayBeUnderTheMinimumCharge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	auth := b.createPayment(t, aliceKey, "auth-1", authoriseBody)
	resp, data := b.post(t, aliceKey, capturePath(auth.ID), "capture-1", `{"amount":10}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))
	require.EqualValues(t, 10, decodePayment(t, data).AmountCaptured)

	pay := b.captured(t, aliceKey, "order-1", 2000)
	re := b.refund(t, aliceKey, "refund-1", refundBody(pay.ID, 1))
	require.Equal(t, "succeeded", re.Status)
	require.EqualValues(t, 1, re.Amount)
	require.EqualValues(t, 1, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
}
