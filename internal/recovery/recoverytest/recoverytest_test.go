package recoverytest_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"testing"

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
	var emails sync.Map // key id to email, in this process's memory only: the bug
	flow := recovery.NewFlow("create_customer",
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
				return recovery.RespondJSON(201, map[string]any{"customer": k.ID.String(), "email": email})
			}), recovery.Finished),
	)
	rec := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		recoverytest.Prove(rec, recoverytest.Case{Pool: pool, Flow: flow, Request: customerRequest, Effects: r.effects})
	}()
	<-done
	require.Contains(t, rec.failures, "killed at after_commit:customer_saved, resumed by the retry: answered", "the proof did not notice the answer without the email")
}
