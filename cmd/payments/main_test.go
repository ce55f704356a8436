package main_test

// These tests build the real binary and drive it as a user would: start it,
// talk HTTP to it, send it signals, kill it.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/openapitest"
	"github.com/example/payments/internal/users"
	"github.com/example/payments/migrations"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "payments-bin-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "payments")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building payments: %v\n%s", err, out)
		os.Exit(1)
	}
	code := dbtest.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

const aliceKey = "sk_dev_alice_0123456789abcdef"

// proc is a running payments process whose output is captured.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stdout bytes.Buffer
	stderr bytes.Buffer
	exited chan struct{}
}

func startProc(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(binary, args...), exited: make(chan struct{})}
	// Every process's metrics on a port of its own (the defaults are one
	// port for all serve and dev processes); env may say otherwise.
	p.cmd.Env = append(append(os.Environ(), "PAYMENTS_METRICS_ADDR=127.0.0.1:0"), env...)
	p.cmd.Stdout = &lockedWriter{&p.mu, &p.stdout}
	p.cmd.Stderr = &lockedWriter{&p.mu, &p.stderr}
	require.NoError(t, p.cmd.Start())
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("payments %v stdout:\n%s\nstderr:\n%s", args, p.output(&p.stdout), p.output(&p.stderr))
		}
	})
	return p
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(b)
}

func (p *proc) output(b *bytes.Buffer) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return b.String()
}

// waitFor polls the process output until re matches, and returns the first group.
func (p *proc) waitFor(t *testing.T, b *bytes.Buffer, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		if m := re.FindStringSubmatch(p.output(b)); m != nil {
			return m[1]
		}
		select {
		case <-p.exited:
			t.Fatalf("payments exited before printing %s", re)
		case <-deadline:
			t.Fatalf("payments did not print %s in time", re)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (p *proc) signalAndWait(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig))
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("payments did not exit after %v", sig)
	}
	return p.cmd.ProcessState.ExitCode()
}

var devURL = regexp.MustCompile(`API:\s+(http://\S+)`)

func startDev(t *testing.T, dataDir string) (*proc, string) {
	t.Helper()
	p := startProc(t, []string{"DATABASE_URL=", "STRIPE_API_BASE=", "STRIPE_SECRET_KEY="}, "dev", "--data-dir", dataDir,
		"--addr", "127.0.0.1:0", "--stripesim-addr", "127.0.0.1:0")
	base := p.waitFor(t, &p.stdout, devURL)
	return p, base
}

// apiClient is the client of the tests that talk to the service: every
// exchange is checked against the OpenAPI document (internal/openapitest),
// and a mismatch fails t.
func apiClient(t testing.TB) *http.Client {
	return &http.Client{Transport: openapitest.Transport(t, nil)}
}

func get(t *testing.T, url, key string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := apiClient(t).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// worldReachableDir is a temp dir the postgres OS user can reach (t.TempDir is 0700).
func worldReachableDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "payments-dev-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func postmasterPID(t *testing.T, dataDir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "postgres", "postmaster.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	require.NoError(t, err)
	return pid
}

func requireGone(t *testing.T, pid int) {
	t.Helper()
	require.Eventually(t, func() bool { return syscall.Kill(pid, 0) != nil }, 15*time.Second, 20*time.Millisecond,
		"postgres (pid %d) must not outlive payments dev", pid)
}

