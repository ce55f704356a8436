package payments_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/example/payments/internal/failpoint"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/stripesim"
)

// Issue 38, item 5: recovering a stored 500 listed every PaymentIntent
// Stripe made since the key was created (less 5 minutes), to the end of the
// list: 60 pages for 2,000 other PaymentIntents in that time, and hours of
// everybody's PaymentIntents for a key retried for hours. The create flow's
// reconcile now lists only the minutes of the key's own attempts (their
// call windows, recovery.CallWindow), each widened by the clock-skew
// margin.

// others has Stripe make n PaymentIntents of other requests, over HTTP,
// a few at a time.
func (b *testBundle) others(t *testing.T, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				_, err := b.stripe.CreatePaymentIntent(context.Background(), fmt.Sprintf("other-%d-%d", time.Now().UnixNano(), i),
					stripeclient.PaymentIntentRequest{Amount: 700, Currency: "usd", PaymentMethod: "pm_card_visa",
						Metadata: map[string]string{"idempotency_key_id": "another request's"}})
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// advance moves the simulator's clock by d and sets the service's to it:
// the two clocks agree, as Stripe's and the database's do (to within the
// margin the reconcile allows for).
func (b *testBundle) advance(d time.Duration) { b.now = b.sim.Advance(d) }

// ourPaymentIntentCreations is how many PaymentIntents the service asked
// Stripe to make (the others' are not the service's).
func (b *testBundle) ourPaymentIntentCreations() int {
	n := 0
	for _, r := range b.sim.Requests() {
		if r.Method == http.MethodPost && r.Path == "/v1/payment_intents" && strings.HasPrefix(r.IdempotencyKey, payments.ChildKeyPrefix) {
			n++
		}
	}
	return n
}

// listPages is how many pages of Stripe's list of PaymentIntents the
// service has read.
func (b *testBundle) listPages() int {
	n := 0
	for _, r := range b.sim.Requests() {
		if r.Method == http.MethodGet && r.Path == "/v1/payment_intents" {
			n++
		}
	}
	return n
}

// requireRecorded holds the payment to the one PaymentIntent its key
// made: succeeded, recorded, and the only charge.
func (b *testBundle) requireRecorded(t *testing.T) {
	t.Helper()
	var keyID, status, intent string
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT idempotency_key_id::text, status, coalesce(stripe_payment_intent, '') FROM payments").Scan(&keyID, &status, &intent))
	require.Equal(t, "succeeded", status)
	require.Equal(t, map[string]int{keyID: 1}, ourCharges(t, b.sim, keyID), "one charge")
	pi, err := b.stripe.GetPaymentIntent(context.Background(), intent)
	require.NoError(t, err)
	require.Equal(t, keyID, pi.Metadata["idempotency_key_id"], "the payment records the PaymentIntent its key made")
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, pi.Status)
}

// ourCharges is chargingIntents, but for the key keyID only.
func ourCharges(t *testing.T, sim *stripesim.Simulator, keyID string) map[string]int {
	t.Helper()
	ours := map[string]int{}
	for k, n := range chargingIntents(t, sim) {
		if k == keyID {
			ours[k] = n
		}
	}
	return ours
}

// A stored 500 whose request made its PaymentIntent, with 2,000 other
// PaymentIntents made in the minutes before the key (all of them read
// before, from the key's creation less 5 minutes) and 300 after it, before
// the retry: the retry lists the two attempts' minutes, a page each, and
// records the PaymentIntent; a retry after it gets the 201 replayed.
func TestStored500_foundInTheMinutesOfItsOwnAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc, _ := b.service(t, "")
	b.others(t, 2000)
	b.advance(3 * time.Minute)

	// Stripe makes the PaymentIntent, answers 500 and stores the 500 under
	// the child key.
	require.NoError(t, b.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/payment_intents", Method: "POST",
		IdempotencyKeySuffix: "-payment_intent", Kind: stripesim.FaultLate500}))
	require.True(t, recovery.IsTransient(b.createVisa(t, svc)), "the 500")

	b.advance(10 * time.Minute)
	b.others(t, 300)
	b.advance(time.Minute)
	before := b.listPages()
	require.NoError(t, b.createVisa(t, svc), "the replayed 500: spent; the PaymentIntent is found")
	require.LessOrEqual(t, b.listPages()-before, 2, "a page for each attempt's minutes, none of the 2,300 others'")

	b.requireRecorded(t)
	g, spent := b.generation(t)
	require.Equal(t, 0, g, "no new child key: none was needed")
	require.True(t, spent)
	resp, err := svc.Create(context.Background(), payments.KeyedRequest{
		UserID: b.userID, Key: "spent", Method: "POST", Path: "/v1/payments",
		Body: []byte(`{"amount":1500,"currency":"usd","payment_method":"pm_card_visa"}`),
	}, payments.CreateParams{Amount: 1500, Currency: "usd", PaymentMethod: "pm_card_visa", Capture: true})
	require.NoError(t, err)
	require.True(t, resp.Replayed)
	require.Equal(t, http.StatusCreated, resp.Status)
}

