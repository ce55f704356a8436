package recoverytest_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/recovery/recoverytest"
)

// faultyRemote is the customers example's remote side with faults, over
// HTTP: its next call may meet the one the proof armed (faults).
type faultyRemote struct {
	remote
	fmu   sync.Mutex
	fault string        // the fault the next call meets, "" for none
	hold  time.Duration // how long "held" holds it
}

func (r *faultyRemote) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.fmu.Lock()
	fault, hold := r.fault, r.hold
	r.fault = ""
	r.fmu.Unlock()
	switch fault {
	case "unreachable": // nothing done
		http.Error(w, "the remote side is unreachable", http.StatusInternalServerError)
		return
	case "held": // the remote side's slowness itself
		time.Sleep(hold)
	case "lost": // done, then the answer is cut off: its status sent, its body never
		r.remote.ServeHTTP(httptest.NewRecorder(), req)
		// Not the connection closed before any answer: Go's transport
		// would resend the request (it has an Idempotency-Key) on a new
		// connection, and the flow would never see the fault.
		w.Header().Set("Content-Length", "64")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // closes the connection
	}
	r.remote.ServeHTTP(w, req)
}

// faults are the remote side's faults, for recoverytest: unreachable
// (nothing done), lost (done, the answer lost) and held (done, slowly).
func (r *faultyRemote) faults() []recoverytest.Fault {
	var faults []recoverytest.Fault
	for _, name := range []string{"unreachable", "lost", "held"} {
		faults = append(faults, recoverytest.Fault{
			Name: name, Holds: name == "held",
			Arm: func(step string, hold time.Duration) error {
				if step != "customer" {
					return fmt.Errorf("no step %q", step)
				}
				r.fmu.Lock()
				defer r.fmu.Unlock()
				r.fault, r.hold = name, hold
				return nil
			},
			Armed:  func() bool { r.fmu.Lock(); defer r.fmu.Unlock(); return r.fault != "" },
			Disarm: func() { r.fmu.Lock(); defer r.fmu.Unlock(); r.fault = "" },
		})
	}
	return faults
}

// The proof fails a flow that reports the remote side's failure as its
// own (a 500), where the request could resume: the client is not told to
// retry.
func TestProve_failsAFlowThatFailsOnAFault(t *testing.T) {
	t.Parallel()
	r := &faultyRemote{remote: remote{byKey: map[string]string{}}}
	remoteURL := recoverytest.Server(t, "remote", func() http.Handler { return r })
	pool := recoverytest.Database(t, createCustomersTable)
	create := createCustomer(remoteURL)
	careless := func(ctx context.Context, k *recovery.Key) (string, error) {
		id, err := create(ctx, k)
		var transient *recovery.TransientError
		if errors.As(err, &transient) {
			err = transient.Err // the failure unmarked, reported as the flow's own: the bug
		}
		return id, err
	}
	flow := recovery.NewFlow("create_customer",
		recovery.From(recovery.Started, recovery.LocalPhase(insertCustomer), customerSaved),
		recovery.From(customerSaved, recovery.ExternalPhase("customer", careless, recordCustomer), recovery.Finished),
	)
	rec := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		recoverytest.Prove(rec, recoverytest.Case{Pool: pool, Flow: flow, Request: customerRequest, Effects: r.effects, Faults: r.faults(), Want: created})
	}()
	<-done
	require.Contains(t, rec.failures, "unreachable at customer, resumed by the retry: the attempt answered 500", "the proof did not notice the 500")
}
