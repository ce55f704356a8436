package recoverytest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
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
			Pool: pool, Flow: customersFlow(remoteURL), Request: customerRequest, Effects: r.effects, Want: created,
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
	logs     string
}

// prove runs Prove on c with a recorder, and returns it once Prove is done.
func prove(t *testing.T, c recoverytest.Case) *recorder {
	rec := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		recoverytest.Prove(rec, c)
	}()
	<-done
	return rec
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures += fmt.Sprintf(format, args...) + "\n"
	r.TB.Logf("(expected) "+format, args...)
}

func (r *recorder) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs += fmt.Sprintf(format, args...) + "\n"
	r.TB.Logf(format, args...)
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
		recoverytest.Prove(rec, recoverytest.Case{Pool: pool, Flow: flow, Request: customerRequest, Effects: r.effects, Want: created})
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
		Request: func() recovery.Request { return recovery.Request{UserID: 1, Method: "POST", Path: "/v1/pids"} },
		Want:    recoverytest.Want{Status: 200, JSON: `{"noted": "yes"}`}})

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
		if _, err := tx.Exec(ctx, "UPDATE customers SET email = coalesce($1, '') WHERE idempotency_key_id = $2", email, k.ID); err != nil {
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
			"SELECT json_build_object('email', email, 'remote_id', remote_id) FROM customers WHERE idempotency_key_id = $1", answer.Customer).Scan(&row))
		return row
	}
	rec := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		recoverytest.Prove(rec, recoverytest.Case{Pool: pool, Flow: flow, Request: customerRequest, Effects: r.effects, State: state, Want: created})
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

// created is what the customers flow answers.
var created = recoverytest.Want{Status: 201}

// A proof holds every run to what the flow should answer, not only to the
// other runs: a flow that calls its remote side without the child key, is
// refused in every run, and stores the refusal as its answer, agrees with
// itself, and fails.
func TestProve_failsAFlowThatIsWrongInEveryRun(t *testing.T) {
	t.Parallel()
	refusing := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == "" {
			http.Error(w, "no key", http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, "cus_1")
	})
	remoteURL := recoverytest.Server(t, "remote", func() http.Handler { return refusing })
	pool := recoverytest.Database(t, createCustomersTable)
	keyless := func(ctx context.Context, k *recovery.Key) (string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, remoteURL+"/customers", nil) // the bug: no Idempotency-Key
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", recovery.Transient(err)
		}
		defer resp.Body.Close()
		return resp.Status, nil
	}
	declined := func(ctx context.Context, tx *db.Tx, k *recovery.Key, status string) (recovery.Outcome, error) {
		if status != "200 OK" {
			return recovery.RespondJSON(402, map[string]string{"error": status}) // the refusal, stored as a decline
		}
		return recordCustomer(ctx, tx, k, "cus_1")
	}
	flow := recovery.NewFlow("create_customer",
		recovery.From(recovery.Started, recovery.LocalPhase(insertCustomer), customerSaved),
		recovery.From(customerSaved, recovery.ExternalPhase("customer", keyless, declined), recovery.Finished),
	)
	rec := prove(t, recoverytest.Case{Pool: pool, Flow: flow, Request: customerRequest, Effects: func() int { return 0 }, Want: created})
	require.Contains(t, rec.failures, "answered 402", "the proof did not hold the runs to the answer the case wants")
	require.Contains(t, rec.failures, "the case wants 201")
	require.NotContains(t, rec.logs, "proven in")

	// Accepted without a key, the call still fails the proof.
	rec = prove(t, recoverytest.Case{Pool: pool, Flow: flow, Request: customerRequest, Effects: func() int { return 0 },
		Want: recoverytest.Want{Status: 402}})
	require.Contains(t, rec.failures, "with no Idempotency-Key", "the proof did not notice the call without a child key")
}

// A flow that makes a new child key for each attempt (a random one, say)
// sends a resumed call under another key than the first: the proof fails
// it, by the keys its remote side saw as well as by the second customer.
func TestProve_failsAFlowWhoseChildKeyChangesPerAttempt(t *testing.T) {
	t.Parallel()
	r := &remote{byKey: map[string]string{}}
	remoteURL := recoverytest.Server(t, "remote", func() http.Handler { return r })
	pool := recoverytest.Database(t, createCustomersTable)
	fresh := func(ctx context.Context, k *recovery.Key) (string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, remoteURL+"/customers", nil)
		req.Header.Set("Idempotency-Key", k.ChildKey("customer")+"-"+strconv.Itoa(os.Getpid())) // the bug: per process
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", recovery.Transient(err)
		}
		defer resp.Body.Close()
		id, err := io.ReadAll(resp.Body)
		return string(id), err
	}
	flow := recovery.NewFlow("create_customer",
		recovery.From(recovery.Started, recovery.LocalPhase(insertCustomer), customerSaved),
		recovery.From(customerSaved, recovery.ExternalPhase("customer", fresh, recordCustomer), recovery.Finished),
	)
	rec := prove(t, recoverytest.Case{Pool: pool, Flow: flow, Request: customerRequest, Effects: r.effects, Want: created})
	require.Contains(t, rec.failures, "killed at after_call:customer, resumed by the retry: the remote side saw 2 child key(s)")
	require.Contains(t, rec.logs, "killed at after_call:customer, resumed by the retry: NOT proven")
	require.Contains(t, rec.logs, "(SIGKILL) at after_call:customer", "the proof did not say what it killed where")
}

// Want is required: a proof that only compares runs with each other
// proves nothing about what they should answer.
func TestProve_requiresWhatTheFlowShouldAnswer(t *testing.T) {
	t.Parallel()
	rec := prove(t, recoverytest.Case{Flow: customersFlow("http://127.0.0.1:1"), Request: customerRequest, Effects: func() int { return 0 }})
	require.Contains(t, rec.failures, "Case.Want.Status is required")
}

// After a mismatch a run is never reported proven: a forgetful remote side
// makes a second customer when the answer to the first was lost, and the
// run says so, and that it is not proven.
func TestProve_neverSaysProvenAfterAMismatch(t *testing.T) {
	t.Parallel()
	r := &faultyRemote{remote: remote{byKey: map[string]string{}, forgetful: true}}
	remoteURL := recoverytest.Server(t, "remote", func() http.Handler { return r })
	pool := recoverytest.Database(t, createCustomersTable)
	rec := prove(t, recoverytest.Case{Pool: pool, Flow: customersFlow(remoteURL), Request: customerRequest, Effects: r.effects, Want: created})
	require.Contains(t, rec.failures, "effects at the remote side")
	for _, line := range strings.Split(rec.failures, "\n") {
		if where, _, ok := strings.Cut(line, ": 2 effects at the remote side"); ok {
			where = strings.TrimPrefix(where, "recoverytest: ")
			require.Contains(t, rec.logs, where+": NOT proven")
			require.NotContains(t, rec.logs, where+": proven in")
		}
	}
}