// A process that died after Stripe answered (the failpoint where
// after_stripe:payment_intent=crash kills it, with its database connections
// gone, so that nothing after it is written: the key stays locked until
// its lock lapses) is resumed by the completer a day later, past Stripe's
// idempotency window: the engine reconciles instead of calling again, and
// finds the PaymentIntent in the minutes of the dead attempt, up to the end
// of the lock it last wrote, without reading the day's other
// PaymentIntents. (An hour later the engine would call again with the same
// child key, and Stripe would replay the PaymentIntent: no reconcile.)
func TestCompleter_aCrashAfterStripeAnsweredIsFoundInItsAttemptsMinutesADayLater(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.advance(0)
	dying, err := pgxpool.New(context.Background(), b.pool.Config().ConnString())
	require.NoError(t, err)
	t.Cleanup(dying.Close)
	fp, err := failpoint.Parse("after_stripe:payment_intent=error")
	require.NoError(t, err)
	died := b.now // its clock stops with it (its unlock, which fails, may run on in the background)
	flows := recovery.NewBuilder(recovery.Config{Pool: dying, Failpoints: fp, LockTimeout: time.Minute, Now: func() time.Time { return died }})
	svc := payments.NewService(dying, flows, b.stripe, payments.WithCreatePaymentIntent(
		func(ctx context.Context, childKey string, r stripeclient.PaymentIntentRequest) (*stripe.PaymentIntent, error) {
			pi, err := b.stripe.CreatePaymentIntent(ctx, childKey, r)
			dying.Close() // the process dies as Stripe answers: its connections with it
			return pi, err
		}))
	engine, err := flows.Build()
	require.NoError(t, err)
	require.ErrorIs(t, b.createVisa(t, svc), failpoint.ErrInjected)
	var locked bool
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT lock_expires_at IS NOT NULL FROM idempotency_keys WHERE idempotency_key = 'spent'").Scan(&locked))
	require.True(t, locked, "left locked, as a crash leaves it")

	b.advance(25 * time.Hour)
	b.others(t, 500)
	b.advance(time.Minute)
	before := b.listPages()
	svc, engine = b.service(t, "")
	run, err := b.completer(svc, engine).RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, recovery.CompleterRun{Claimed: 1, Finished: 1}, run)
	require.Equal(t, 1, b.ourPaymentIntentCreations(), "found, not created again")
	require.LessOrEqual(t, b.listPages()-before, 2, "a page for each attempt's minutes, none of the day's 500 others'")
	b.requireRecorded(t)
	point, code, _ := b.keyStateOf(t, "spent")
	require.Equal(t, "finished", point)
	require.EqualValues(t, http.StatusCreated, *code)
}

// A key retried many times, its child key spent again and again (every
// generation's first call gets a stored 500 that made nothing), with other
// PaymentIntents made between its retries: each retry's reconcile reads a
// page for each of the key's attempts so far, never the others. The last
// generation charges, once.
func TestStored500_aKeyRetriedManyTimesReadsOnlyItsAttemptsMinutes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc, _ := b.service(t, "")
	b.advance(0)
	const generations = 3
	for g := range generations {
		suffix := "-payment_intent"
		if g > 0 {
			suffix += fmt.Sprintf("-g%d", g)
		}
		require.NoError(t, b.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/payment_intents", Method: "POST",
			IdempotencyKeySuffix: suffix, Kind: stripesim.FaultStoredError500}))
	}
	require.True(t, recovery.IsTransient(b.createVisa(t, svc)), "the first 500")

	// Each generation: a retry finds it spent, nothing made, within the
	// grace (503); the next, past the grace, moves on to the next
	// generation, whose first call gets its own stored 500 (or, the last,
	// charges).
	attempts := 1
	for retry := range 2 * generations {
		b.advance(10 * time.Minute)
		b.others(t, 250)
		b.advance(time.Minute)
		before := b.listPages()
		err := b.createVisa(t, svc)
		attempts++
		require.Equal(t, attempts, b.listPages()-before,
			"retry %d: one page for each of the key's %d attempts, none for the %d others made between them", retry+1, attempts, 250*(retry+1))
		if retry == 2*generations-1 {
			require.NoError(t, err)
			break
		}
		require.True(t, recovery.IsTransient(err), "retry %d: %v", retry+1, err)
	}
	b.requireRecorded(t)
	g, _ := b.generation(t)
	require.Equal(t, generations, g)
}
