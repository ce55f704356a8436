package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"

	"github.com/google/uuid"
	"github.com/stripe/stripe-go/v76"

	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/stripeclient"
)

// The A-own floor: payments.Service.Create, the real create-payment flow
// on the engine (the same phases, the same SQL), in a service built with
// payments.WithCreatePaymentIntent: its Stripe call answers at once with a
// succeeded PaymentIntent and calls nobody. This no-op is for this benchmark only, a floor with no
// HTTP and no Stripe; tests never replace Stripe with it. A-own and B
// therefore show the same statements and round trips per request in the
// report (12 and 2, the figures internal/payments/roundtrips_test.go pins;
// B's API key lookups are cached).

// createBody is the request body of every new payment in B, D and E.
const createBody = `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`

var ownParams = payments.CreateParams{Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_visa", Capture: true}

// stripeSaysYes is the create flow's Stripe call in the floor: a
// succeeded PaymentIntent, at once.
func stripeSaysYes(_ context.Context, _ string, r stripeclient.PaymentIntentRequest) (*stripe.PaymentIntent, error) {
	return &stripe.PaymentIntent{
		ID: "pi_" + randomHex(), Status: stripe.PaymentIntentStatusSucceeded,
		Amount: r.Amount, AmountReceived: r.Amount, Currency: stripe.Currency(r.Currency),
	}, nil
}

// ownRequest runs one new request with a new key through the service's create flow.
func ownRequest(ctx context.Context, svc *payments.Service, users []benchUser, rng *rand.Rand) (string, error) {
	u := users[rng.IntN(len(users))]
	resp, err := svc.Create(ctx, payments.KeyedRequest{
		UserID: u.id, Key: uuid.NewString(), Method: http.MethodPost, Path: "/v1/payments", Body: []byte(createBody),
	}, ownParams)
	if err != nil {
		return "", err
	}
	if resp.Replayed {
		return fmt.Sprintf("%d replayed", resp.Status), nil
	}
	return fmt.Sprint(resp.Status), nil
}

func randomHex() string {
	u := uuid.New()
	return fmt.Sprintf("%x", u[:12])
}
