package client_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/client"
)

// ListPayments walks every page, newest first, as the pages themselves
// would give them: the same ids in the same order, none twice; and a loop
// that stops early fetches no page it did not reach.
func TestListPayments_iteratesOverEveryPage(t *testing.T) {
	var seen attempts
	c := newClient(t, client.WithObserver(seen.observe))
	ctx := ctxTimeout(t, 2*time.Minute)
	var made []string
	for range 3 {
		p, err := c.CreatePayment(ctx, visa(1100))
		require.NoError(t, err)
		made = append(made, p.ID)
	}

	var paged []string
	params := client.ListParams{Limit: client.Int64(2)}
	for {
		page, err := c.ListPaymentsPage(ctx, params)
		require.NoError(t, err)
		for _, p := range page.Data {
			paged = append(paged, p.ID)
		}
		if !page.HasMore {
			break
		}
		params.StartingAfter = &page.Data[len(page.Data)-1].ID
	}

	seen.seen = nil
	var iterated []string
	for p, err := range c.ListPayments(ctx, client.ListParams{Limit: client.Int64(2)}) {
		require.NoError(t, err)
		iterated = append(iterated, p.ID)
	}
	require.Equal(t, paged, iterated)
	require.Equal(t, (len(iterated)+1)/2, len(seen.seen), "one request a page") // the last page may be full and say has_more false
	require.Len(t, slices.Compact(slices.Sorted(slices.Values(iterated))), len(iterated), "no payment twice")
	slices.Reverse(made)
	require.Equal(t, made, iterated[:3], "newest first")

	// Starting after the newest, and stopping at the third: two pages.
	seen.seen = nil
	var some []string
	for p, err := range c.ListPayments(ctx, client.ListParams{Limit: client.Int64(2), StartingAfter: &made[0]}) {
		require.NoError(t, err)
		if some = append(some, p.ID); len(some) == 3 {
			break
		}
	}
	require.Equal(t, iterated[1:4], some)
	require.Len(t, seen.seen, 2)
}

// An error ends the iteration, yielded once with no item.
func TestListEvents_anErrorEndsTheIteration(t *testing.T) {
	calls := 0
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls == 1 {
			require.Equal(t, "payment.succeeded", r.URL.Query().Get("type"))
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"evt_2","object":"event","type":"payment.succeeded","data":{"object":{}},"created":2}],"has_more":true}`))
			return
		}
		require.Equal(t, "evt_2", r.URL.Query().Get("starting_after"))
		require.Equal(t, "payment.succeeded", r.URL.Query().Get("type"))
		writeProblem(w, http.StatusUnauthorized, "unauthorized", "")
	}))
	defer server.Close()
	var ids []string
	var errs []error
	for e, err := range client.New(server.URL, aliceKey).ListEvents(ctxTimeout(t, time.Minute), client.ListEventsParams{Type: client.String("payment.succeeded")}) {
		if err != nil {
			require.Nil(t, e)
			errs = append(errs, err)
			continue
		}
		ids = append(ids, e.ID)
	}
	require.Equal(t, []string{"evt_2"}, ids)
	require.Len(t, errs, 1)
	var ae *client.Error
	require.ErrorAs(t, errs[0], &ae)
	require.Equal(t, client.CodeUnauthorized, ae.Code)
	require.Equal(t, 2, calls)
}

// An optional field set to zero is sent, not taken for "left out": a
// refund of amount 0 is refused, and nothing is refunded (when 0 meant
// "all", it refunded everything).
func TestCreateRefund_aZeroAmountIsSentNotDropped(t *testing.T) {
	c := newClient(t)
	ctx := ctxTimeout(t, time.Minute)
	p, err := c.CreatePayment(ctx, visa(3100))
	require.NoError(t, err)

	_, err = c.CreateRefund(ctx, client.CreateRefundParams{Payment: p.ID, Amount: client.Int64(0)})
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, client.CodeValidationFailed, e.Code)
	got, err := c.GetPayment(ctx, p.ID)
	require.NoError(t, err)
	require.Zero(t, got.AmountRefunded)

	authorised, err := c.CreatePayment(ctx, client.CreatePaymentParams{
		Amount: 3200, Currency: "usd", PaymentMethod: "pm_card_visa", Capture: client.Bool(false),
	})
	require.NoError(t, err)
	_, err = c.CapturePayment(ctx, authorised.ID, client.CapturePaymentParams{Amount: client.Int64(0)})
	require.ErrorAs(t, err, &e)
	require.Equal(t, client.CodeValidationFailed, e.Code)
	got, err = c.GetPayment(ctx, authorised.ID)
	require.NoError(t, err)
	require.Equal(t, client.PaymentRequiresCapture, got.Status, "nothing captured")
}
