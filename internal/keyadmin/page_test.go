package keyadmin_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/keyadmin"
	"github.com/example/payments/internal/payments"
)

// The console's list: newest first, by state (finished too, or every key),
// flow and age, a page at a time; and the counts by flow and recovery point.
func TestAdmin_pageListsNewestFirstByStateFlowAndAgeAndCountsByPoint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.abandon(t, "after_commit:payment_created", "stuck-1")
	admin, svc, _ := b.admin(t, "")
	for _, key := range []string{"done-1", "done-2"} {
		b.now = b.now.Add(time.Second) // the engine's clock: each key newer than the last
		_, err := svc.Create(ctx, payments.KeyedRequest{
			UserID: b.userID, Key: key, Method: "POST", Path: "/v1/payments",
			Body: []byte(`{"amount":1500,"currency":"usd","payment_method":"pm_card_visa"}`),
		}, payments.CreateParams{Amount: 1500, Currency: "usd", PaymentMethod: "pm_card_visa", Capture: true})
		require.NoError(t, err)
	}
	keys := func(p keyadmin.PageParams) []string {
		t.Helper()
		if p.Limit == 0 {
			p.Limit = 10
		}
		page, err := admin.Page(ctx, p)
		require.NoError(t, err)
		out := []string{}
		for _, s := range page {
			out = append(out, s.Key)
		}
		return out
	}
	require.Equal(t, []string{"done-2", "done-1", "stuck-1"}, keys(keyadmin.PageParams{}))
	require.Equal(t, []string{"done-2", "done-1"}, keys(keyadmin.PageParams{State: keyadmin.Finished}))
	require.Equal(t, []string{"stuck-1"}, keys(keyadmin.PageParams{State: keyadmin.Unfinished, UserEmail: alice}))
	require.Equal(t, []string{}, keys(keyadmin.PageParams{Flow: "redeliver_event"}))
	require.Equal(t, []string{}, keys(keyadmin.PageParams{MinAge: time.Hour}))

	first, err := admin.Page(ctx, keyadmin.PageParams{Limit: 2})
	require.NoError(t, err)
	require.Len(t, first, 2)
	last := first[1]
	require.Equal(t, []string{"stuck-1"}, keys(keyadmin.PageParams{BeforeCreated: last.Created, BeforeID: last.ID}))

	_, err = admin.Page(ctx, keyadmin.PageParams{State: "lost", Limit: 1})
	require.Error(t, err)
	_, err = admin.Page(ctx, keyadmin.PageParams{UserEmail: "nobody@example.com", Limit: 1})
	require.ErrorIs(t, err, keyadmin.ErrUnknownUser)

	counts, err := admin.Counts(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []keyadmin.Count{
		{Flow: "create_payment", RecoveryPoint: "finished", Keys: 2},
		{Flow: "create_payment", RecoveryPoint: "payment_created", Keys: 1},
	}, counts)
}
