package client_test

// The client half of the tutorial: the README's curl walk-through, from Go.
// Each example runs against the `payments dev` that TestMain started (in
// your program: "http://127.0.0.1:8080", the address `make run` prints).

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/example/payments/client"
)

// Charge $20.00, then send the very same call again, as a program that
// crashed before it saw the answer would after its restart: the order's id
// is the key, so the second call gets the first answer, replayed, and the
// card is charged once.
func Example() {
	ctx := context.Background()
	c := client.New(baseURL, "sk_dev_alice_0123456789abcdef")
	orderKey := "order-1001-" + runID // one key per intent to pay: the order's id

	p, err := c.CreatePayment(ctx, client.CreatePaymentParams{
		Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_visa",
	}, client.WithIdempotencyKey(orderKey))
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println(p.Status, p.Amount, p.Currency, "replayed:", p.Replayed)

	again, err := c.CreatePayment(ctx, client.CreatePaymentParams{
		Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_visa",
	}, client.WithIdempotencyKey(orderKey))
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println("same payment:", again.ID == p.ID, "replayed:", again.Replayed)
	// Output:
	// succeeded 2000 usd replayed: false
	// same payment: true replayed: true
}

// A declined card is a final answer: the client does not retry it, and the
// error says why, with the failed payment's id.
func Example_declinedCard() {
	ctx := context.Background()
	c := client.New(baseURL, "sk_dev_alice_0123456789abcdef")

	_, err := c.CreatePayment(ctx, client.CreatePaymentParams{
		Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_chargeDeclinedInsufficientFunds",
	})
	var e *client.Error
	if errors.As(err, &e) && e.Code == client.CodeCardDeclined {
		p, _ := c.GetPayment(ctx, e.Payment)
		fmt.Println(e.Status, e.Code, e.DeclineCode, "payment:", p.Status)
	}
	// Output:
	// 402 card_declined insufficient_funds payment: failed
}

// Stripe fails once: the service answers 503 with Retry-After and keeps
// the request resumable; the client waits, retries with the same key, and
// the request finishes where it stopped. The observer shows the attempts.
func ExampleWithObserver() {
	ctx := context.Background()
	stripeFailsOnce() // the simulator's error_500 fault, on the next PaymentIntent

	c := client.New(baseURL, "sk_dev_alice_0123456789abcdef",
		client.WithObserver(func(a client.Attempt) {
			fmt.Printf("attempt %d: %d, retry: %v, waiting at least Retry-After: %v\n",
				a.Number, a.Status, a.Retry, a.Wait.Seconds() >= 2)
		}))
	p, err := c.CreatePayment(ctx, client.CreatePaymentParams{
		Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_visa",
	})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println(p.Status)
	// Output:
	// attempt 1: 503, retry: true, waiting at least Retry-After: true
	// attempt 2: 201, retry: false, waiting at least Retry-After: false
	// succeeded
}

// Authorise now, capture part of it later; then refund some of what was
// captured.
func ExampleClient_CapturePayment() {
	ctx := context.Background()
	c := client.New(baseURL, "sk_dev_alice_0123456789abcdef")

	p, err := c.CreatePayment(ctx, client.CreatePaymentParams{
		Amount: 5000, Currency: "eur", PaymentMethod: "pm_card_visa", Capture: client.Bool(false),
	})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println(p.Status)

	p, err = c.CapturePayment(ctx, p.ID, client.CapturePaymentParams{Amount: client.Int64(4000)})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println(p.Status, p.AmountCaptured)

	r, err := c.CreateRefund(ctx, client.CreateRefundParams{
		Payment: p.ID, Amount: client.Int64(1500), Reason: client.String("requested_by_customer"),
	})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	p, _ = c.GetPayment(ctx, p.ID)
	fmt.Println(r.Status, r.Amount, "refunded so far:", p.AmountRefunded)
	// Output:
	// requires_capture
	// succeeded 4000
	// succeeded 1500 refunded so far: 1500
}

// Where a request made with a key stands: finished, with the answer stored.
func ExampleClient_GetIdempotencyKey() {
	ctx := context.Background()
	c := client.New(baseURL, "sk_dev_alice_0123456789abcdef")
	orderKey := "order-1002-" + runID

	if _, err := c.CreatePayment(ctx, client.CreatePaymentParams{
		Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_visa",
	}, client.WithIdempotencyKey(orderKey)); err != nil {
		fmt.Println("error:", err)
		return
	}
	k, err := c.GetIdempotencyKey(ctx, orderKey)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println(k.RecoveryPoint, *k.ResponseCode, "locked:", k.Locked)
	// Output:
	// finished 201 locked: false
}

// stripeFailsOnce tells the simulator to answer the next PaymentIntent it
// is asked for with a 500, before doing anything (as Stripe does, now and
// then).
func stripeFailsOnce() {
	resp, err := http.Post(simURL+"/_sim/faults", "application/json",
		strings.NewReader(`{"path_prefix":"/v1/payment_intents","method":"POST","kind":"error_500","count":1}`))
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
}
