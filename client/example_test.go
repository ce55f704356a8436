package client_test

// The client half of the tutorial: the README's curl walk-through, from Go.
// Each example runs against the `payments dev` that TestMain started (in
// your program: "http://127.0.0.1:8080", the address `make run` prints).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/example/payments/client"
	"github.com/example/payments/client/webhook"
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

// Every error of a call carries its Idempotency-Key (the one the caller
// gave, or the one the client made) and, when the service answered, the
// request's id in the service's logs: what to retry with, and what to quote
// in a support ticket. No answer at all is a *client.NetworkError, with the
// key too.
func Example_errors() {
	ctx := context.Background()
	c := client.New(baseURL, "sk_dev_alice_0123456789abcdef")
	orderKey := "order-1003-" + runID

	_, err := c.CreatePayment(ctx, client.CreatePaymentParams{
		Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_chargeDeclinedInsufficientFunds",
	}, client.WithIdempotencyKey(orderKey))
	var e *client.Error
	if errors.As(err, &e) {
		fmt.Println(e.Code, "key:", e.IdempotencyKey == orderKey, "request id:", e.RequestID != "")
	}

	// A service that is not there: the attempts run out with no answer.
	down := client.New("http://127.0.0.1:1", "sk_dev_alice_0123456789abcdef", client.WithMaxAttempts(2))
	_, err = down.CreatePayment(ctx, client.CreatePaymentParams{
		Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_visa",
	}, client.WithIdempotencyKey(orderKey+"-down"))
	var ne *client.NetworkError
	if errors.As(err, &ne) {
		fmt.Println("no answer after", ne.Attempts, "attempts; send it again with", ne.IdempotencyKey == orderKey+"-down")
	}
	// Output:
	// card_declined key: true request id: true
	// no answer after 2 attempts; send it again with true
}

// Iterate over the payments, newest first: the pages (two payments each
// here) are fetched as the loop reaches them, and breaking out of the loop
// fetches no more.
func ExampleClient_ListPayments() {
	ctx := context.Background()
	c := client.New(baseURL, "sk_dev_alice_0123456789abcdef")
	for _, amount := range []int64{1001, 1002, 1003} {
		if _, err := c.CreatePayment(ctx, client.CreatePaymentParams{
			Amount: amount, Currency: "usd", PaymentMethod: "pm_card_visa",
		}); err != nil {
			fmt.Println("error:", err)
			return
		}
	}

	n := 0
	for p, err := range c.ListPayments(ctx, client.ListParams{Limit: client.Int64(2)}) {
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Println(p.Amount, p.Status)
		if n++; n == 3 {
			break
		}
	}
	// Output:
	// 1003 succeeded
	// 1002 succeeded
	// 1001 succeeded
}

// Receive the service's webhooks: register an endpoint (its secret comes
// in the answer), and verify each delivery with package webhook before
// acting on it. Here the endpoint is a server of this example's, and the
// event the one of a payment made after it was registered.
func ExampleClient_CreateWebhookEndpoint() {
	ctx := context.Background()
	c := client.New(baseURL, "sk_dev_alice_0123456789abcdef")

	var secret atomic.Pointer[string] // the endpoint's, once registered
	received := make(chan *client.Event, 16)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return
		}
		event, err := webhook.ParseEvent(*secret.Load(), r.Header, body, webhook.DefaultTolerance)
		if err != nil {
			http.Error(w, "not signed by the payments service", http.StatusBadRequest)
			return
		}
		received <- event // process each event id once: redeliveries repeat it
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()

	secret.Store(new(string)) // until then, nothing verifies
	endpoint, err := c.CreateWebhookEndpoint(ctx, client.CreateWebhookEndpointParams{
		URL: receiver.URL, EnabledEvents: []string{"payment.succeeded"},
		Description: client.String("the example's receiver"),
	})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer c.DeleteWebhookEndpoint(ctx, endpoint.ID)
	secret.Store(&endpoint.Secret)

	p, err := c.CreatePayment(ctx, client.CreatePaymentParams{Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_visa"})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	for {
		select {
		case event := <-received:
			if paid, err := event.Payment(); err == nil && paid.ID == p.ID {
				fmt.Println("verified:", event.Type, paid.Amount)
				return
			}
		case <-time.After(30 * time.Second):
			fmt.Println("no delivery within 30 s")
			return
		}
	}
	// Output:
	// verified: payment.succeeded 2000
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
