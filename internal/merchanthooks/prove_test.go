package merchanthooks_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/merchanthooks"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/recovery/recoverytest"
	"github.com/example/payments/internal/users"
)

// The webhook endpoint create flow, proven exactly-once by recoverytest:
// crashed at every failpoint its declaration names, resumed by a retry and
// by the completer. It calls nobody: its one effect is its row, one per key.
func TestProve_createWebhookEndpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	require.NoError(t, users.SeedDemoUsers(ctx, pool))
	u, err := users.Authenticate(ctx, pool, aliceKey)
	require.NoError(t, err)
	engine := recovery.New(recovery.Config{Pool: pool})
	_, err = merchanthooks.NewService(pool, engine)
	require.NoError(t, err)
	flow, ok := engine.Flow("create_webhook_endpoint")
	require.True(t, ok)
	params := merchanthooks.CreateParams{URL: "https://example.com/hooks", EnabledEvents: []string{"*"}}
	body, _ := json.Marshal(params)
	recoverytest.Prove(t, recoverytest.Case{
		Pool: pool, Flow: flow,
		Request: func() recovery.Request {
			return recovery.Request{UserID: u.ID, Method: "POST", Path: "/v1/webhook_endpoints", Body: body, Params: params}
		},
		Effects: func() int { // endpoints made, beyond one per key
			var extra int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) - count(DISTINCT idempotency_key_id) FROM webhook_endpoints`).Scan(&extra))
			return extra
		},
	})
}
