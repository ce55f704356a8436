package merchanthooks_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/merchanthooks"
	"github.com/example/payments/internal/users"
	"github.com/example/payments/internal/webhooktest"
)

// The Dispatcher's own guarantees, on a real database, with deliveries
// written as the drain writes them (a row each, due at once). The
// end-to-end ones (signature, stable webhook-id, the retry schedule,
// redelivery, a deleted endpoint, SIGKILL) are in delivery_test.go and
// cmd/payments.

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

type dispatchBundle struct {
	pool  *pgxpool.Pool
	alice int64
}

func newDispatchBundle(t *testing.T) *dispatchBundle {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	require.NoError(t, users.SeedDemoUsers(ctx, pool))
	b := &dispatchBundle{pool: pool}
	require.NoError(t, pool.QueryRow(ctx, "SELECT id FROM users WHERE email = 'alice@example.com'").Scan(&b.alice))
	return b
}

func (b *dispatchBundle) endpoint(t *testing.T, id, url string) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), `INSERT INTO webhook_endpoints (id, user_id, url, enabled_events, secret)
		VALUES ($1, $2, $3, '{*}', $4)`, id, b.alice, url, testSecret)
	require.NoError(t, err)
}

// events writes n events of alice's, each with a delivery, due now, to each
// of endpoints, and returns their ids.
func (b *dispatchBundle) events(t *testing.T, prefix string, n int, endpoints ...string) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("evt_%s_%d", prefix, i)
		_, err := b.pool.Exec(ctx, `INSERT INTO events (id, user_id, type, data) VALUES ($1, $2, 'payment.succeeded', '{"id":"pay_1"}')`, id, b.alice)
		require.NoError(t, err)
		for _, e := range endpoints {
			_, err := b.pool.Exec(ctx, `INSERT INTO webhook_deliveries (event_id, endpoint_id, user_id) VALUES ($1, $2, $3)`, id, e, b.alice)
			require.NoError(t, err)
		}
		ids = append(ids, id)
	}
	return ids
}

