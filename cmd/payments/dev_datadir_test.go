package main_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A second `payments dev` on a data directory that a live one uses refuses
// at once, naming the first (its PID and address), and touches nothing: the
// first one's PostgreSQL keeps running and the first keeps serving.
func TestDev_aSecondDevOnTheSameDataDirRefusesAndTheFirstServesOn(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "data")
	cluster := noPostgresLeftIn(t, dataDir)
	first, base := startDev(t, dataDir)
	*cluster = clusterOf(t, dataDir)
	postmaster := childIn(t, *cluster, first.cmd.Process.Pid)

	started := time.Now()
	second := startProc(t, []string{"DATABASE_URL=", "STRIPE_API_BASE=", "STRIPE_SECRET_KEY="}, "dev", "--data-dir", dataDir,
		"--addr", "127.0.0.1:0", "--stripesim-addr", "127.0.0.1:0")
	select {
	case <-second.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the second dev did not exit")
	}
	// At once: it waits neither for PostgreSQL nor for anything else (the
	// bound is generous for a loaded machine; a start takes seconds).
	require.Less(t, time.Since(started), 5*time.Second)
	require.NotZero(t, second.cmd.ProcessState.ExitCode())
	stderr := second.output(&second.stderr)
	require.Contains(t, stderr, "PID "+strconv.Itoa(first.cmd.Process.Pid), "it names the first one's PID")
	require.Contains(t, stderr, base, "it names the first one's address")
	require.Contains(t, stderr, "--data-dir", "it says how to run a second one")
	require.NotContains(t, stderr, "postgres", "it never went near the cluster: %s", stderr)
	require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line, not the usage: %s", stderr)

	require.Contains(t, postgresIn(t, *cluster), postmaster, "the first one's PostgreSQL runs on, untouched")
	require.Equal(t, postmaster, childIn(t, *cluster, first.cmd.Process.Pid))
	status, body := get(t, base+"/readyz", "")
	require.Equal(t, http.StatusOK, status, body)
	code, created, err := createPayment(t, base, "after-the-second-dev")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code, string(created))

	// An operator command finds dev's database as keys does, without
	// DATABASE_URL, and touches nothing either.
	users := exec.Command(binary, "users", "create", "--email", "dora@example.com", "--data-dir", dataDir)
	users.Env = append(os.Environ(), "DATABASE_URL=")
	key, err := users.Output()
	require.NoError(t, err)
	status, body = get(t, base+"/v1/payments", strings.TrimSpace(string(key)))
	require.Equal(t, http.StatusOK, status, "the new user's key works: %s", body)
	require.Equal(t, postmaster, childIn(t, *cluster, first.cmd.Process.Pid))

	// Once the first is gone, the data directory is free again.
	require.Zero(t, first.signalAndWait(t, syscall.SIGTERM))
	again, base := startDev(t, dataDir)
	status, body = get(t, base+"/readyz", "")
	require.Equal(t, http.StatusOK, status, body)
	require.Zero(t, again.signalAndWait(t, syscall.SIGTERM))
}

// The embedded simulator's state lives in the data directory: a payment of
// an earlier run is refunded after a restart, whether dev stopped cleanly
// (SIGTERM) or was killed (SIGKILL) and started again at once. The refund
// is 201 only if the simulator still knows the payment intent.
func TestDev_aRestartedDevRefundsAPaymentOfTheEarlierRun(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "data")
	cluster := noPostgresLeftIn(t, dataDir)
	dev, base := startDev(t, dataDir)
	*cluster = clusterOf(t, dataDir)

	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		code, created, err := createPayment(t, base, "before-"+sig.String())
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, code, string(created))
		payment := paymentID(t, created)

		dev.signalAndWait(t, sig)
		dev, base = startDev(t, dataDir)

		code, body, err := postIdempotent(t, base, "/v1/refunds", "refund-after-"+sig.String(), `{"payment":"`+payment+`","amount":1000}`)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, code, "after %v: %s", sig, body)
	}
	require.Zero(t, dev.signalAndWait(t, syscall.SIGTERM))
}

