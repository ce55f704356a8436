package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// requireRefusal checks a problem+json answer, its code, and that its detail
// names what was wrong.
func requireRefusal(t *testing.T, resp *http.Response, data []byte, status int, code, detail string) {
	t.Helper()
	requireProblem(t, resp, data, status, code)
	var p struct{ Detail string }
	require.NoError(t, json.Unmarshal(data, &p))
	require.Contains(t, p.Detail, detail, string(data))
}

// asKey makes an idempotency key of a test case's name.
func asKey(name string) string { return strings.ReplaceAll(name, " ", "_") }

// requireNothingStored checks rule 6 for the refusals before it: no key row,
// no payment beyond the ones the test made, nothing sent to Stripe.
func (b *testBundle) requireNothingStored(t *testing.T, keys, payments, stripeRequests int) {
	t.Helper()
	require.Equal(t, keys, b.keyRows(t), "no key was stored")
	require.Equal(t, payments, b.count(t, "SELECT count(*) FROM payments"), "no payment was made")
	require.Len(t, b.sim.Requests(), stripeRequests, "nothing reached Stripe")
}

// Issue 14, item 3: encoding/json matches field names case-insensitively and
// lets the last duplicate win, while the fingerprint was of the raw JSON, so
// {"amount":100,"AMOUNT":5000} charged 5,000 and the same key with the
// fields in the other order was replayed as that payment. A name given twice
// or in another case is now 400 validation_failed, at every depth, naming
// the field, and nothing is stored, so the key may be used for the fixed body.
func TestStrictJSON_caseVariantsAndDuplicatesAre400(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const rest = `"currency":"usd","payment_method":"pm_card_visa"`
	for _, tt := range []struct{ name, body, detail string }{
		{"lower then upper", `{"amount":100,"AMOUNT":5000,` + rest + `}`, `"AMOUNT"`},
		{"upper then lower", `{"AMOUNT":5000,"amount":100,` + rest + `}`, `"AMOUNT"`},
		{"only another case", `{"Amount":100,` + rest + `}`, `"Amount"`},
		{"given twice", `{"amount":100,"amount":5000,` + rest + `}`, `"amount" is given twice`},
		{"twice, once escaped", `{"amount":100,"\u0061mount":5000,` + rest + `}`, `"amount" is given twice`},
		{"Unicode case folding", `{"amount":100,` + rest + `,"de\u017fcription":"x"}`, `"deſcription"`},
		{"an object twice", `{"amount":100,` + rest + `,"metadata":{},"metadata":{"k":"v"}}`, `"metadata" is given twice`},
		{"capture in another case", `{"amount":100,` + rest + `,"Capture":false}`, `"Capture"`},
		{"metadata key twice", `{"amount":100,` + rest + `,"metadata":{"a":"1","a":"2"}}`, `metadata: the key "a" is given twice`},
		{"metadata key twice, once escaped", `{"amount":100,` + rest + `,"metadata":{"a":"1","\u0061":"2"}}`, `metadata: the key "a" is given twice`},
		{"null metadata value", `{"amount":100,` + rest + `,"metadata":{"a":null}}`, `metadata.a`},
		{"minus zero", `{"amount":-0,` + rest + `}`, `amount`},
		{"exponent", `{"amount":2.0e3,` + rest + `}`, `amount`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, data := b.post(t, aliceKey, pathPayments, asKey(tt.name), tt.body)
			requireRefusal(t, resp, data, http.StatusBadRequest, "validation_failed", tt.detail)
		})
	}
	b.requireNothingStored(t, 0, 0, 0)

	pay := b.createPayment(t, aliceKey, asKey("lower then upper"), `{"amount":100,`+rest+`}`)
	require.EqualValues(t, 100, pay.Amount)
	require.EqualValues(t, 100, b.simIntentsFor(t, pay.ID)[0].Amount)

	// The other bodies: a capture's and a refund's.
	auth := b.createPayment(t, aliceKey, "auth-1", authoriseBody)
	for _, body := range []string{`{"amount":100,"Amount":2000}`, `{"amount":100,"amount":2000}`} {
		resp, data := b.post(t, aliceKey, capturePath(auth.ID), "capture-1", body)
		requireRefusal(t, resp, data, http.StatusBadRequest, "validation_failed", `"amount"`)
	}
	for body, detail := range map[string]string{
		fmt.Sprintf(`{"payment":%q,"amount":10,"AMOUNT":100}`, pay.ID): `"AMOUNT"`,
		fmt.Sprintf(`{"payment":%q,"amount":10,"amount":100}`, pay.ID): `"amount" is given twice`,
		fmt.Sprintf(`{"payment":%q,"Payment":%q}`, pay.ID, auth.ID):    `"Payment"`,
	} {
		resp, data := b.post(t, aliceKey, pathRefunds, "refund-1", body)
		requireRefusal(t, resp, data, http.StatusBadRequest, "validation_failed", detail)
	}
	b.requireNothingStored(t, 2, 2, 2)
	require.Equal(t, "requires_capture", b.getPayment(t, aliceKey, auth.ID).Status)
	require.Zero(t, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
}