func (b *dispatchBundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

// run starts d and returns what stops it and waits for Run to return.
func run(t *testing.T, d *merchanthooks.Dispatcher) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Error("the dispatcher did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// A dispatcher that claimed a delivery and died (here: a claim nobody
// follows up) leaves it alone for its lease, then another dispatcher
// sends it: the claim counted as an attempt of the cycle.
func TestDispatcher_aDeliveryClaimedByADeadDispatcherIsSentWhenItsLeaseLapses(t *testing.T) {
	t.Parallel()
	b := newDispatchBundle(t)
	r := webhooktest.NewReceiver(t)
	r.SetSecret(testSecret)
	b.endpoint(t, "we_1", r.URL())
	event := b.events(t, "dead", 1, "we_1")[0]

	const lease = 2 * time.Second
	claimed, err := dbsqlc.New().ClaimDueDeliveries(context.Background(), b.pool, dbsqlc.ClaimDueDeliveriesParams{
		LeaseSeconds: lease.Seconds(), Busy: []string{}, ScanSize: 10, InflightEndpoints: []string{}, InflightCounts: []int32{},
		PerEndpoint: 10, BatchSize: 10,
	})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	claimedAt := time.Now()

	run(t, merchanthooks.NewDispatcher(merchanthooks.DispatcherConfig{Pool: b.pool, PollInterval: 20 * time.Millisecond}))
	require.Eventually(t, func() bool { return len(r.Acknowledged()[event]) == 1 }, 30*time.Second, 20*time.Millisecond)
	require.GreaterOrEqual(t, r.Deliveries()[0].ReceivedAt.Sub(claimedAt), lease-100*time.Millisecond,
		"nothing is sent while the dead dispatcher's lease holds")
	require.Eventually(t, func() bool {
		return b.count(t, "SELECT count(*) FROM webhook_deliveries WHERE status = 'succeeded' AND attempts = 1 AND cycle_attempts = 2") == 1
	}, 10*time.Second, 20*time.Millisecond, "one attempt recorded; the dead claim counts in the cycle")
	require.Len(t, r.Deliveries(), 1)
	require.Empty(t, r.Invalid())
}

// The claim leases a delivery in leased_until, a column no index names, and
// leaves next_attempt_at (which the due index names) as it was, so it is a
// HOT update (migration 000027). While the lease holds no claim takes the
// delivery again, and the API's next_attempt is when the lease lapses; a
// recorded failure ends the lease (the retry is due at its own time), and
// an attempt nobody records is claimed again once its lease lapses.
func TestClaimDueDeliveries_aClaimIsAHOTLeaseThatHoldsUntilItIsRecordedOrLapses(t *testing.T) {
	t.Parallel()
	b := newDispatchBundle(t)
	b.endpoint(t, "we_1", "http://127.0.0.1:9/")
	event := b.events(t, "lease", 1, "we_1")[0]
	ctx := context.Background()
	var due time.Time
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT next_attempt_at FROM webhook_deliveries WHERE event_id = $1", event).Scan(&due))

	const lease = 1500 * time.Millisecond
	claim := func(conn dbsqlc.DBTX) []dbsqlc.ClaimDueDeliveriesRow {
		t.Helper()
		rows, err := dbsqlc.New().ClaimDueDeliveries(ctx, conn, dbsqlc.ClaimDueDeliveriesParams{
			LeaseSeconds: lease.Seconds(), Busy: []string{}, ScanSize: 10, InflightEndpoints: []string{}, InflightCounts: []int32{},
			PerEndpoint: 10, BatchSize: 10,
		})
		require.NoError(t, err)
		return rows
	}
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	first := claim(tx)
	require.Len(t, first, 1)
	require.Equal(t, int32(1), first[0].CycleAttempts)
	updates, hot := dbtest.UpdatesInTx(t, tx, "webhook_deliveries")
	require.Equal(t, [2]int64{1, 1}, [2]int64{updates, hot}, "the claim is one HOT update")
	require.NoError(t, tx.Commit(ctx))

	var next, leasedUntil time.Time
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT next_attempt_at, leased_until FROM webhook_deliveries WHERE event_id = $1",
		event).Scan(&next, &leasedUntil))
	require.True(t, next.Equal(due), "the claim leaves next_attempt_at as it was")
	deliveries, err := merchanthooks.ListDeliveries(ctx, b.pool, b.alice, event)
	require.NoError(t, err)
	require.Len(t, deliveries, 1)
	require.NotNil(t, deliveries[0].NextAttempt)
	require.True(t, deliveries[0].NextAttempt.Equal(leasedUntil), "next_attempt: when the attempt in flight's lease lapses")
	require.Empty(t, claim(b.pool), "not claimed again while its lease holds")

	// The attempt failed and is recorded, due again at once: the record
	// ends the lease.
	_, err = dbsqlc.New().RecordWebhookAttempts(ctx, b.pool, dbsqlc.RecordWebhookAttemptsParams{
		EventIds: []string{event}, EndpointIds: []string{"we_1"}, Cycles: []int32{0}, Statuses: []string{merchanthooks.StatusPending},
		AttemptTimes: []time.Time{time.Now()}, DurationMs: []int32{1}, StatusCodes: []int32{500}, Errors: []string{"status 500"},
		NextAttempts: []time.Time{time.Now()},
	})
	require.NoError(t, err)
	second := claim(b.pool)
	require.Len(t, second, 1, "a recorded failure is due at its next attempt, not when the lease lapses")
	require.Equal(t, int32(2), second[0].CycleAttempts)
	claimedAt := time.Now()

	// Nobody records the second attempt (its dispatcher died).
	require.Empty(t, claim(b.pool))
	var third []dbsqlc.ClaimDueDeliveriesRow
	require.Eventually(t, func() bool { third = claim(b.pool); return len(third) == 1 }, 10*time.Second, 50*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(claimedAt), lease-100*time.Millisecond, "claimed again once the lease lapsed")
	require.Equal(t, int32(3), third[0].CycleAttempts)
}

