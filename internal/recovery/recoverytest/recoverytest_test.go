package recoverytest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/recovery/recoverytest"
)

// The proof fails a flow whose remote side ignores the child key: a
// resumed call makes a second customer.
func TestProve_failsAFlowThatActsTwice(t *testing.T) {
	t.Parallel()
	r := &remote{byKey: map[string]string{}, forgetful: true}
	remoteURL := recoverytest.Server(t, "remote", func() http.Handler { return r })
	pool := recoverytest.Database(t, createCustomersTable)
	rec := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		recoverytest.Prove(rec, recoverytest.Case{
			Pool: pool, Flow: customersFlow(remoteURL), Request: customerRequest, Effects: r.effects,
		})
	}()
	<-done
	require.Contains(t, rec.failures, "effects at the remote side", "the proof did not notice the second customer")
}

// recorder is a testing.TB whose failures are only recorded.
type recorder struct {
	testing.TB
	mu       sync.Mutex
	failures string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures += fmt.Sprintf(format, args...) + "\n"
	r.TB.Logf("(expected) "+format, args...)
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

// The proof fails a flow whose answer depends on what its process
// remembers from an earlier phase: resumed by another process, it answers
// otherwise than the clean run.
func TestProve_failsAFlowWhoseAnswerForgets(t *testing.T) {
	t.Parallel()
	r := &remote{byKey: map[string]string{}}
	remoteURL := recoverytest.Server(t, "remote", func() http.Handler { return r })
	pool := recoverytest.Database(t, createCustomersTable)
	flow := forgetfulFlow(remoteURL, func(ctx context.Context, tx *db.Tx, k *recovery.Key, remoteID string, email any) (recovery.Outcome, error) {
		return recovery.RespondJSON(201, map[string]any{"customer": k.ID.String(), "email": email})
	})
	rec := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		recoverytest.Prove(rec, recoverytest.Case{Pool: pool, Flow: flow, Request: customerRequest, Effects: r.effects})
	}()
	<-done
	require.Contains(t, rec.failures, "killed at after_commit:customer_saved, resumed by the retry: answered", "the proof did not notice the answer without the email")
}

// Prove kills real processes: every attempt it crashes runs in a process
// of its own, which is gone once Prove returns.
func TestProve_killsTheRealProcess(t *testing.T) {
	t.Parallel()
	pool := recoverytest.Database(t, func(pool *pgxpool.Pool) error {
		_, err := pool.Exec(context.Background(), `CREATE TABLE pids (pid int NOT NULL); INSERT INTO users (email) VALUES ('owner@example.com');`)
		return err
	})
	notePID := func(ctx context.Context, tx *db.Tx, _ *recovery.Key) error {
		_, err := tx.Exec(ctx, "INSERT INTO pids VALUES ($1)", os.Getpid())
		return err
	}
	const noted recovery.RecoveryPoint = "noted"
	flow := recovery.NewFlow("note_pid",
		recovery.From(recovery.Started, recovery.LocalPhase(func(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
			return recovery.Next(noted), notePID(ctx, tx, k)
		}), noted),
		recovery.From(noted, recovery.LocalPhase(func(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
			if err := notePID(ctx, tx, k); err != nil {
				return recovery.Outcome{}, err
			}
			return recovery.RespondJSON(200, map[string]string{"noted": "yes"})
		}), recovery.Finished),
	)
	recoverytest.Prove(t, recoverytest.Case{Pool: pool, Flow: flow, Effects: func() int { return 0 },
		Request: func() recovery.Request { return recovery.Request{UserID: 1, Method: "POST", Path: "/v1/pids"} }})

	rows, err := pool.Query(context.Background(), "SELECT DISTINCT pid FROM pids WHERE pid <> $1", os.Getpid())
	require.NoError(t, err)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.NotEmpty(t, pids, "every attempt ran in the test's own process")
	for _, pid := range pids {
		require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "process %d, killed at a failpoint, still runs", pid)
	}
}