func TestDev_survivesSIGKILLAndLeavesNoPostgresBehind(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(worldReachableDir(t), "data")

	dev, base := startDev(t, dataDir)
	status, body := get(t, base+"/healthz", "")
	require.Equal(t, http.StatusOK, status, body)
	status, body = get(t, base+"/v1/payments", aliceKey)
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"object":"list","data":[],"has_more":false}`, body)
	status, body = get(t, base+"/v1/payments", "")
	require.Equal(t, http.StatusUnauthorized, status)
	require.Contains(t, body, `"code":"unauthorized"`)

	// Data written before the crash must be there after it.
	dbURL := (&url.URL{Scheme: "postgres", User: url.User("postgres"), Path: "/payments",
		RawQuery: url.Values{"host": {filepath.Join(dataDir, "postgres")}}.Encode()}).String()
	conn, err := pgx.Connect(context.Background(), dbURL)
	require.NoError(t, err)
	_, err = conn.Exec(context.Background(), `INSERT INTO payments (id, user_id, amount, currency, status, payment_method)
		SELECT 'pay_before_crash', id, 1234, 'eur', 'processing', 'pm_card_visa' FROM users WHERE email = 'alice@example.com'`)
	require.NoError(t, err)
	require.NoError(t, conn.Close(context.Background()))

	pg := postmasterPID(t, dataDir)
	dev.signalAndWait(t, syscall.SIGKILL)
	requireGone(t, pg)

	dev, base = startDev(t, dataDir)
	status, body = get(t, base+"/v1/payments", aliceKey)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `"id":"pay_before_crash"`)

	pg = postmasterPID(t, dataDir)
	require.Zero(t, dev.signalAndWait(t, syscall.SIGINT), "Ctrl-C is a clean exit")
	requireGone(t, pg)
	require.NoFileExists(t, filepath.Join(dataDir, "postgres", "postmaster.pid"), "a clean stop leaves no lock behind")
}

var listening = regexp.MustCompile(`"msg":"API listening","addr":"([^"]+)"`)

func TestServe_migrateUsersCreateAndMaskedSecrets(t *testing.T) {
	t.Parallel()
	// trust authentication ignores the password; it is here to be masked.
	u, err := url.Parse(dbtest.NewURL(t)) // migrated already
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), "hunter2-secret")
	env := []string{"DATABASE_URL=" + u.String(), "STRIPE_API_BASE=http://127.0.0.1:9", "STRIPE_SECRET_KEY=sk_test_not_shown_in_logs"}
	latest := strconv.Itoa(latestMigration(t))

	run := func(args ...string) (string, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(binary, args...)
		cmd.Env, cmd.Stdout, cmd.Stderr = append(os.Environ(), env...), &stdout, &stderr
		require.NoError(t, cmd.Run(), "payments %v: %s", args, stderr.String())
		return stdout.String(), stderr.String()
	}
	out, _ := run("migrate", "version")
	require.Equal(t, latest+"\n", out)
	run("migrate", "down")
	out, _ = run("migrate", "version")
	require.NotEqual(t, latest+"\n", out, "down reverts one migration")
	run("migrate", "up")
	out, _ = run("migrate", "version")
	require.Equal(t, latest+"\n", out)

	key, note := run("users", "create", "--email", "carol@example.com")
	key = strings.TrimSpace(key)
	require.Regexp(t, `^sk_[0-9a-f]{48}$`, key)
	require.Contains(t, note, "shown only this once")

	serve := startProc(t, append(env, "PAYMENTS_ADDR=127.0.0.1:0"), "serve")
	base := "http://" + serve.waitFor(t, &serve.stderr, listening)
	status, body := get(t, base+"/v1/payments", key)
	require.Equal(t, http.StatusOK, status, body)
	status, _ = get(t, base+"/readyz", "")
	require.Equal(t, http.StatusOK, status)

	require.Zero(t, serve.signalAndWait(t, syscall.SIGTERM))
	logs := serve.output(&serve.stderr)
	require.NotContains(t, logs, "hunter2-secret", "secrets are masked in logs")
	require.NotContains(t, logs, "not_shown_in_logs", "secrets are masked in logs")
	require.Contains(t, logs, "xxxxx")
	for line := range strings.Lines(logs) {
		var entry map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &entry), "every log line is JSON: %q", line)
	}
}

