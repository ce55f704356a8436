package api_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/currency"
)

// Each currency of Stripe's published minimum charge amounts (package
// currency's TestPublishedMinimums holds the table to Stripe's page), through
// the API: one minor unit under the minimum is 400 validation_failed naming
// the minimum, before any work; the minimum itself is a payment Stripe (the
// simulator) charges.
func TestCreate_eachCurrencysMinimumCharge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	codes := []string{"usd", "aed", "aud", "bgn", "brl", "cad", "chf", "czk", "dkk", "eur", "gbp", "hkd",
		"huf", "inr", "jpy", "mxn", "myr", "nok", "nzd", "pln", "ron", "sek", "sgd", "thb"}
	for _, code := range codes {
		c, ok := currency.Lookup(code)
		require.True(t, ok, code)
		require.Greater(t, c.MinCharge, int64(1), "%s has a published minimum", code)

		under := fmt.Sprintf(`{"amount":%d,"currency":%q,"payment_method":"pm_card_visa"}`, c.MinCharge-1, code)
		resp, data := b.post(t, aliceKey, pathPayments, "under-"+code, under)
		requireRefusal(t, resp, data, http.StatusBadRequest, "validation_failed", c.Format(c.MinCharge))

		at := fmt.Sprintf(`{"amount":%d,"currency":%q,"payment_method":"pm_card_visa"}`, c.MinCharge, code)
		pay := b.createPayment(t, aliceKey, "at-"+code, at)
		require.Equal(t, "succeeded", pay.Status, code)
		require.Equal(t, c.MinCharge, pay.Amount, code)
	}
	require.Len(t, b.sim.Requests(), len(codes), "only the payments at the minimum reached Stripe")
}
