package stripesim_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"
)

// list is every payment intent stripe-go's iterator walks for params.
func list(t *testing.T, api *client.API, params *stripe.PaymentIntentListParams) []string {
	t.Helper()
	var ids []string
	it := api.PaymentIntents.List(params)
	for it.Next() {
		ids = append(ids, it.PaymentIntent().ID)
	}
	require.NoError(t, it.Err())
	return ids
}

// The list is strongly consistent (a payment intent is in it as soon as it
// is made), newest first, filtered by created and customer, and paged by
// limit, starting_after and ending_before, as stripe-go's iterator expects.
func TestListPaymentIntents(t *testing.T) {
	t.Parallel()
	f := setup(t)
	create := func(customer string) (string, int64) {
		p := paymentIntent("", "pm_card_visa")
		if customer != "" {
			p.Customer = stripe.String(customer)
		}
		pi, err := f.stripe.PaymentIntents.New(p)
		require.NoError(t, err)
		f.clock.Advance(10 * time.Second)
		return pi.ID, pi.Created
	}
	cus, err := f.stripe.Customers.New(&stripe.CustomerParams{})
	require.NoError(t, err)
	a, aCreated := create("")
	b, bCreated := create(cus.ID)
	c, _ := create("")
	d, dCreated := create(cus.ID)

	require.Equal(t, []string{d, c, b, a}, list(t, f.stripe, &stripe.PaymentIntentListParams{}), "newest first, at once")
	paged := &stripe.PaymentIntentListParams{}
	paged.Limit = stripe.Int64(1)
	require.Equal(t, []string{d, c, b, a}, list(t, f.stripe, paged), "paged by starting_after")
	require.Equal(t, []string{d, b}, list(t, f.stripe, &stripe.PaymentIntentListParams{Customer: stripe.String(cus.ID)}))

	between := &stripe.PaymentIntentListParams{CreatedRange: &stripe.RangeQueryParams{
		GreaterThanOrEqual: bCreated, LesserThanOrEqual: dCreated - 1}}
	between.Limit = stripe.Int64(1)
	require.Equal(t, []string{c, b}, list(t, f.stripe, between), "created[gte], created[lte], paged")
	open := &stripe.PaymentIntentListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThan: aCreated, LesserThan: dCreated}}
	require.Equal(t, []string{c, b}, list(t, f.stripe, open), "created[gt], created[lt]")
	require.Equal(t, []string{b}, list(t, f.stripe, &stripe.PaymentIntentListParams{Created: stripe.Int64(bCreated)}), "created exactly")
	require.Empty(t, list(t, f.stripe, &stripe.PaymentIntentListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThan: dCreated}}))

	backwards := &stripe.PaymentIntentListParams{}
	backwards.EndingBefore = stripe.String(a)
	backwards.Limit = stripe.Int64(2)
	require.Equal(t, []string{b, c, d}, list(t, f.stripe, backwards), "ending_before walks towards the newest")

	one := &stripe.PaymentIntentListParams{}
	one.Limit = stripe.Int64(2)
	one.StartingAfter = stripe.String(d)
	one.Single = true
	it := f.stripe.PaymentIntents.List(one)
	var got []string
	for it.Next() {
		got = append(got, it.PaymentIntent().ID)
	}
	require.NoError(t, it.Err())
	require.Equal(t, []string{c, b}, got)
	page := it.PaymentIntentList()
	require.True(t, page.HasMore)
	require.Equal(t, "/v1/payment_intents", page.URL)
}

func TestListPaymentIntentsRejectsWhatStripeRejects(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for name, params := range map[string]*stripe.PaymentIntentListParams{
		"unknown cursor": {ListParams: stripe.ListParams{StartingAfter: stripe.String("pi_missing")}},
		"both cursors":   {ListParams: stripe.ListParams{StartingAfter: stripe.String("pi_a"), EndingBefore: stripe.String("pi_b")}},
		"limit 101":      {ListParams: stripe.ListParams{Limit: stripe.Int64(101)}},
	} {
		it := f.stripe.PaymentIntents.List(params)
		require.False(t, it.Next(), name)
		var se *stripe.Error
		require.ErrorAs(t, it.Err(), &se, name)
		require.Equal(t, http.StatusBadRequest, se.HTTPStatusCode, name)
		require.Equal(t, stripe.ErrorTypeInvalidRequest, se.Type, name)
	}
	for _, query := range []string{"created[gte]=yesterday", "created[after]=1", "status=succeeded"} {
		req, err := http.NewRequest(http.MethodGet, f.url+"/v1/payment_intents?"+query, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+testKey)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, query)
	}
}