// Issue 29: serve writes the key filter's snapshot when it stops, and the
// next start loads it, reading only the keys made since; a corrupted one
// sends the start back to the full rebuild.
func TestServe_theKeyFilterSnapshotIsWrittenAtShutdownAndLoadedAtStart(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewURL(t)
	env := []string{"DATABASE_URL=" + dbURL, "STRIPE_API_BASE=http://127.0.0.1:9", "STRIPE_SECRET_KEY=sk_test_x", "PAYMENTS_ADDR=127.0.0.1:0"}
	ready := regexp.MustCompile(`"msg":"key filter ready".*"from":"([a-z]+)"`)
	start := func() (*proc, string) {
		p := startProc(t, env, "serve")
		return p, p.waitFor(t, &p.stderr, ready)
	}

	first, from := start()
	require.Equal(t, "rebuild", from, "no snapshot yet")
	require.Zero(t, first.signalAndWait(t, syscall.SIGTERM))
	require.Contains(t, first.output(&first.stderr), `"msg":"key filter snapshot written"`)

	second, from := start()
	require.Equal(t, "snapshot", from)
	require.Zero(t, second.signalAndWait(t, syscall.SIGTERM))

	pool := dbtestPool(t, dbURL)
	_, err := pool.Exec(context.Background(), `UPDATE keyfilter_snapshots SET bits = set_byte(bits, 100, get_byte(bits, 100) # 1)`)
	require.NoError(t, err)
	third, from := start()
	require.Equal(t, "rebuild", from, "a corrupted snapshot is not used")
	require.Contains(t, third.output(&third.stderr), "checksum mismatch")
	require.Zero(t, third.signalAndWait(t, syscall.SIGTERM))
}

func TestCommands_refuseBadUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{}, {"nonsense"}, {"serve"}, {"migrate"}, {"migrate", "sideways"}, {"users", "create"}} {
		cmd := exec.Command(binary, args...)
		cmd.Env = append(os.Environ(), "DATABASE_URL=")
		out, err := cmd.CombinedOutput()
		var exitErr *exec.ExitError
		require.ErrorAs(t, err, &exitErr, "payments %v should fail: %s", args, out)
		require.Equal(t, 2, exitErr.ExitCode(), "payments %v: %s", args, out)
		require.Contains(t, string(out), "payments: ")
	}
}

// latestMigration is the highest version among the embedded migrations.
func latestMigration(t *testing.T) int {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.up.sql")
	require.NoError(t, err)
	latest := 0
	for _, name := range names {
		v, err := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		require.NoError(t, err)
		latest = max(latest, v)
	}
	return latest
}

func dbtestPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := db.Open(context.Background(), url, db.PoolConfig{MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// Issue 20, item 11: a setting that makes no sense stops the process at
// start-up with a message naming it, before anything connects; it used to
// start, and a burst of 0 answered 429 to everything with
// Retry-After: 9223372037.
func TestCommands_refuseSettingsThatMakeNoSense(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ env, names string }{
		{"PAYMENTS_RATE_LIMIT_BURST=0", "PAYMENTS_RATE_LIMIT_BURST"},
		{"PAYMENTS_RATE_LIMIT=-1", "PAYMENTS_RATE_LIMIT"},
		{"PAYMENTS_SHUTDOWN_TIMEOUT=-1s", "PAYMENTS_SHUTDOWN_TIMEOUT"},
		{"PAYMENTS_IDEMPOTENCY_KEY_TTL=0s", "PAYMENTS_IDEMPOTENCY_KEY_TTL"},
		{"PAYMENTS_LOCK_TIMEOUT=-90s", "PAYMENTS_LOCK_TIMEOUT"},
		{"PAYMENTS_LOCK_TIMEOUT=1ms", "PAYMENTS_LOCK_TIMEOUT"},
		{"PAYMENTS_AUTH_CACHE_TTL=-1s", "PAYMENTS_AUTH_CACHE_TTL"},
		{"PAYMENTS_DB_MAX_CONNS=-4", "PAYMENTS_DB_MAX_CONNS"},
		{"PAYMENTS_DB_TX_TIMEOUT=-10s", "PAYMENTS_DB_TX_TIMEOUT"},
		{"PAYMENTS_DB_TX_TIMEOUT=0s", "PAYMENTS_DB_TX_TIMEOUT"},
		{"PAYMENTS_COMPLETER_INTERVAL=0s", "PAYMENTS_COMPLETER_INTERVAL"},
		{"PAYMENTS_COMPLETER_GRACE=-5s", "PAYMENTS_COMPLETER_GRACE"},
		{"PAYMENTS_REAPER_INTERVAL=-1m", "PAYMENTS_REAPER_INTERVAL"},
		{"PAYMENTS_ENQUEUER_POLL_INTERVAL=0s", "PAYMENTS_ENQUEUER_POLL_INTERVAL"},
		{"PAYMENTS_RECONCILE_INTERVAL=0s", "PAYMENTS_RECONCILE_INTERVAL"},
		{"PAYMENTS_RECONCILE_AFTER=-1m", "PAYMENTS_RECONCILE_AFTER"},
		{"PAYMENTS_RECONCILE_BACKOFF_CAP=0s", "PAYMENTS_RECONCILE_BACKOFF_CAP"},
		{"PAYMENTS_RECONCILE_RATE=0", "PAYMENTS_RECONCILE_RATE"},
		{"PAYMENTS_KEYFILTER_FP_RATE=1.5", "PAYMENTS_KEYFILTER_FP_RATE"},
		{"PAYMENTS_KEYFILTER_EXPECTED_KEYS=0", "PAYMENTS_KEYFILTER_EXPECTED_KEYS"},
		{"PAYMENTS_SMTP_COMMAND_TIMEOUT=-1m", "PAYMENTS_SMTP_COMMAND_TIMEOUT"},
		{"PAYMENTS_STRIPE_SPENT_KEY_GRACE=0s", "PAYMENTS_STRIPE_SPENT_KEY_GRACE"},
		{"PAYMENTS_SMTP_DATA_TIMEOUT=0s", "PAYMENTS_SMTP_DATA_TIMEOUT"},
		{"PAYMENTS_WEBHOOK_RETRY_SCHEDULE=5s,0s,1m", "PAYMENTS_WEBHOOK_RETRY_SCHEDULE"},
		{"PAYMENTS_WEBHOOK_RETRY_SCHEDULE=5s,soon", "PAYMENTS_WEBHOOK_RETRY_SCHEDULE"},
		{"PAYMENTS_WEBHOOK_RETRY_SCHEDULE=", "PAYMENTS_WEBHOOK_RETRY_SCHEDULE"},
		// A failpoint no flow fires, refused as the engine is built (issue
		// 41): a crash test armed with a typo would prove nothing.
		{"PAYMENTS_FAILPOINTS=before_commit:payment_creatd=crash",
			"PAYMENTS_FAILPOINTS: unknown failpoint: before_commit:payment_creatd (did you mean before_commit:payment_created?)"},
	} {
		for _, command := range []string{"serve", "worker"} {
			cmd := exec.Command(binary, command)
			// Nothing listens there: a process that got past validation
			// would fail later, with another message.
			cmd.Env = append(os.Environ(), "DATABASE_URL=postgres://nobody@127.0.0.1:1/none", "STRIPE_API_BASE=http://127.0.0.1:1",
				"STRIPE_SECRET_KEY=", tc.env)
			out, err := cmd.CombinedOutput()
			var exitErr *exec.ExitError
			require.ErrorAs(t, err, &exitErr, "payments %s with %s should refuse to start: %s", command, tc.env, out)
			require.Equal(t, 2, exitErr.ExitCode(), "payments %s with %s: %s", command, tc.env, out)
			require.Contains(t, string(out), tc.names, "payments %s with %s names the setting", command, tc.env)
		}
	}
}

// A build that does not declare a flow whose keys are unfinished (an older
// build after a rollback) says so as it starts, with their counts, and
// serves: the keys wait for a build that declares their flow.
func TestServe_saysAtStartWhichUnfinishedKeysItCannotFinish(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewURL(t)
	pool := dbtestPool(t, dbURL)
	_, err := pool.Exec(context.Background(), `
		INSERT INTO users (email) VALUES ('rollback@example.com');
		INSERT INTO idempotency_keys (user_id, idempotency_key, flow, request_method, request_path, request_params,
			request_fingerprint)
		SELECT u.id, 'k' || n, 'issue_gift_card', 'POST', '/v1/gift_cards', '{}', sha256('x'::bytea)
		FROM users u, generate_series(1, 3) n WHERE u.email = 'rollback@example.com'`)
	require.NoError(t, err)
	env := []string{"DATABASE_URL=" + dbURL, "STRIPE_API_BASE=http://127.0.0.1:9", "STRIPE_SECRET_KEY=sk_test_x", "PAYMENTS_ADDR=127.0.0.1:0"}
	serve := startProc(t, env, "serve")
	said := serve.waitFor(t, &serve.stderr,
		regexp.MustCompile(`"level":"ERROR","msg":"unfinished keys of flows this build does not declare[^"]*","keys_by_flow":(\{[^}]*\})`))
	require.JSONEq(t, `{"issue_gift_card":3}`, said)
	serve.waitFor(t, &serve.stderr, listening)
}

// The helpers below start the simulator and the service, and talk to them.

var simListening = regexp.MustCompile(`Stripe simulator listening on (http://\S+)`)

// startSimulator runs `payments stripesim` on a free port; it outlives the
// service's crashes, as Stripe would.
func startSimulator(t *testing.T) string {
	t.Helper()
	sim := startProc(t, nil, "stripesim", "--addr", "127.0.0.1:0")
	return sim.waitFor(t, &sim.stdout, simListening)
}

// startServe runs `payments serve` against dbURL and the simulator at simURL.
func startServe(t *testing.T, dbURL, simURL string, env ...string) (*proc, string) {
	t.Helper()
	env = append([]string{"DATABASE_URL=" + dbURL, "STRIPE_API_BASE=" + simURL, "STRIPE_SECRET_KEY=",
		"PAYMENTS_ADDR=127.0.0.1:0", "PAYMENTS_LOCK_TIMEOUT=1s", "PAYMENTS_FAILPOINTS="}, env...)
	p := startProc(t, env, "serve")
	return p, "http://" + p.waitFor(t, &p.stderr, listening)
}

// postIdempotent posts body to path with the Idempotency-Key key, as alice;
// err is set when the connection died without an answer.
func postIdempotent(t testing.TB, base, path, key, body string) (int, []byte, error) {
	req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := apiClient(t).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// createPayment posts the same create request every time.
func createPayment(t testing.TB, base, key string) (int, []byte, error) {
	return postIdempotent(t, base, "/v1/payments", key,
		`{"amount":4200,"currency":"eur","payment_method":"pm_card_visa","metadata":{"order":"crash-1"}}`)
}

// retryUntilFinal retries post like a good client: while the answer is 409
// (the dead holder's lock has not lapsed yet) or 503, wait and try again.
func retryUntilFinal(t *testing.T, post func() (int, []byte, error)) (int, []byte) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, data, err := post()
		require.NoError(t, err)
		if status != http.StatusConflict && status != http.StatusServiceUnavailable {
			return status, data
		}
		require.True(t, time.Now().Before(deadline), "still %d: %s", status, data)
		time.Sleep(100 * time.Millisecond)
	}
}

// simPaymentIntents lists the simulator's PaymentIntents made for payment id.
func simPaymentIntents(t *testing.T, simURL, paymentID string) []map[string]any {
	t.Helper()
	resp, err := http.Get(simURL + "/_sim/objects?type=payment_intent")
	require.NoError(t, err)
	defer resp.Body.Close()
	var all []map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&all))
	var mine []map[string]any
	for _, pi := range all {
		if md, ok := pi["metadata"].(map[string]any); ok && md["payment"] == paymentID {
			mine = append(mine, pi)
		}
	}
	return mine
}

func seedDemoUsers(t *testing.T, dbURL string) {
	t.Helper()
	pool := dbtestPool(t, dbURL)
	require.NoError(t, users.SeedDemoUsers(context.Background(), pool))
}