// The scenario of issue 14 item 3: one key, the same two fields in both
// orders. Before, the first charged 5,000 and the second was replayed as
// that payment; now both are refused and nothing is stored.
func TestStrictJSON_fieldsInTheOtherOrderAreNotAReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, body := range []string{
		`{"amount":100,"AMOUNT":5000,"currency":"usd","payment_method":"pm_card_visa"}`,
		`{"AMOUNT":5000,"amount":100,"currency":"usd","payment_method":"pm_card_visa"}`,
	} {
		resp, data := b.post(t, aliceKey, pathPayments, "order-1", body)
		requireRefusal(t, resp, data, http.StatusBadRequest, "validation_failed", `"AMOUNT"`)
		require.Empty(t, resp.Header.Get("Idempotent-Replayed"))
	}
	b.requireNothingStored(t, 0, 0, 0)
}

// Issue 14, item 4: PostgreSQL refuses NUL and invalid UTF-8 in text, so
// they were 500s; and encoding/json quietly turned invalid UTF-8 into U+FFFD,
// charging for a description the client did not send. Every body string,
// value or key, is now checked before anything is stored.
func TestHostileText_bodyStringsAre400(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const head = `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa",`
	for _, tt := range []struct{ name, body, detail string }{
		{"NUL in description", head + `"description":"a\u0000b"}`, "description"},
		{"NUL in a metadata value", head + `"metadata":{"k":"\u0000"}}`, "metadata.k"},
		{"NUL in a metadata key", head + `"metadata":{"a\u0000":"v"}}`, "metadata"},
		{"NUL in payment_method", `{"amount":2000,"currency":"usd","payment_method":"pm_\u0000"}`, "payment_method"},
		{"invalid UTF-8 in description", head + "\"description\":\"a\xffb\"}", "UTF-8"},
		{"invalid UTF-8 in a metadata key", head + "\"metadata\":{\"\xc3\":\"v\"}}", "UTF-8"},
		{"a lone surrogate", head + `"description":"a\ud800b"}`, "surrogate"},
		{"a reversed surrogate pair", head + `"description":"\ude00\ud83d"}`, "surrogate"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, data := b.post(t, aliceKey, pathPayments, asKey(tt.name), tt.body)
			requireRefusal(t, resp, data, http.StatusBadRequest, "validation_failed", tt.detail)
		})
	}
	b.requireNothingStored(t, 0, 0, 0)

	// A well-formed pair and a real U+FFFD are text like any other.
	pay := b.createPayment(t, aliceKey, asKey("NUL in description"), head+`"description":"\ud83d\ude00 \ufffd"}`)
	require.Equal(t, "\U0001F600 \uFFFD", *pay.Description)

	resp, data := b.post(t, aliceKey, pathRefunds, "refund-1", `{"payment":"pay_\u0000"}`)
	requireRefusal(t, resp, data, http.StatusBadRequest, "validation_failed", "payment")
	resp, data = b.post(t, aliceKey, pathRefunds, "refund-1", "{\"payment\":\"pay_\xff\"}")
	requireRefusal(t, resp, data, http.StatusBadRequest, "validation_failed", "UTF-8")
	b.requireNothingStored(t, 1, 1, 1)
	b.refund(t, aliceKey, "refund-1", refundBody(pay.ID, 0))
}