// slowEndpoint holds every request for hold and counts how many it holds
// at once.
type slowEndpoint struct {
	*httptest.Server
	mu               sync.Mutex
	now, most, total int
}

func newSlowEndpoint(t *testing.T, hold time.Duration) *slowEndpoint {
	s := &slowEndpoint{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		s.now++
		s.most = max(s.most, s.now)
		s.mu.Unlock()
		time.Sleep(hold) // the endpoint's own slowness
		s.mu.Lock()
		s.now--
		s.total++
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *slowEndpoint) counts() (most, total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.most, s.total
}

// A slow endpoint gets at most PerEndpoint attempts at once, and the other
// endpoints' deliveries do not wait behind it.
func TestDispatcher_noEndpointHasMoreThanItsShareOfTheAttempts(t *testing.T) {
	t.Parallel()
	b := newDispatchBundle(t)
	slow := newSlowEndpoint(t, 300*time.Millisecond)
	fast := webhooktest.NewReceiver(t)
	fast.SetSecret(testSecret)
	b.endpoint(t, "we_slow", slow.URL)
	b.endpoint(t, "we_fast", fast.URL())
	b.events(t, "share", 12, "we_slow", "we_fast")

	run(t, merchanthooks.NewDispatcher(merchanthooks.DispatcherConfig{
		Pool: b.pool, Concurrency: 8, PerEndpoint: 3, PollInterval: 20 * time.Millisecond,
	}))
	require.Eventually(t, func() bool { return len(fast.Acknowledged()) == 12 }, 30*time.Second, 10*time.Millisecond)
	_, slowDone := slow.counts()
	require.Less(t, slowDone, 12, "the fast endpoint's deliveries did not wait for the slow one's")
	require.Eventually(t, func() bool { _, total := slow.counts(); return total == 12 }, 30*time.Second, 20*time.Millisecond)
	most, _ := slow.counts()
	require.Equal(t, 3, most, "the slow endpoint had its share at once, and no more")
	require.Eventually(t, func() bool {
		return b.count(t, "SELECT count(*) FROM webhook_deliveries WHERE status = 'succeeded' AND attempts = 1") == 24
	}, 10*time.Second, 20*time.Millisecond)
}

// Shutdown lets an attempt in flight finish and records it before Run
// returns; an attempt that outlasts ShutdownTimeout is cancelled, recorded
// as failed, and due again.
func TestDispatcher_shutdownFinishesOrCancelsTheAttemptsInFlightAndRecordsThem(t *testing.T) {
	t.Parallel()
	b := newDispatchBundle(t)
	slow := newSlowEndpoint(t, 700*time.Millisecond)
	b.endpoint(t, "we_slow", slow.URL)
	finished := b.events(t, "finished", 1, "we_slow")[0]

	stop := run(t, merchanthooks.NewDispatcher(merchanthooks.DispatcherConfig{
		Pool: b.pool, PollInterval: 20 * time.Millisecond, ShutdownTimeout: 10 * time.Second,
	}))
	require.Eventually(t, func() bool { most, _ := slow.counts(); return most == 1 }, 30*time.Second, 5*time.Millisecond)
	stop()
	_, total := slow.counts()
	require.Equal(t, 1, total, "the attempt finished")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM webhook_deliveries WHERE event_id = $1 AND status = 'succeeded' AND attempts = 1`, finished),
		"and was recorded before Run returned")

	hung := webhooktest.NewReceiver(t)
	hung.SetSecret(testSecret)
	hung.SetHangFor(20 * time.Second)
	hung.SetMode(webhooktest.Hang)
	b.endpoint(t, "we_hung", hung.URL())
	cut := b.events(t, "cut", 1, "we_hung")[0]
	stop = run(t, merchanthooks.NewDispatcher(merchanthooks.DispatcherConfig{
		Pool: b.pool, PollInterval: 20 * time.Millisecond, ShutdownTimeout: 200 * time.Millisecond,
	}))
	require.Eventually(t, func() bool { return len(hung.Deliveries()) == 1 }, 30*time.Second, 5*time.Millisecond)
	stopped := time.Now()
	stop()
	require.Less(t, time.Since(stopped), 5*time.Second, "the hung attempt did not hold the shutdown")
	var status, lastError string
	var attempts int
	var nextAttempt time.Time
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT status, attempts, last_error, next_attempt_at
		FROM webhook_deliveries WHERE event_id = $1`, cut).Scan(&status, &attempts, &lastError, &nextAttempt))
	require.Equal(t, merchanthooks.StatusPending, status, "due again")
	require.Equal(t, 1, attempts)
	require.Equal(t, "the attempt was cut short: the service was stopping", lastError, "worded for the endpoint's owner (safehttp.Describe)")
	require.WithinDuration(t, time.Now().Add(merchanthooks.DefaultRetrySchedule[0]), nextAttempt, 3*time.Second,
		"after the schedule's first delay")
}

