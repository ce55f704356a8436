package recoverytest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

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

func customersFlow(remote *remote) *recovery.Flow {
	return recovery.NewFlow("create_customer",
		recovery.From(recovery.Started, recovery.LocalPhase(insertCustomer), customerSaved),
		recovery.From(customerSaved, recovery.ExternalPhase("customer", remote.createCustomer, recordCustomer), recovery.Finished),
	)
}

func insertCustomer(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
	var p customerParams
	if err := k.DecodeParams(&p); err != nil {
		return recovery.Outcome{}, err
	}
	if _, err := tx.Exec(ctx, "INSERT INTO customers (key_id, email) VALUES ($1, $2)", k.ID, p.Email); err != nil {
		return recovery.Outcome{}, err
	}
	_, err := tx.Exec(ctx, `INSERT INTO audit_records (user_id, action, resource_type, resource_id, data, idempotency_key_id)
		VALUES ($1, 'customer.created', 'customer', $2, '{}', $3)`, k.UserID, k.ID.String(), k.ID)
	return recovery.Next(customerSaved), err
}

func recordCustomer(ctx context.Context, tx *db.Tx, k *recovery.Key, remoteID string) (recovery.Outcome, error) {
	if _, err := tx.Exec(ctx, "UPDATE customers SET remote_id = $1 WHERE key_id = $2", remoteID, k.ID); err != nil {
		return recovery.Outcome{}, err
	}
	return recovery.RespondJSON(201, map[string]string{"customer": k.ID.String(), "remote_id": remoteID})
}

// remote stands in for the remote side: it makes one customer per child
// key, as Stripe does, unless forgetful; and its next call may meet a
// fault (faults).
type remote struct {
	mu        sync.Mutex
	byKey     map[string]string
	made      int
	forgetful bool // ignores child keys: a second call makes a second customer
	careless  bool // reports its failures unmarked, not recovery.Transient

	fault string        // the fault the next call meets, "" for none
	hold  time.Duration // how long "held" holds it
}

func (r *remote) createCustomer(_ context.Context, k *recovery.Key) (string, error) {
	r.mu.Lock()
	fault, hold := r.fault, r.hold
	r.fault = ""
	r.mu.Unlock()
	switch fault {
	case "unreachable":
		return "", r.failure(errors.New("remote side unreachable"))
	case "held":
		time.Sleep(hold) // the remote side's slowness itself
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.byKey[k.ChildKey("customer")]
	if !ok || r.forgetful {
		r.made++
		id = fmt.Sprintf("cus_%d", r.made)
		r.byKey[k.ChildKey("customer")] = id
	}
	if fault == "lost" {
		return "", r.failure(errors.New("the answer was lost"))
	}
	return id, nil
}

// failure is err as the call reports it: transient, unless careless.
func (r *remote) failure(err error) error {
	if r.careless {
		return err
	}
	return recovery.Transient(err)
}

// faults are the remote side's faults, for recoverytest: unreachable
// (nothing done), lost (done, the answer lost) and held (done, slowly).
func (r *remote) faults() []recoverytest.Fault {
	var faults []recoverytest.Fault
	for _, name := range []string{"unreachable", "lost", "held"} {
		faults = append(faults, recoverytest.Fault{
			Name: name, Holds: name == "held",
			Arm: func(step string, hold time.Duration) error {
				if step != "customer" {
					return fmt.Errorf("no step %q", step)
				}
				r.mu.Lock()
				defer r.mu.Unlock()
				r.fault, r.hold = name, hold
				return nil
			},
			Armed:  func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.fault != "" },
			Disarm: func() { r.mu.Lock(); defer r.mu.Unlock(); r.fault = "" },
		})
	}
	return faults
}

func (r *remote) effects() int { r.mu.Lock(); defer r.mu.Unlock(); return r.made }

func customersDB(t *testing.T) *pgxpool.Pool {
	pool := dbtest.NewPool(t)
	_, err := pool.Exec(context.Background(), `
		CREATE TABLE customers (key_id uuid PRIMARY KEY REFERENCES idempotency_keys (id), email text NOT NULL, remote_id text);
		INSERT INTO users (email) VALUES ('owner@example.com');`)
	require.NoError(t, err)
	return pool
}

func customerRequest() recovery.Request {
	return recovery.Request{UserID: 1, Method: "POST", Path: "/v1/customers",
		Body: []byte(`{"email":"ada@example.com"}`), Params: customerParams{Email: "ada@example.com"}}
}

// The customers flow, proven exactly-once at every failpoint of its
// declaration and against every fault of its remote side, resumed by a
// retry and by the completer.
func TestProve_customers(t *testing.T) {
	t.Parallel()
	r := &remote{byKey: map[string]string{}}
	recoverytest.Prove(t, recoverytest.Case{
		Pool: customersDB(t), Flow: customersFlow(r), Request: customerRequest, Effects: r.effects,
		Faults: r.faults(),
	})
}

// The proof fails a flow that reports the remote side's failure as its
// own (a 500), where the request could resume: the client is not told to
// retry.
func TestProve_failsAFlowThatFailsOnAFault(t *testing.T) {
	t.Parallel()
	r := &remote{byKey: map[string]string{}, careless: true}
	rec := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		recoverytest.Prove(rec, recoverytest.Case{
			Pool: customersDB(t), Flow: customersFlow(r), Request: customerRequest, Effects: r.effects,
			Faults: r.faults(),
		})
	}()
	<-done
	require.Contains(t, rec.failures, "unreachable at customer, resumed by the retry: the attempt answered 500", "the proof did not notice the 500")
}

// The proof fails a flow whose remote side ignores the child key: a
// resumed call makes a second customer.
func TestProve_failsAFlowThatActsTwice(t *testing.T) {
	t.Parallel()
	r := &remote{byKey: map[string]string{}, forgetful: true}
	rec := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		recoverytest.Prove(rec, recoverytest.Case{
			Pool: customersDB(t), Flow: customersFlow(r), Request: customerRequest, Effects: r.effects,
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
