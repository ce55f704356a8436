package payments_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/failpoint"
	"github.com/example/payments/internal/keyfilter"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stripesim"
)

// instanceConfig is how one instance of the service is set up: its own
// key filter, its own lock timeout and failpoints.
type instanceConfig struct {
	lockTimeout time.Duration
	failpoints  string
}

// instance is one instance of the service on the bundle's database, with
// the database's clock and a key filter of its own that has seen no key:
// every key is "definitely new" to it until it sees it.
func (b *testBundle) instance(t *testing.T, cfg instanceConfig) (*payments.Service, *recovery.Engine) {
	t.Helper()
	fp, err := failpoint.Parse(cfg.failpoints)
	require.NoError(t, err)
	filter, err := keyfilter.New(keyfilter.Config{ExpectedKeysPerSlice: 1024})
	require.NoError(t, err)
	svc, engine := newService(t, recovery.Config{Pool: b.pool, LockTimeout: cfg.lockTimeout, Failpoints: fp, KeyFilter: filter}, b.stripe)
	_, err = engine.RebuildKeyFilter(context.Background())
	require.NoError(t, err)
	return svc, engine
}

func (b *testBundle) create(ctx context.Context, svc *payments.Service, key, body string) (recovery.Response, error) {
	var p payments.CreateParams
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		return recovery.Response{}, err
	}
	p.Capture = true
	return svc.Create(ctx, payments.KeyedRequest{UserID: b.userID, Key: key, Method: "POST", Path: "/v1/payments", Body: []byte(body)}, p)
}

func (b *testBundle) refund(ctx context.Context, svc *payments.Service, key string, p payments.RefundParams) (recovery.Response, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return recovery.Response{}, err
	}
	return svc.Refund(ctx, payments.KeyedRequest{UserID: b.userID, Key: key, Method: "POST", Path: "/v1/refunds", Body: body}, p)
}

// Issue 20, item 8: each process judged a lock's age by its own
// PAYMENTS_LOCK_TIMEOUT, so a worker configured shorter than the API
// instance took over the instance's live requests: the completer claimed a
// request whose slow Stripe call was still running (its holder's heartbeat
// comes every third of the holder's timeout), and the client got 503. A
// lock now carries the lifetime its holder gave it (lock_expires_at), and
// every process reads that.
func TestLocks_aShorterLockTimeoutElsewhereNeverTakesOverALiveRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	api, _ := b.instance(t, instanceConfig{lockTimeout: 5 * time.Second})
	worker, workerEngine := b.instance(t, instanceConfig{lockTimeout: time.Second})
	completer := recovery.NewCompleter(recovery.CompleterConfig{Engine: workerEngine, Grace: time.Millisecond})
	// Stripe takes 4 s: longer than the worker's lock timeout, shorter than the API's.
	require.NoError(t, b.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/payment_intents", Method: "POST",
		Kind: stripesim.FaultDelay, DelayMS: 4000, Count: 1}))

	const body = `{"amount":1500,"currency":"usd","payment_method":"pm_card_visa"}`
	type result struct {
		resp recovery.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := b.create(ctx, api, "slow", body)
		done <- result{resp, err}
	}()
	require.Eventually(t, func() bool {
		var point string
		err := b.pool.QueryRow(ctx, "SELECT recovery_point FROM idempotency_keys WHERE idempotency_key = 'slow'").Scan(&point)
		return err == nil && point == string(payments.PaymentCreated)
	}, 5*time.Second, 10*time.Millisecond, "the API instance claimed the key and is calling Stripe")
	claimed := time.Now()

	// For twice the worker's lock timeout, the worker's every judge sees the
	// API instance's lock as live.
	for time.Since(claimed) < 2*time.Second {
		run, err := completer.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, run.Claimed, "the completer leaves a live request alone")
		_, err = b.create(ctx, worker, "slow", body)
		require.ErrorIs(t, err, recovery.ErrKeyInUse, "a retry sent to the worker's instance waits its turn")
		k, err := workerEngine.Lookup(ctx, b.userID, "slow")
		require.NoError(t, err)
		require.True(t, k.Locked, "GET /v1/idempotency_keys says locked")
		time.Sleep(100 * time.Millisecond)
	}

	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, 201, r.resp.Status)
	require.False(t, r.resp.Replayed)
	require.Equal(t, 1, b.paymentIntentCreations())
}
