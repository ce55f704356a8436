package api

import (
	"errors"
	"net/http"
	"testing"

	"github.com/example/payments/internal/currency"
	"github.com/example/payments/internal/problem"
)

// FuzzDecodeCreatePayment feeds arbitrary bodies to the create-payment
// decoding and validation: whatever comes in, the answer is a valid request
// or a 400 validation_failed problem, never a panic; a decoded request
// corresponds one to one to the canonical JSON it is fingerprinted by, and an
// accepted request is always within the contract's bounds.
func FuzzDecodeCreatePayment(f *testing.F) {
	for _, seed := range []string{
		`{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`,
		`{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","capture":false,"description":"x","metadata":{"a":"b"}}`,
		`{"amount":-1}`, `{"amount":1e3}`, `{"amount":"2000"}`, `[]`, `null`, `{}`, `{"x":1}`, `{"amount":1}}`,
		`{"metadata":{"a":{"b":1}}}`, `{"amount":99999999999999999999}`, "\x00", `{"currency":"USD"}`,
		`{"amount":100,"AMOUNT":5000,"currency":"usd","payment_method":"pm_card_visa"}`,
		`{"amount":100,"currency":"usd","payment_method":"pm_card_visa","de\u017fcription":"x"}`,
		`{"amount":100,"currency":"usd","payment_method":"pm_card_visa","description":null}`,
		`{"amount":null,"currency":"usd","payment_method":"pm_card_visa","metadata":{"a":null}}`,
		`{"amount":100,"currency":"\u0075sd","payment_method":"pm_card_visa","metadata":{"a":"\ud800"}}`,
		"{\"amount\":100,\"currency\":\"usd\",\"payment_method\":\"pm_\xff\"}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req createPaymentRequest
		taken, err := decodeJSON(body, &req, false)
		var params struct{ ok bool }
		if err == nil {
			requireOneToOne(t, taken, req)
			p, verr := req.validate()
			err = verr
			if verr == nil {
				params.ok = true
				if currency.CheckCharge(p.Currency, p.Amount) != nil || p.PaymentMethod == "" {
					t.Fatalf("accepted out-of-bounds request %+v from %q", p, body)
				}
			}
		}
		if params.ok {
			return
		}
		var prob *problem.Problem
		if !errors.As(err, &prob) || prob.Status != http.StatusBadRequest || prob.Code != problem.ValidationFailed {
			t.Fatalf("body %q: want 400 validation_failed, got %v", body, err)
		}
	})
}
