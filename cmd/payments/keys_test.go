package main_test

// The operator's key commands (API.md section 9) through the real binary:
// a request killed between Stripe's answer and its record is found by
// `keys list`, explained by `keys show` and finished by `keys retry`, with
// the local cluster of `payments dev` started by the command itself when dev
// is down, and shared with dev when it is up.

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/dbtest"
)

// keysRun is one run of `payments keys ...`.
type keysRun struct {
	stdout, stderr string
	code           int
}

func runKeys(t *testing.T, env []string, args ...string) keysRun {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(binary, append([]string{"keys"}, args...)...)
	cmd.Env, cmd.Stdout, cmd.Stderr = append(os.Environ(), env...), &stdout, &stderr
	done := make(chan error, 1)
	require.NoError(t, cmd.Start())
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("payments keys %v did not exit", args)
	}
	r := keysRun{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
	require.NotContains(t, r.stderr, "panic", "payments keys %v", args)
	return r
}

// keyListing is one entry of `keys list --json`, as the README documents it.
type keyListing struct {
	User              string   `json:"user"`
	Key               string   `json:"key"`
	Method            string   `json:"method"`
	Path              string   `json:"path"`
	RecoveryPoint     string   `json:"recovery_point"`
	Created           string   `json:"created"`
	AgeSeconds        float64  `json:"age_seconds"`
	Attempts          int      `json:"attempts"`
	CompleterAttempts int      `json:"completer_attempts"`
	Locked            bool     `json:"locked"`
	NeedsAttention    *string  `json:"needs_attention_since"`
	LastError         *string  `json:"last_error"`
	SpentStripeSteps  []string `json:"spent_stripe_steps"`
}

// keyStory is `keys show --json`, as the README documents it.
type keyStory struct {
	keyListing
	ID      string          `json:"id"`
	Flow    string          `json:"flow"`
	Params  json.RawMessage `json:"params"`
	LastRun string          `json:"last_run"`
	Phases  []struct {
		Action       string          `json:"action"`
		ResourceType string          `json:"resource_type"`
		ResourceID   string          `json:"resource_id"`
		At           string          `json:"at"`
		Data         json.RawMessage `json:"data"`
	} `json:"phases"`
	StripeKeys []struct {
		Step       string  `json:"step"`
		Generation int     `json:"generation"`
		Key        string  `json:"key"`
		SpentSince *string `json:"spent_since"`
	} `json:"stripe_keys"`
	Response *struct {
		Status int             `json:"status"`
		Body   json.RawMessage `json:"body"`
	} `json:"response"`
	ExpiresAt *string `json:"expires_at"`
}

