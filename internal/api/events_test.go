package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// eventPayment is the object of the events the tests write: a whole Payment
// object, as the event worker writes it (the OpenAPI check holds answers to
// the document, which says what an event's object holds).
const eventPayment = `{"id":"pay_x","object":"payment","amount":2000,"currency":"usd","status":"succeeded","captured":true,` +
	`"amount_captured":2000,"amount_refunded":0,"payment_method":"pm_card_visa","stripe_payment_intent":"pi_x",` +
	`"failure_code":null,"failure_message":null,"description":null,"metadata":{},"created":1793534400}`

func TestListEvents_newestFirstOwnOnlyPaginated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	base := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	for i := range 3 {
		_, err := b.pool.Exec(ctx, `INSERT INTO events (id, user_id, type, data, created_at)
			SELECT $1, id, 'payment.succeeded', $3, $2 FROM users WHERE email = 'alice@example.com'`,
			fmt.Sprintf("evt_a%d", i), base.Add(time.Duration(i)*time.Minute), eventPayment)
		require.NoError(t, err)
	}
	_, err := b.pool.Exec(ctx, `INSERT INTO events (id, user_id, type, data) SELECT 'evt_bob', id, 'payment.failed', $1 FROM users WHERE email = 'bob@example.com'`, eventPayment)
	require.NoError(t, err)

	list := func(key, query string) (ids []string, hasMore bool, first map[string]any) {
		resp, body := b.do(t, http.MethodGet, "/v1/events"+query, key, nil, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		var l struct {
			Object  string           `json:"object"`
			Data    []map[string]any `json:"data"`
			HasMore bool             `json:"has_more"`
		}
		require.NoError(t, json.Unmarshal(body, &l))
		require.Equal(t, "list", l.Object)
		for _, e := range l.Data {
			ids = append(ids, e["id"].(string))
		}
		if len(l.Data) > 0 {
			first = l.Data[0]
		}
		return ids, l.HasMore, first
	}
	var payment map[string]any
	require.NoError(t, json.Unmarshal([]byte(eventPayment), &payment))
	ids, more, first := list(aliceKey, "?limit=2")
	require.Equal(t, []string{"evt_a2", "evt_a1"}, ids)
	require.True(t, more)
	require.Equal(t, map[string]any{
		"id": "evt_a2", "object": "event", "type": "payment.succeeded",
		"data":    map[string]any{"object": payment},
		"created": float64(base.Add(2 * time.Minute).Unix()),
	}, first)
	ids, more, _ = list(aliceKey, "?limit=2&starting_after=evt_a1")
	require.Equal(t, []string{"evt_a0"}, ids)
	require.False(t, more)
	ids, _, _ = list(bobKey, "")
	require.Equal(t, []string{"evt_bob"}, ids)

	resp, body := b.do(t, http.MethodGet, "/v1/events?starting_after=evt_bob", aliceKey, nil, nil)
	requireProblem(t, resp, body, http.StatusBadRequest, "validation_failed")
}