// noPostgresLeftIn registers, before any process starts (so that it runs
// after they are killed), a check that no PostgreSQL is left in the
// cluster of dataDir; the test sets the cluster's real directory once dev
// made it.
func noPostgresLeftIn(t *testing.T, dataDir string) *string {
	t.Helper()
	cluster := new(string)
	t.Cleanup(func() {
		if *cluster != "" {
			requireNoPostgresIn(t, *cluster, 60*time.Second)
			if *cluster != filepath.Join(dataDir, "postgres") {
				os.RemoveAll(filepath.Dir(*cluster)) // relocated under /var/tmp (as root)
			}
		}
	})
	return cluster
}

// clusterOf is where dev's cluster in dataDir really lives.
func clusterOf(t *testing.T, dataDir string) string {
	t.Helper()
	cluster, err := filepath.EvalSymlinks(filepath.Join(dataDir, "postgres"))
	require.NoError(t, err)
	return cluster
}

// childIn is the postgres in cluster whose parent is pid: the postmaster
// that process started.
func childIn(t *testing.T, cluster string, pid int) int {
	t.Helper()
	for _, p := range postgresIn(t, cluster) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		_, rest, _ := strings.Cut(string(stat), ") ")
		if fields := strings.Fields(rest); len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			return p
		}
	}
	require.FailNow(t, "no postmaster", "no postgres in %s is a child of %d", cluster, pid)
	return 0
}

// A usage error names the one setting that is wrong and how to give it,
// in a line, not the whole usage; a missing or unknown command gets the
// usage, which lists the commands.
func TestCommands_aUsageErrorNamesTheSettingNotTheWholeUsage(t *testing.T) {
	t.Parallel()
	noDB := "DATABASE_URL=postgres://nobody@127.0.0.1:1/none"
	for _, tc := range []struct {
		args  []string
		env   []string
		names []string
		usage bool
	}{
		{[]string{"users", "create"}, nil, []string{"--email", "e.g. --email ada@example.com"}, false},
		{[]string{"keys", "retry", "--user", "ada@example.com", "some-key"}, []string{noDB, "STRIPE_API_BASE=", "STRIPE_SECRET_KEY="},
			[]string{"STRIPE_API_BASE=http://127.0.0.1:12111", "STRIPE_SECRET_KEY=sk_test_"}, false},
		{[]string{"keys", "show", "some-key"}, []string{noDB}, []string{"--user EMAIL"}, false},
		{[]string{"nonsense"}, nil, []string{`unknown command "nonsense"`, "Commands:"}, true},
	} {
		cmd := exec.Command(binary, tc.args...)
		cmd.Env = append(os.Environ(), tc.env...)
		out, err := cmd.CombinedOutput()
		var exitErr *exec.ExitError
		require.ErrorAs(t, err, &exitErr, "payments %v should fail: %s", tc.args, out)
		require.Equal(t, 2, exitErr.ExitCode(), "payments %v: %s", tc.args, out)
		for _, want := range tc.names {
			require.Contains(t, string(out), want, "payments %v", tc.args)
		}
		if !tc.usage {
			require.NotContains(t, string(out), "Commands:", "payments %v: not the whole usage", tc.args)
			require.LessOrEqual(t, strings.Count(string(out), "\n"), 2, "payments %v: %s", tc.args, out)
		}
	}
}

// `payments stripesim --state-file` keeps its objects across a restart.
func TestStripesim_theStateFileKeepsItsObjectsAcrossARestart(t *testing.T) {
	t.Parallel()
	stateFile := filepath.Join(t.TempDir(), "stripesim.json")
	start := func() (*proc, string) {
		sim := startProc(t, nil, "stripesim", "--addr", "127.0.0.1:0", "--state-file", stateFile)
		return sim, sim.waitFor(t, &sim.stdout, simListening)
	}
	call := func(method, url, form string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(form))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer sk_test_state_file")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var body struct{ ID string }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return resp.StatusCode, body.ID
	}
	sim, url := start()
	status, id := call(http.MethodPost, url+"/v1/payment_intents", "amount=2000&currency=usd")
	require.Equal(t, http.StatusOK, status)
	require.Zero(t, sim.signalAndWait(t, syscall.SIGTERM))

	sim, url = start()
	status, got := call(http.MethodGet, url+"/v1/payment_intents/"+id, "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, id, got)
	require.Zero(t, sim.signalAndWait(t, syscall.SIGTERM))
}
