package merchanthooks_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/merchanthooks"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/recovery/recoverytest"
	"github.com/example/payments/internal/users"
)

// The merchant webhook flows, proven exactly-once by recoverytest: killed
// at every failpoint their declarations name, resumed by a retry and by the
// completer. They call nobody; their effects are their rows.
func TestProve_everyMerchantWebhookFlow(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		flow    string
		request func(t *testing.T, pool *pgxpool.Pool) (path string, params any)
		// effects counts what the flow's runs did, beyond what one run per
		// key does: 0 when none acted twice.
		effects string
		want    recoverytest.Want
	}{
		{"create_webhook_endpoint", func(*testing.T, *pgxpool.Pool) (string, any) {
			return "/v1/webhook_endpoints", merchanthooks.CreateParams{URL: "https://example.com/hooks", EnabledEvents: []string{"*"}}
		}, `SELECT count(*) - count(DISTINCT idempotency_key_id) FROM webhook_endpoints`,
			recoverytest.Want{Status: 201, JSON: `{"url": "https://example.com/hooks", "enabled_events": ["*"], "status": "enabled"}`}},
		{"redeliver_event", func(t *testing.T, pool *pgxpool.Pool) (string, any) {
			// A new event for each run: its one delivery (to the endpoint
			// setup made) is in its first cycle once redelivered.
			id := "evt_" + uuid.NewString()
			_, err := pool.Exec(context.Background(), `INSERT INTO events (id, user_id, type, data)
				SELECT $1, id, 'payment.succeeded', '{"id":"pay_1"}' FROM users WHERE email = $2`, id, users.DemoUsers[0].Email)
			require.NoError(t, err)
			return "/v1/events/" + id + "/redeliver", merchanthooks.RedeliverParams{Event: id}
		}, `SELECT coalesce(sum(cycle), 0) - count(*) FROM webhook_deliveries`,
			recoverytest.Want{Status: 200, JSON: `{"object": "list"}`}},
	} {
		t.Run(c.flow, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := recoverytest.Database(t, func(pool *pgxpool.Pool) error {
				if err := users.SeedDemoUsers(ctx, pool); err != nil {
					return err
				}
				_, err := pool.Exec(ctx, `INSERT INTO webhook_endpoints (id, user_id, url, enabled_events, secret)
					SELECT 'we_prove', id, 'https://example.com/hooks', '{*}', 'whsec_prove' FROM users WHERE email = $1`, users.DemoUsers[0].Email)
				return err
			})
			u, err := users.Authenticate(ctx, pool, aliceKey)
			require.NoError(t, err)
			flows := recovery.NewBuilder(recovery.Config{Pool: pool})
			merchanthooks.NewService(pool, flows)
			engine, err := flows.Build()
			require.NoError(t, err)
			flow, ok := engine.Flow(c.flow)
			require.True(t, ok)
			recoverytest.Prove(t, recoverytest.Case{
				Pool: pool, Flow: flow,
				Request: func() recovery.Request {
					path, params := c.request(t, pool)
					body, _ := json.Marshal(params)
					return recovery.Request{UserID: u.ID, Method: "POST", Path: path, Body: body, Params: params}
				},
				Effects: func() int {
					var extra int
					require.NoError(t, pool.QueryRow(ctx, c.effects).Scan(&extra))
					return extra
				},
				Want: c.want,
			})
		})
	}
}