func TestKeys_crashedRequestIsListedExplainedAndRetried(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(worldReachableDir(t), "data")
	simURL := startSimulator(t)
	devEnv := []string{"DATABASE_URL=", "STRIPE_SECRET_KEY=", "STRIPE_API_BASE=" + simURL, "PAYMENTS_LOCK_TIMEOUT=1s"}
	startDevWith := func(failpoints string) (*proc, string) {
		p := startProc(t, append(devEnv, "PAYMENTS_FAILPOINTS="+failpoints),
			"dev", "--data-dir", dataDir, "--addr", "127.0.0.1:0")
		return p, p.waitFor(t, &p.stdout, devURL)
	}
	// The commands find the cluster by --data-dir alone, as an operator's would.
	keysEnv := []string{"DATABASE_URL=", "STRIPE_SECRET_KEY=", "STRIPE_API_BASE=" + simURL, "PAYMENTS_LOCK_TIMEOUT=1s"}
	const key = "crash-after-stripe"

	// Stripe made the PaymentIntent; the process died before recording it.
	dev, base := startDevWith("after_call:payment_intent=crash")
	pg := postmasterPID(t, dataDir)
	_, _, err := createPayment(t, base, key)
	require.Error(t, err, "the process dies before it can answer")
	<-dev.exited
	requireGone(t, pg)

	// list: the cluster is down, so the command starts it, and stops it again.
	list := runKeys(t, keysEnv, "list", "--data-dir", dataDir, "--state", "unfinished", "--json")
	require.Zero(t, list.code, list.stderr)
	var listed struct {
		Keys []keyListing `json:"keys"`
	}
	require.NoError(t, json.Unmarshal([]byte(list.stdout), &listed), list.stdout)
	require.Len(t, listed.Keys, 1, list.stdout)
	got := listed.Keys[0]
	require.Equal(t, "alice@example.com", got.User)
	require.Equal(t, key, got.Key)
	require.Equal(t, "POST", got.Method)
	require.Equal(t, "/v1/payments", got.Path)
	require.Equal(t, "payment_created", got.RecoveryPoint, "the last commit before the crash")
	require.Equal(t, 1, got.Attempts)
	require.GreaterOrEqual(t, got.AgeSeconds, 0.0)
	require.NoFileExists(t, filepath.Join(dataDir, "postgres", "postmaster.pid"), "the command stopped the cluster it started")

	human := runKeys(t, keysEnv, "list", "--data-dir", dataDir)
	require.Zero(t, human.code, human.stderr)
	for _, want := range []string{"USER", "RECOVERY POINT", "alice@example.com", key, "/v1/payments", "payment_created"} {
		require.Contains(t, human.stdout, want)
	}
	for _, state := range []string{"needs_attention", "locked"} {
		none := runKeys(t, keysEnv, "list", "--data-dir", dataDir, "--state", state, "--json")
		require.Zero(t, none.code, none.stderr)
		require.JSONEq(t, `{"keys":[]}`, none.stdout, "no key is %s", state)
	}

	// show: the request, the phases it committed, the key sent to Stripe.
	show := runKeys(t, keysEnv, "show", "--data-dir", dataDir, "--user", "alice@example.com", key, "--json")
	require.Zero(t, show.code, show.stderr)
	var story keyStory
	require.NoError(t, json.Unmarshal([]byte(show.stdout), &story), show.stdout)
	require.Equal(t, "payment_created", story.RecoveryPoint)
	require.JSONEq(t, `"pm_card_visa"`, string(mustField(t, story.Params, "payment_method")))
	require.Nil(t, story.Response, "nothing stored yet")
	require.Len(t, story.Phases, 1, show.stdout)
	require.Equal(t, "payment.created", story.Phases[0].Action)
	require.Regexp(t, `^pay_`, story.Phases[0].ResourceID)
	require.NotEmpty(t, story.Phases[0].At)
	require.Len(t, story.StripeKeys, 1)
	require.Equal(t, "payment_intent", story.StripeKeys[0].Step)
	require.Equal(t, "payments-"+story.ID+"-payment_intent", story.StripeKeys[0].Key)
	require.Contains(t, simIdempotencyKeys(t, simURL), story.StripeKeys[0].Key, "the derived key is the one Stripe saw")
	paymentID := story.Phases[0].ResourceID

	showHuman := runKeys(t, keysEnv, "show", "--data-dir", dataDir, "--user", "alice@example.com", key)
	require.Zero(t, showHuman.code, showHuman.stderr)
	for _, want := range []string{key, "payment_created", "payment.created", paymentID, story.StripeKeys[0].Key, "pm_card_visa"} {
		require.Contains(t, showHuman.stdout, want)
	}

	// retry: finished now, with the PaymentIntent Stripe made before the crash.
	var retry keysRun
	require.Eventually(t, func() bool {
		retry = runKeys(t, keysEnv, "retry", "--data-dir", dataDir, "--user", "alice@example.com", key)
		return retry.code == 0
	}, 60*time.Second, 200*time.Millisecond, "retry never succeeded: %s", retry.stderr)
	require.Contains(t, retry.stdout, "201")

	show = runKeys(t, keysEnv, "show", "--data-dir", dataDir, "--user", "alice@example.com", key, "--json")
	require.Zero(t, show.code, show.stderr)
	story = keyStory{}
	require.NoError(t, json.Unmarshal([]byte(show.stdout), &story), show.stdout)
	require.Equal(t, "finished", story.RecoveryPoint)
	require.NotNil(t, story.Response)
	require.Equal(t, http.StatusCreated, story.Response.Status)
	require.Equal(t, 2, story.Attempts, "the request, then the retry")
	actions := make([]string, 0, len(story.Phases))
	for _, p := range story.Phases {
		actions = append(actions, p.Action)
	}
	require.Equal(t, []string{"payment.created", "payment.succeeded"}, actions)

	again := runKeys(t, keysEnv, "retry", "--data-dir", dataDir, "--user", "alice@example.com", key)
	require.NotZero(t, again.code)
	require.Contains(t, again.stderr, "already finished")

	// The API replays the answer the retry stored, and Stripe charged once.
	dev, base = startDevWith("")
	pg = postmasterPID(t, dataDir)
	status, body, err := createPayment(t, base, key)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)
	require.JSONEq(t, string(story.Response.Body), string(body))
	require.Len(t, simPaymentIntents(t, simURL, paymentID), 1, "Stripe saw one PaymentIntent for the payment")

	// With dev up, the commands use its cluster and leave it running.
	list = runKeys(t, keysEnv, "list", "--data-dir", dataDir, "--json")
	require.Zero(t, list.code, list.stderr)
	require.JSONEq(t, `{"keys":[]}`, list.stdout, "nothing is unfinished any more")
	require.NoError(t, syscall.Kill(pg, 0), "dev's PostgreSQL still runs")
	status, _ = get(t, base+"/readyz", "")
	require.Equal(t, http.StatusOK, status)
	require.Zero(t, dev.signalAndWait(t, syscall.SIGINT))
	requireGone(t, pg)
}

