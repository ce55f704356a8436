package main_test

// `payments dev` killed with a request in flight and started again at once
// on the same --data-dir, as a supervisor such as systemd restarts it. The new
// run finds the killed run's PostgreSQL still shutting down (it got its
// parent-death signal a moment ago) and must wait for it instead of failing
// on its shared memory, then find everything the earlier runs wrote.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const restartRounds = 20

func TestDev_restartsAtOnceAfterSIGKILLWithARequestInFlight(t *testing.T) {
	t.Parallel()
	// Stripe outlives the service's crashes, as the real one would.
	simURL := startSimulator(t)
	// Under a fresh mode-0700 directory, like a clone under /root or a `mktemp
	// -d`: as root, dev relocates its cluster under /var/tmp behind a symlink,
	// the case where a restart at once used to fail.
	dataDir := filepath.Join(t.TempDir(), "data")
	var cluster string // where the cluster really lives, once dev has made it
	// Registered before any process is started, so it runs after they are killed.
	t.Cleanup(func() {
		if cluster == "" {
			return
		}
		requireNoPostgresIn(t, cluster, 60*time.Second)
		if cluster != filepath.Join(dataDir, "postgres") {
			os.RemoveAll(filepath.Dir(cluster))
		}
	})

	dev, base := startDevAgainst(t, dataDir, simURL)
	var err error
	cluster, err = filepath.EvalSymlinks(filepath.Join(dataDir, "postgres"))
	require.NoError(t, err)
	if os.Geteuid() == 0 {
		_, err := os.Readlink(filepath.Join(dataDir, "postgres"))
		require.NoError(t, err, "as root, the cluster under a 0700 directory is relocated behind a symlink")
	}

	paymentOf := map[string]string{} // key -> payment id
	finish := func(key string) {
		t.Helper()
		status, body := retryUntilFinal(t, func() (int, []byte, error) { return createPayment(t, base, key) })
		require.Equal(t, http.StatusCreated, status, string(body))
		id := paymentID(t, body)
		require.Len(t, simPaymentIntents(t, simURL, id), 1, "key %s: Stripe saw one PaymentIntent for its payment", key)
		paymentOf[key] = id
	}

	for round := range restartRounds {
		key := fmt.Sprintf("restart-%d", round)
		inFlight := make(chan error, 1)
		go func() {
			_, _, err := createPayment(t, base, key)
			inFlight <- err
		}()
		// The claim has committed the payment; the request now sleeps at the
		// failpoint, holding its key.
		waitForKey(t, base, key, "payment_created")
		killed := postgresIn(t, cluster)
		require.NotEmpty(t, killed)

		dev.signalAndWait(t, syscall.SIGKILL)
		// Its connection was reset as the process died, so this takes no time.
		require.Error(t, <-inFlight, "the request died with the process")
		dev, base = startDevAgainst(t, dataDir, simURL) // at once
		for _, pid := range killed {
			require.NotContains(t, postgresIn(t, cluster), pid, "round %d: the killed run's postgres is gone", round)
		}

		// The killed request resumes to one payment; every earlier key replays its own.
		finish(key)
		for k, id := range paymentOf {
			status, body, err := createPayment(t, base, k)
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, status, string(body))
			require.Equal(t, id, paymentID(t, body), "key %s", k)
		}
	}
	status, body := get(t, base+"/v1/payments?limit=100", aliceKey)
	require.Equal(t, http.StatusOK, status, body)
	var list struct{ Data []struct{ ID string } }
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	require.Len(t, list.Data, restartRounds, "one payment per key, no more")

	dev.signalAndWait(t, syscall.SIGKILL)
	requireNoPostgresIn(t, cluster, 30*time.Second)
}

// startDevAgainst runs `payments dev` on dataDir, with the simulator at
// simURL, a create that sleeps right after its claim committed, and a short
// lock lifetime so the killed run's keys are free again quickly.
func startDevAgainst(t *testing.T, dataDir, simURL string) (*proc, string) {
	t.Helper()
	env := []string{"DATABASE_URL=", "STRIPE_API_BASE=" + simURL, "STRIPE_SECRET_KEY=", "PAYMENTS_LOCK_TIMEOUT=1s",
		"PAYMENTS_FAILPOINTS=after_commit:payment_created=sleep:60000"}
	p := startProc(t, env, "dev", "--data-dir", dataDir, "--addr", "127.0.0.1:0")
	return p, p.waitFor(t, &p.stdout, devURL)
}

// waitForKey polls alice's key until it stands at recoveryPoint, locked.
func waitForKey(t *testing.T, base, key, recoveryPoint string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, body := get(t, base+"/v1/idempotency_keys/"+url.PathEscape(key), aliceKey)
		var state struct {
			RecoveryPoint string `json:"recovery_point"`
			Locked        bool
		}
		if status == http.StatusOK {
			require.NoError(t, json.Unmarshal([]byte(body), &state))
			if state.RecoveryPoint == recoveryPoint && state.Locked {
				return
			}
		}
		require.True(t, time.Now().Before(deadline), "key %s never stood locked at %s; last: %d %s", key, recoveryPoint, status, body)
		time.Sleep(10 * time.Millisecond)
	}
}

// requireNoPostgresIn waits until no postgres works in cluster any more.
func requireNoPostgresIn(t *testing.T, cluster string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		pids := postgresIn(t, cluster)
		if len(pids) == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "postgres %v still running in %s", pids, cluster)
		time.Sleep(50 * time.Millisecond)
	}
}

func paymentID(t *testing.T, body []byte) string {
	t.Helper()
	var p struct{ ID string }
	require.NoError(t, json.Unmarshal(body, &p))
	require.NotEmpty(t, p.ID)
	return p.ID
}

// postgresIn lists the live postgres processes working in cluster: the
// postmaster changes into its data directory, and its children inherit that.
// A zombie has no working directory, so it does not count.
func postgresIn(t *testing.T, cluster string) []int {
	t.Helper()
	dir, err := os.Stat(cluster)
	require.NoError(t, err)
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || filepath.Base(strings.TrimSuffix(exe, " (deleted)")) != "postgres" {
			continue
		}
		if cwd, err := os.Stat(fmt.Sprintf("/proc/%d/cwd", pid)); err == nil && os.SameFile(cwd, dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}
