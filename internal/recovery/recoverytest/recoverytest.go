// Package recoverytest proves a flow exactly-once in one call: Prove runs
// the flow's request once cleanly, then once for every failpoint its
// declaration names (before and after each commit, after each external
// call) and every way to resume (the client's retry, the completer), and
// asserts, for each, what the clean run did: one effect at the remote side,
// the same status, an answer every retry gets byte for byte, and the key's
// audit trail in the same order.
//
// The attempt that crashes stops at the failpoint with the action "error":
// nothing after the failpoint runs, as after a kill, and the key is left
// where the commit left it. (A kill would also leave the key locked until
// its lock lapsed; the lock is the engine's own, proven by its tests.)
package recoverytest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payments/internal/failpoint"
	"github.com/example/payments/internal/recovery"
)

// Case is a flow to prove and a request to run it with.
type Case struct {
	Pool *pgxpool.Pool
	Flow *recovery.Flow
	// Request makes the request, once per run (the clean one, then one per
	// crash and way to resume), each with a key of its own (its Key is
	// replaced) and Flow as its flow. It may prepare what the request acts
	// on (a payment to capture, say): what it does is not counted.
	Request func() recovery.Request
	// Effects counts what the remote side did (objects made, emails sent):
	// every run must add as many as the clean run.
	Effects func() int
	// Config configures the engines (Pool and Failpoints are Prove's).
	Config recovery.Config
	Faults []Fault // the remote side's faults to meet at each external call (faults.go)
}

// ways are how a crashed request is resumed.
var ways = []string{"retry", "completer"}

// Prove proves c's flow exactly-once; see the package's comment. It
// reports each failpoint the request does not reach (another path of the
// flow reaches it) in the test's log.
func Prove(t testing.TB, c Case) {
	t.Helper()
	ctx := context.Background()
	engine := func(fp *failpoint.Set) *recovery.Engine {
		cfg := c.Config
		cfg.Pool, cfg.Failpoints = c.Pool, fp
		e := recovery.New(cfg)
		if err := e.Register(c.Flow); err != nil {
			t.Fatalf("recoverytest: %v", err)
		}
		return e
	}
	healthy := engine(nil)
	requests := map[string]recovery.Request{}
	request := func(key string) recovery.Request { // the same request for every attempt with key
		req, ok := requests[key]
		if !ok {
			req = c.Request()
			req.Key, req.Flow = key, c.Flow
			requests[key] = req
		}
		return req
	}
	run := func(e *recovery.Engine, key string) (recovery.Response, error) {
		return e.Execute(ctx, request(key))
	}

	request("recoverytest-clean")
	before := c.Effects()
	clean, err := run(healthy, "recoverytest-clean")
	if err != nil {
		t.Fatalf("recoverytest: the clean run failed: %v", err)
	}
	effects := c.Effects() - before
	trail := auditTrail(t, c, request("recoverytest-clean"))

	for _, name := range c.Flow.Failpoints() {
		for _, way := range ways {
			key := "recoverytest-" + way + "-" + name
			fp, err := failpoint.Parse(name + "=error")
			if err != nil {
				t.Fatalf("recoverytest: %v", err)
			}
			req := request(key)
			before := c.Effects()
			_, err = run(engine(fp), key)
			if !errors.Is(err, failpoint.ErrInjected) {
				t.Logf("recoverytest: %s: not reached by this request (%v)", name, err)
				continue
			}
			var got recovery.Response
			switch way {
			case "retry":
				got, err = run(healthy, key)
			case "completer":
				completer := recovery.NewCompleter(recovery.CompleterConfig{Engine: healthy, Grace: 1})
				if _, err = completer.RunOnce(ctx); err == nil {
					got, err = run(healthy, key) // the stored answer
				}
			}
			where := fmt.Sprintf("crashed at %s, resumed by the %s", name, way)
			if err != nil {
				t.Fatalf("recoverytest: %s: %v", where, err)
			}
			again, err := run(healthy, key)
			switch {
			case err != nil:
				t.Fatalf("recoverytest: %s: the retry after it: %v", where, err)
			case got.Status != clean.Status:
				t.Errorf("recoverytest: %s: answered %d, the clean run %d", where, got.Status, clean.Status)
			case !again.Replayed || again.Status != got.Status || string(again.Body) != string(got.Body):
				t.Errorf("recoverytest: %s: a retry got %d %s, not the answer %d %s", where, again.Status, again.Body, got.Status, got.Body)
			}
			if n := c.Effects() - before; n != effects {
				t.Errorf("recoverytest: %s: %d effects at the remote side, the clean run %d", where, n, effects)
			}
			if got := auditTrail(t, c, req); fmt.Sprint(got) != fmt.Sprint(trail) {
				t.Errorf("recoverytest: %s: audit trail %v, the clean run's %v", where, got, trail)
			}
		}
	}
	proveFaults(t, c, clean, effects, trail)
}

// auditTrail is the actions of the audit records of req, in order.
func auditTrail(t testing.TB, c Case, req recovery.Request) []string {
	t.Helper()
	var id uuid.UUID
	if err := c.Pool.QueryRow(context.Background(),
		"SELECT id FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2", req.UserID, req.Key).Scan(&id); err != nil {
		t.Fatalf("recoverytest: key %s: %v", req.Key, err)
	}
	rows, err := c.Pool.Query(context.Background(), "SELECT action FROM audit_records WHERE idempotency_key_id = $1 ORDER BY id", id)
	if err != nil {
		t.Fatalf("recoverytest: %v", err)
	}
	defer rows.Close()
	var actions []string
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			t.Fatalf("recoverytest: %v", err)
		}
		actions = append(actions, a)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("recoverytest: %v", err)
	}
	return actions
}