func TestKeys_refuseBadInputWithAClearMessage(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewURL(t)
	seedDemoUsers(t, dbURL)
	env := []string{"DATABASE_URL=" + dbURL, "STRIPE_API_BASE=http://127.0.0.1:9", "STRIPE_SECRET_KEY="}
	simURL := startSimulator(t)
	_, base := startServe(t, dbURL, simURL)
	status, body, err := createPayment(t, base, "done")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(body))

	for _, c := range []struct {
		args []string
		says string
	}{
		{nil, "list, show or retry"},
		{[]string{"sideways"}, "list, show or retry"},
		{[]string{"list", "--state", "stuck"}, "--state"},
		{[]string{"list", "--limit", "0"}, "--limit"},
		{[]string{"list", "--user", "nobody@example.com"}, "no user nobody@example.com"},
		{[]string{"show", "done"}, "--user"},
		{[]string{"show", "--user", "alice@example.com"}, "KEY"},
		{[]string{"show", "--user", "alice@example.com", "a", "b"}, "one KEY"},
		{[]string{"show", "--user", "nobody@example.com", "done"}, "no user nobody@example.com"},
		{[]string{"show", "--user", "alice@example.com", "never-used"}, `no idempotency key "never-used" for alice@example.com`},
		{[]string{"show", "--user", "bob@example.com", "done"}, `no idempotency key "done" for bob@example.com`},
		{[]string{"retry", "--user", "alice@example.com", "never-used"}, `no idempotency key "never-used"`},
		{[]string{"retry", "--user", "alice@example.com", "done"}, "already finished"},
	} {
		r := runKeys(t, env, c.args...)
		require.NotZero(t, r.code, "payments keys %v: %s", c.args, r.stdout)
		require.Contains(t, r.stderr, c.says, "payments keys %v", c.args)
	}

	// A finished key is shown with its stored answer, the same bytes the API replays.
	r := runKeys(t, env, "show", "--user", "alice@example.com", "done", "--json")
	require.Zero(t, r.code, r.stderr)
	var story keyStory
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &story))
	require.Equal(t, "finished", story.RecoveryPoint)
	require.JSONEq(t, string(body), string(story.Response.Body))
	require.NotNil(t, story.ExpiresAt)
}

// mustField is one field of a JSON object.
func mustField(t *testing.T, obj json.RawMessage, name string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(obj, &m), string(obj))
	require.Contains(t, m, name)
	return m[name]
}

// simIdempotencyKeys lists the idempotency keys the simulator received.
func simIdempotencyKeys(t *testing.T, simURL string) []string {
	t.Helper()
	resp, err := http.Get(simURL + "/_sim/requests")
	require.NoError(t, err)
	defer resp.Body.Close()
	var reqs []struct {
		IdempotencyKey string `json:"idempotency_key"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&reqs))
	keys := make([]string, 0, len(reqs))
	for _, r := range reqs {
		if r.IdempotencyKey != "" {
			keys = append(keys, strings.TrimSpace(r.IdempotencyKey))
		}
	}
	return keys
}
