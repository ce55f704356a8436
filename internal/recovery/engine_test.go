package recovery_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/recovery"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

// The test flow: started --(insert a thing)--> thing_created
// --(call the remote, record its answer)--> remote_called --(respond)--> finished.
const (
	thingCreated recovery.RecoveryPoint = "thing_created"
	remoteCalled recovery.RecoveryPoint = "remote_called"
)

type thingParams struct {
	Name string `json:"name"`
}

// remote stands in for an external service that deduplicates by child key,
// as Stripe does; it counts what it did.
type remote struct {
	mu       sync.Mutex
	byKey    map[string]string
	calls    atomic.Int32
	fail     atomic.Int32  // fail this many calls with a transient error
	block    chan struct{} // when set, calls wait for it to close
	inCall   chan struct{} // when set, gets a value as a call starts
	executed atomic.Int32
}

func (r *remote) call(ctx context.Context, k *recovery.Key) (string, error) {
	r.calls.Add(1)
	if r.inCall != nil {
		r.inCall <- struct{}{}
	}
	if r.block != nil {
		select {
		case <-r.block:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if r.fail.Add(-1) >= 0 {
		return "", recovery.Transient(errors.New("remote unavailable"))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	child := k.ChildKey("remote")
	if id, ok := r.byKey[child]; ok {
		return id, nil
	}
	r.executed.Add(1)
	r.byKey[child] = fmt.Sprintf("remote_%d", len(r.byKey)+1)
	return r.byKey[child], nil
}

type testBundle struct {
	pool   *pgxpool.Pool
	engine *recovery.Engine
	remote *remote
	flow   *recovery.Flow
	now    *time.Time // nil: the database's clock
}

func setup(t *testing.T, cfg recovery.Config) *testBundle {
	t.Helper()
	return setupOn(t, dbtest.NewPool(t), cfg)
}

// setupOn is setup on the database of pool.
func setupOn(t *testing.T, pool *pgxpool.Pool, cfg recovery.Config) *testBundle {
	t.Helper()
	ctx := context.Background()
	_, err := pool.Exec(ctx, `
		CREATE TABLE things (id bigint GENERATED ALWAYS AS IDENTITY, name text, remote_id text,
			key_id uuid UNIQUE);
		INSERT INTO key_references (table_name, column_name, on_key_deleted) VALUES ('things', 'key_id', 'let_go');
		INSERT INTO users (email) VALUES ('one@example.com'), ('two@example.com');`)
	require.NoError(t, err)
	b := &testBundle{pool: pool, remote: &remote{byKey: map[string]string{}}}
	b.flow = recovery.NewFlow("thing",
		recovery.From(recovery.Started, recovery.LocalPhase(func(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
			var p thingParams
			if err := k.DecodeParams(&p); err != nil {
				return recovery.Outcome{}, err
			}
			_, err := tx.Exec(ctx, "INSERT INTO things (key_id, name) VALUES ($1, $2)", k.ID, p.Name)
			return recovery.Next(thingCreated), err
		}), thingCreated),
		recovery.From(thingCreated, recovery.ExternalPhase("remote", b.remote.call,
			func(ctx context.Context, tx *db.Tx, k *recovery.Key, remoteID string) (recovery.Outcome, error) {
				_, err := tx.Exec(ctx, "UPDATE things SET remote_id = $1 WHERE key_id = $2", remoteID, k.ID)
				return recovery.Next(remoteCalled), err
			}), remoteCalled),
		recovery.From(remoteCalled, recovery.LocalPhase(func(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
			var name, remoteID string
			if err := tx.QueryRow(ctx, "SELECT name, remote_id FROM things WHERE key_id = $1", k.ID).Scan(&name, &remoteID); err != nil {
				return recovery.Outcome{}, err
			}
			body, _ := json.Marshal(map[string]string{"name": name, "remote_id": remoteID})
			return recovery.Respond(201, body), nil
		}), recovery.Finished),
	)
	cfg.Pool = pool
	b.engine = b.newEngine(t, cfg)
	return b
}

// newEngine is an engine on b's database (another instance, say), running
// b's flow and the other flows given.
func (b *testBundle) newEngine(t *testing.T, cfg recovery.Config, others ...*recovery.Flow) *recovery.Engine {
	t.Helper()
	cfg.Pool = b.pool
	return newEngine(t, cfg, append([]*recovery.Flow{b.flow}, others...)...)
}

// newEngine is an engine of cfg running flows, built (recovery.New).
func newEngine(t testing.TB, cfg recovery.Config, flows ...*recovery.Flow) *recovery.Engine {
	t.Helper()
	e, err := recovery.New(cfg, flows...)
	require.NoError(t, err)
	return e
}

func (b *testBundle) request(userID int64, key, body string) recovery.Request {
	var p thingParams
	_ = json.Unmarshal([]byte(body), &p)
	return recovery.Request{UserID: userID, Key: key, Method: "POST", Path: "/v1/things", Body: []byte(body), Params: p, Flow: b.flow}
}

func (b *testBundle) execute(t *testing.T, userID int64, key, body string) (recovery.Response, error) {
	t.Helper()
	return b.engine.Execute(context.Background(), b.request(userID, key, body))
}

func (b *testBundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

func (b *testBundle) recoveryPoint(t *testing.T, key string) string {
	t.Helper()
	var p string
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT recovery_point FROM idempotency_keys WHERE idempotency_key = $1", key).Scan(&p))
	return p
}

func TestExecute_runsOnceAndReplaysTheStoredResponse(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	first, err := b.execute(t, 1, "k1", `{"name":"lamp"}`)
	require.NoError(t, err)
	require.Equal(t, 201, first.Status)
	require.False(t, first.Replayed)
	require.JSONEq(t, `{"name":"lamp","remote_id":"remote_1"}`, string(first.Body))

	again, err := b.execute(t, 1, "k1", `{"name":"lamp"}`)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, first.Status, again.Status)
	require.Equal(t, first.Body, again.Body, "byte for byte")
	require.EqualValues(t, 1, b.remote.calls.Load())
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM things"))
}

func TestExecute_canonicalJSONReplaysButADifferentRequestIsReuse(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	_, err := b.execute(t, 1, "k1", `{"name":"lamp","extra":{"b":1,"a":2}}`)
	require.NoError(t, err)

	resp, err := b.execute(t, 1, "k1", "{ \"extra\": {\"a\": 2, \"b\": 1},\n  \"name\": \"lamp\" }")
	require.NoError(t, err, "reordered keys and white space are the same request")
	require.True(t, resp.Replayed)

	_, err = b.execute(t, 1, "k1", `{"name":"desk","extra":{"b":1,"a":2}}`)
	require.ErrorIs(t, err, recovery.ErrKeyReused)
	req := b.request(1, "k1", `{"name":"lamp","extra":{"b":1,"a":2}}`)
	req.Path = "/v1/other"
	_, err = b.engine.Execute(context.Background(), req)
	require.ErrorIs(t, err, recovery.ErrKeyReused, "another path is another request")
}

func TestExecute_keysAreScopedPerUser(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	_, err := b.execute(t, 1, "shared", `{"name":"lamp"}`)
	require.NoError(t, err)
	resp, err := b.execute(t, 2, "shared", `{"name":"desk"}`)
	require.NoError(t, err)
	require.False(t, resp.Replayed)
	require.Equal(t, 2, b.count(t, "SELECT count(*) FROM things"))
}

func TestExecute_transientFailureLeavesTheKeyResumable(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	b.remote.fail.Store(1)
	_, err := b.execute(t, 1, "k1", `{"name":"lamp"}`)
	require.True(t, recovery.IsTransient(err), "%v", err)
	require.Equal(t, string(thingCreated), b.recoveryPoint(t, "k1"), "the first phase stays committed")
	require.Zero(t, b.count(t, "SELECT count(*) FROM idempotency_keys WHERE locked_at IS NOT NULL"), "unlocked")

	resp, err := b.execute(t, 1, "k1", `{"name":"lamp"}`)
	require.NoError(t, err)
	require.Equal(t, 201, resp.Status)
	require.False(t, resp.Replayed)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM things"), "the first phase did not run again")
	require.EqualValues(t, 1, b.remote.executed.Load())
}

func TestExecute_aConcurrentAttemptGetsKeyInUse(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	b.remote.block, b.remote.inCall = make(chan struct{}), make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() { _, err := b.execute(t, 1, "k1", `{"name":"lamp"}`); done <- err }()
	<-b.remote.inCall

	_, err := b.execute(t, 1, "k1", `{"name":"lamp"}`)
	require.ErrorIs(t, err, recovery.ErrKeyInUse)
	close(b.remote.block)
	require.NoError(t, <-done)
}

func TestExecute_heartbeatKeepsTheLockWhileTheCallIsSlow(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{LockTimeout: 300 * time.Millisecond})
	b.remote.block, b.remote.inCall = make(chan struct{}), make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() { _, err := b.execute(t, 1, "k1", `{"name":"lamp"}`); done <- err }()
	<-b.remote.inCall

	// Well past the lock timeout, the holder is still alive and heartbeating.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		_, err := b.execute(t, 1, "k1", `{"name":"lamp"}`)
		require.ErrorIs(t, err, recovery.ErrKeyInUse)
		time.Sleep(50 * time.Millisecond)
	}
	close(b.remote.block)
	require.NoError(t, <-done)
	require.EqualValues(t, 1, b.remote.calls.Load(), "no second attempt reached the remote")
}

func TestExecute_aHolderWhoseLockWasTakenCannotCommit(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	b.remote.block, b.remote.inCall = make(chan struct{}), make(chan struct{}, 2)
	first := make(chan error, 1)
	go func() { _, err := b.execute(t, 1, "k1", `{"name":"lamp"}`); first <- err }()
	<-b.remote.inCall

	// The first holder looks dead (its lock expired); a second attempt takes over.
	_, err := b.pool.Exec(context.Background(),
		"UPDATE idempotency_keys SET locked_at = now() - interval '1 hour', lock_expires_at = now() - interval '1 hour' + interval '90 seconds'")
	require.NoError(t, err)
	second := make(chan error, 1)
	go func() { _, err := b.execute(t, 1, "k1", `{"name":"lamp"}`); second <- err }()
	<-b.remote.inCall
	close(b.remote.block) // both calls answer

	errs := []error{<-first, <-second}
	require.Contains(t, errs, nil, "one attempt finishes")
	lost := errs[0]
	if lost == nil {
		lost = errs[1]
	}
	require.ErrorIs(t, lost, recovery.ErrLockLost, "the fenced-off holder wrote nothing")
	require.EqualValues(t, 1, b.remote.executed.Load(), "the child key deduplicated the second call")
	require.Equal(t, string(recovery.Finished), b.recoveryPoint(t, "k1"))
}

func TestExecute_anExpiredFinishedKeyIsNewAgain(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	b := setup(t, recovery.Config{KeyTTL: time.Hour, Now: func() time.Time { return now }})
	_, err := b.execute(t, 1, "k1", `{"name":"lamp"}`)
	require.NoError(t, err)

	now = now.Add(59 * time.Minute)
	resp, err := b.execute(t, 1, "k1", `{"name":"lamp"}`)
	require.NoError(t, err)
	require.True(t, resp.Replayed, "still inside the TTL")

	now = now.Add(2 * time.Minute)
	resp, err = b.execute(t, 1, "k1", `{"name":"desk"}`)
	require.NoError(t, err, "past the TTL, even another request may use the key")
	require.False(t, resp.Replayed)
	require.Equal(t, 2, b.count(t, "SELECT count(*) FROM things"))
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM things WHERE key_id IS NULL"), "the old work stays, detached")
}

func TestExecute_aStormOfIdenticalRequestsRunsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	const n = 50
	var wg sync.WaitGroup
	results := make(chan error, n)
	bodies := make(chan []byte, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := b.execute(t, 1, "storm", `{"name":"lamp"}`)
			results <- err
			if err == nil {
				bodies <- resp.Body
			}
		}()
	}
	wg.Wait()
	close(results)
	close(bodies)
	for err := range results {
		if err != nil {
			require.ErrorIs(t, err, recovery.ErrKeyInUse, "the only other answer is 'in use'")
		}
	}
	var first []byte
	for body := range bodies {
		if first == nil {
			first = body
		}
		require.Equal(t, first, body)
	}
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM things"))
	require.EqualValues(t, 1, b.remote.executed.Load())
}
