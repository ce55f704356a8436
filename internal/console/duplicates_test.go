package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// The payment page shows the payment's dispute and its duplicate charges
// (docs/API.md section 2: Stripe's evidence "shows in the console"), and
// /metrics counts the duplicates, read from the rows.
func TestConsole_paymentPageShowsDisputeAndDuplicateCharges(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	status, resp := e.apiPost("/v1/payments", "dup-page", `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`)
	require.Equal(t, http.StatusCreated, status, resp)
	var payment struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(resp), &payment))

	b := e.browser()
	b.signIn()
	page := b.get("/console/payments/" + payment.ID)
	require.Equal(t, http.StatusOK, page.status)
	require.Contains(t, page.body, "<dt>Dispute</dt><dd>none</dd>")
	require.Contains(t, page.body, "<h2>Duplicate charges</h2>\n<p>None.</p>")

	// As the webhook's code writes them (internal/payments: dispute.go,
	// duplicate.go).
	_, err := e.app.Pool.Exec(context.Background(), `UPDATE payments SET
		dispute = '{"id":"dp_page","status":"needs_response","reason":"fraudulent","amount":2000,"created":1}',
		duplicate_charges = '[{"stripe_payment_intent":"pi_second","amount":2000,"status":"refunded"}]'
		WHERE id = $1`, payment.ID)
	require.NoError(t, err)
	page = b.get("/console/payments/" + payment.ID)
	require.Equal(t, http.StatusOK, page.status)
	require.Contains(t, page.body, "<code>dp_page</code> needs_response (fraudulent), 2000")
	require.Contains(t, page.body, `<td><code>pi_second</code></td><td class="num">2000</td><td>refunded</td>`)

	metrics, err := http.Get(e.server.URL + "/metrics")
	require.NoError(t, err)
	defer metrics.Body.Close()
	text, err := io.ReadAll(metrics.Body)
	require.NoError(t, err)
	require.Contains(t, string(text), `payments_stripe_duplicates_total{object="payment_intent"} 1`)
	require.Contains(t, string(text), `payments_stripe_duplicates_total{object="refund"} 0`)
}