// The measure issue 30 set for a team adding POST /v1/customers with its
// crash proof: at most 5 files and 250 hand-written lines, the proof itself
// at most 20 lines through recoverytest. The customers example is one file;
// its proof is the test and the two functions only it uses (its request,
// its table). The faults its remote side meets are the stand-in's own
// (faultyRemote, faults_test.go), not counted: a team's remote side brings
// its faults with it (the Stripe simulator's, stripesimtest.Faults).
func TestExample_customersIsSmall(t *testing.T) {
	t.Parallel()
	const file = "example_test.go"
	src, err := os.ReadFile(file)
	require.NoError(t, err)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, 0)
	require.NoError(t, err)
	lines := func(n ast.Node) int { return fset.Position(n.End()).Line - fset.Position(n.Pos()).Line + 1 }
	proof := 0
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && slices.Contains([]string{"TestProve_customers", "customerRequest", "createCustomersTable"}, fn.Name.Name) {
			proof += lines(fn)
		}
	}
	require.LessOrEqual(t, lines(f), 250, "the customers flow and its proof, in lines")
	require.LessOrEqual(t, proof, 20, "the proof, in lines")
	t.Logf("the customers example: 1 file, %d lines; its proof %d lines", lines(f), proof)
}

// The proof fails a flow that answers right but leaves its record wrong
// when resumed in another process: its record phase writes the email from
// the first phase's memory, which a killed process takes with it.
func TestProve_failsAFlowWhoseStateForgets(t *testing.T) {
	t.Parallel()
	r := &remote{byKey: map[string]string{}}
	remoteURL := recoverytest.Server(t, "remote", func() http.Handler { return r })
	pool := recoverytest.Database(t, createCustomersTable)
	flow := forgetfulFlow(remoteURL, func(ctx context.Context, tx *db.Tx, k *recovery.Key, remoteID string, email any) (recovery.Outcome, error) {
		if _, err := tx.Exec(ctx, "UPDATE customers SET email = coalesce($1, '') WHERE key_id = $2", email, k.ID); err != nil {
			return recovery.Outcome{}, err
		}
		return recordCustomer(ctx, tx, k, remoteID)
	})
	state := func(resp recovery.Response) []byte {
		var answer struct {
			Customer string `json:"customer"`
		}
		require.NoError(t, json.Unmarshal(resp.Body, &answer))
		var row []byte
		require.NoError(t, pool.QueryRow(context.Background(),
			"SELECT json_build_object('email', email, 'remote_id', remote_id) FROM customers WHERE key_id = $1", answer.Customer).Scan(&row))
		return row
	}
	rec := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		recoverytest.Prove(rec, recoverytest.Case{Pool: pool, Flow: flow, Request: customerRequest, Effects: r.effects, State: state})
	}()
	<-done
	require.Contains(t, rec.failures, "killed at after_commit:customer_saved, resumed by the retry: left the state", "the proof did not notice the record without the email")
	require.NotContains(t, rec.failures, ": answered", "the answers were right")
}

// forgetfulFlow is the customers flow with a bug: its first phase keeps the
// email in this process's memory, and its record phase, record, gets it
// from there (nil in a process that did not run the first phase, as after
// a kill).
func forgetfulFlow(remoteURL string,
	record func(ctx context.Context, tx *db.Tx, k *recovery.Key, remoteID string, email any) (recovery.Outcome, error)) *recovery.Flow {
	var emails sync.Map // key id to email
	return recovery.NewFlow("create_customer",
		recovery.From(recovery.Started, recovery.LocalPhase(func(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
			var p customerParams
			if err := k.DecodeParams(&p); err != nil {
				return recovery.Outcome{}, err
			}
			emails.Store(k.ID, p.Email)
			return insertCustomer(ctx, tx, k)
		}), customerSaved),
		recovery.From(customerSaved, recovery.ExternalPhase("customer", createCustomer(remoteURL),
			func(ctx context.Context, tx *db.Tx, k *recovery.Key, remoteID string) (recovery.Outcome, error) {
				email, _ := emails.Load(k.ID)
				return record(ctx, tx, k, remoteID, email)
			}), recovery.Finished),
	)
}