// Dispatchers side by side claim different deliveries: each is sent once.
func TestDispatcher_twoDispatchersSendEachDeliveryOnce(t *testing.T) {
	t.Parallel()
	b := newDispatchBundle(t)
	r1, r2 := webhooktest.NewReceiver(t), webhooktest.NewReceiver(t)
	r1.SetSecret(testSecret)
	r2.SetSecret(testSecret)
	b.endpoint(t, "we_1", r1.URL())
	b.endpoint(t, "we_2", r2.URL())
	events := b.events(t, "two", 150, "we_1", "we_2")

	for range 2 {
		run(t, merchanthooks.NewDispatcher(merchanthooks.DispatcherConfig{
			Pool: b.pool, Concurrency: 20, PerEndpoint: 10, PollInterval: 10 * time.Millisecond,
		}))
	}
	require.Eventually(t, func() bool {
		return b.count(t, "SELECT count(*) FROM webhook_deliveries WHERE status = 'succeeded'") == 2*len(events)
	}, 60*time.Second, 20*time.Millisecond)
	for _, r := range []*webhooktest.Receiver{r1, r2} {
		require.Equal(t, len(events), len(r.Deliveries()), "each delivery sent once")
		acked := r.Acknowledged()
		for _, e := range events {
			require.Len(t, acked[e], 1, e)
		}
		require.Empty(t, r.Invalid())
	}
	require.Equal(t, 2*len(events), b.count(t, "SELECT count(*) FROM webhook_attempts"))
}

// Wake makes a dispatcher that polls rarely claim at once: the drain wakes
// it after it wrote deliveries.
func TestDispatcher_wakeClaimsAtOnce(t *testing.T) {
	t.Parallel()
	b := newDispatchBundle(t)
	r := webhooktest.NewReceiver(t)
	r.SetSecret(testSecret)
	b.endpoint(t, "we_1", r.URL())
	first := b.events(t, "first", 1, "we_1")[0]
	d := merchanthooks.NewDispatcher(merchanthooks.DispatcherConfig{Pool: b.pool, PollInterval: time.Minute})
	run(t, d)
	// Its first claim took the first delivery; its next poll is a minute away.
	require.Eventually(t, func() bool { return len(r.Acknowledged()[first]) == 1 }, 10*time.Second, 10*time.Millisecond)

	second := b.events(t, "second", 1, "we_1")[0]
	d.Wake()
	require.Eventually(t, func() bool { return len(r.Acknowledged()[second]) == 1 }, 10*time.Second, 10*time.Millisecond,
		"delivered long before the next poll")
}
