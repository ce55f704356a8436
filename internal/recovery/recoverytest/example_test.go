package recoverytest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/recovery/recoverytest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

// The example flow a team adds, POST /v1/customers: a local row, one call
// to the remote side with a child key, the answer.
//
//	started
//	  │ tx: insert the customer
//	  ▼
//	customer_saved
//	  │ remote: create the customer, child key "customer"
//	  │ tx: record its id, store 201
//	  ▼
//	finished
const customerSaved recovery.RecoveryPoint = "customer_saved"

type customerParams struct {
	Email string `json:"email"`
}

func customersFlow(remoteURL string) *recovery.Flow {
	return recovery.NewFlow("create_customer",
		recovery.From(recovery.Started, recovery.LocalPhase(insertCustomer), customerSaved),
		recovery.From(customerSaved, recovery.ExternalPhase("customer", createCustomer(remoteURL), recordCustomer), recovery.Finished),
	)
}

func insertCustomer(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
	var p customerParams
	if err := k.DecodeParams(&p); err != nil {
		return recovery.Outcome{}, err
	}
	if _, err := tx.Exec(ctx, "INSERT INTO customers (idempotency_key_id, email) VALUES ($1, $2)", k.ID, p.Email); err != nil {
		return recovery.Outcome{}, err
	}
	_, err := tx.Exec(ctx, `INSERT INTO audit_records (user_id, action, resource_type, resource_id, data, idempotency_key_id)
		VALUES ($1, 'customer.created', 'customer', $2, '{}', $3)`, k.UserID, k.ID.String(), k.ID)
	return recovery.Next(customerSaved), err
}

// createCustomer calls the remote side with the step's child key. Its
// failures are transient: the request resumes, and calls again with the key.
func createCustomer(remoteURL string) func(context.Context, *recovery.Key) (string, error) {
	return func(ctx context.Context, k *recovery.Key) (string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, remoteURL+"/customers", nil)
		req.Header.Set("Idempotency-Key", k.ChildKey("customer"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", recovery.Transient(err)
		}
		defer resp.Body.Close()
		id, err := io.ReadAll(resp.Body) // fails when the answer is cut off
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("the remote side answered %s", resp.Status)
		}
		if err != nil {
			return "", recovery.Transient(err)
		}
		return string(id), nil
	}
}

func recordCustomer(ctx context.Context, tx *db.Tx, k *recovery.Key, remoteID string) (recovery.Outcome, error) {
	if _, err := tx.Exec(ctx, "UPDATE customers SET remote_id = $1 WHERE idempotency_key_id = $2", remoteID, k.ID); err != nil {
		return recovery.Outcome{}, err
	}
	return recovery.RespondJSON(201, map[string]string{"customer": k.ID.String(), "remote_id": remoteID})
}

// remote stands in for the remote side, over HTTP: it makes one customer
// per Idempotency-Key, as Stripe does, unless forgetful.
type remote struct {
	mu        sync.Mutex
	byKey     map[string]string
	made      int
	forgetful bool // ignores the key: a second call makes a second customer
}

func (r *remote) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := req.Header.Get("Idempotency-Key")
	if _, ok := r.byKey[key]; !ok || r.forgetful {
		r.made++
		r.byKey[key] = fmt.Sprintf("cus_%d", r.made)
	}
	_, _ = io.WriteString(w, r.byKey[key])
}

func (r *remote) effects() int { r.mu.Lock(); defer r.mu.Unlock(); return r.made }

func createCustomersTable(pool *pgxpool.Pool) error {
	_, err := pool.Exec(context.Background(), `
		CREATE TABLE customers (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, idempotency_key_id uuid UNIQUE, email text NOT NULL, remote_id text);
		INSERT INTO key_references (table_name, on_key_deleted) VALUES ('customers', 'let_go');
		INSERT INTO users (email) VALUES ('owner@example.com');`)
	return err
}

func customerRequest() recovery.Request {
	return recovery.Request{UserID: 1, Method: "POST", Path: "/v1/customers",
		Body: []byte(`{"email":"ada@example.com"}`), Params: customerParams{Email: "ada@example.com"}}
}

// The customers flow, proven exactly-once: killed at every failpoint of
// its declaration, and its call met by every fault of its remote side
// (faultyRemote, in faults_test.go), resumed by a retry and by the completer.
func TestProve_customers(t *testing.T) {
	t.Parallel()
	r := &faultyRemote{remote: remote{byKey: map[string]string{}}}
	remoteURL := recoverytest.Server(t, "remote", func() http.Handler { return r })
	recoverytest.Prove(t, recoverytest.Case{
		Pool: recoverytest.Database(t, createCustomersTable), Flow: customersFlow(remoteURL),
		Request: customerRequest, Effects: r.effects, Faults: r.faults(), Want: recoverytest.Want{Status: 201},
	})
}
