package stripesim_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"
)

func search(t *testing.T, api *client.API, query string, limit int64) []string {
	t.Helper()
	params := &stripe.PaymentIntentSearchParams{}
	params.Query = query
	params.Limit = stripe.Int64(limit)
	var ids []string
	it := api.PaymentIntents.Search(params)
	for it.Next() {
		ids = append(ids, it.PaymentIntent().ID)
	}
	require.NoError(t, it.Err())
	return ids
}

func TestSearchByMetadata(t *testing.T) {
	t.Parallel()
	f := setup(t)
	create := func(md map[string]string) string {
		p := paymentIntent("", "pm_card_visa")
		p.Metadata = md
		pi, err := f.stripe.PaymentIntents.New(p)
		require.NoError(t, err)
		return pi.ID
	}
	a := create(map[string]string{"key_row": "1", "tenant": "t1"})
	b := create(map[string]string{"key_row": "2", "tenant": "t1"})
	c := create(map[string]string{"key_row": "3", "tenant": "t1"})
	quoted := create(map[string]string{"note": `it's "fine"`})

	require.Equal(t, []string{b}, search(t, f.stripe, "metadata['key_row']:'2'", 10))
	require.Equal(t, []string{c, b, a}, search(t, f.stripe, `metadata["tenant"]:"t1"`, 10), "newest first")
	require.Equal(t, []string{c, b, a}, search(t, f.stripe, "metadata['tenant']:'t1'", 1), "paged by next_page")
	require.Equal(t, []string{a}, search(t, f.stripe, "metadata['tenant']:'t1' AND metadata['key_row']:'1'", 10))
	require.Equal(t, []string{a}, search(t, f.stripe, "metadata['key_row']:'1' AND status:'succeeded' AND currency:'usd'", 10))
	require.Empty(t, search(t, f.stripe, "metadata['key_row']:'1' AND status:'canceled'", 10))
	require.Empty(t, search(t, f.stripe, "metadata['key_row']:'4'", 10))
	require.Equal(t, []string{quoted}, search(t, f.stripe, `metadata['note']:'it\'s "fine"'`, 10))

	params := &stripe.PaymentIntentSearchParams{}
	params.Query = "metadata['tenant']:'t1'"
	params.Single = true
	params.Limit = stripe.Int64(2)
	it := f.stripe.PaymentIntents.Search(params)
	for it.Next() {
	}
	require.NoError(t, it.Err())
	result := it.PaymentIntentSearchResult()
	require.True(t, result.HasMore)
	require.NotNil(t, result.NextPage)
	require.Equal(t, "/v1/payment_intents/search", result.URL)
}

func TestSearchRejectsQueriesItCannotAnswer(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, query := range []string{
		"metadata['k']:'v' OR metadata['k']:'w'",
		"metadata['k']>'v'",
		"metadata[k]:'v'",
		"amount:2000",
		"metadata['k']:'unterminated",
	} {
		params := &stripe.PaymentIntentSearchParams{}
		params.Query = query
		it := f.stripe.PaymentIntents.Search(params)
		require.False(t, it.Next(), query)
		requireStripeError(t, it.Err(), http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, "parameter_invalid")
	}
}
