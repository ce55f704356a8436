package console_test

import (
	"cmp"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/api"
	"github.com/example/payments/internal/app"
	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/failpoint"
	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/stripesim"
	"github.com/example/payments/internal/users"
	"github.com/example/payments/internal/worker"
)

func TestMain(m *testing.M) {
	code := dbtest.Main(m)
	stopChrome()
	os.Exit(code)
}

const consoleToken = "console_test_token_0123456789"

// env is the service as `payments serve` runs it, with the console on: the
// API and the console on one server, Stripe's simulator over HTTP, and,
// when asked, the worker (completer, webhook deliveries). With failpoints,
// a second instance on the same database serves the API with them
// (crashURL): the request that fails there is left for this one.
type env struct {
	t      *testing.T
	app    *app.App
	server *httptest.Server
	// crashURL is the instance with the failpoints ("" without).
	crashURL string
	apiKey   string
	email    string
	// hooks counts the webhook deliveries a merchant's endpoint received.
	hooks    *httptest.Server
	received atomic.Int64
}

type envConfig struct {
	failpoints string
	worker     bool
	// completerGrace is how long the completer leaves a key alone: 1s
	// unless set.
	completerGrace time.Duration
}

func newEnv(t *testing.T, c envConfig) *env {
	t.Helper()
	ctx := context.Background()
	sim := stripesim.New(stripesim.Config{})
	simServer := httptest.NewServer(sim.Handler())
	t.Cleanup(func() { simServer.Close(); sim.Close() })
	stripe, err := stripeclient.New(stripeclient.Config{SecretKey: "sk_test_console", APIBase: simServer.URL})
	require.NoError(t, err)
	dbURL := dbtest.NewURL(t)
	a, err := app.New(ctx, app.Config{DatabaseURL: dbURL, Pool: db.PoolConfig{MaxConns: 6}, KeyTTL: time.Hour,
		Stripe: stripe, ConsoleToken: consoleToken})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	require.NoError(t, users.SeedDemoUsers(ctx, a.Pool))
	e := &env{t: t, app: a, apiKey: users.DemoUsers[0].APIKey, email: users.DemoUsers[0].Email}
	handler, err := a.APIHandler(api.RateLimit{}, 0)
	require.NoError(t, err)
	e.server = httptest.NewServer(handler)
	t.Cleanup(e.server.Close)
	if c.failpoints != "" {
		fp, err := failpoint.Parse(c.failpoints)
		require.NoError(t, err)
		crashing, err := app.New(ctx, app.Config{DatabaseURL: dbURL, Pool: db.PoolConfig{MaxConns: 4}, KeyTTL: time.Hour,
			Stripe: stripe, Failpoints: fp})
		require.NoError(t, err)
		t.Cleanup(crashing.Close)
		crashingHandler, err := crashing.APIHandler(api.RateLimit{}, 0)
		require.NoError(t, err)
		srv := httptest.NewServer(crashingHandler)
		t.Cleanup(srv.Close)
		e.crashURL = srv.URL
	}
	e.hooks = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.received.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(e.hooks.Close)
	if c.worker {
		e.startWorker(cmp.Or(c.completerGrace, time.Second))
	}
	return e
}

// startWorker runs the background work, the completer taking a key one
// second after it was last touched.
func (e *env) startWorker(grace time.Duration) {
	t, w := e.t, e.app
	ctx := context.Background()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- worker.Run(runCtx, worker.Config{
			Pool: w.Pool, Logger: w.Log, Registry: w.Registry, Engine: w.Engine,
			Payments:             w.Payments,
			EnqueuerPollInterval: 50 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
			CompleterInterval: 250 * time.Millisecond, CompleterGrace: grace,
			WebhookRetrySchedule: []time.Duration{time.Hour}, WebhookClient: &http.Client{Timeout: 5 * time.Second},
		})
	}()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Error("the worker did not stop")
		}
	})
}

// apiPost sends a POST to the JSON API as the demo merchant.
func (e *env) apiPost(path, key, body string) (int, string) {
	e.t.Helper()
	return e.apiPostTo(e.server.URL, path, key, body)
}

// apiPostTo sends it to the instance at base.
func (e *env) apiPostTo(base, path, key, body string) (int, string) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	require.NoError(e.t, err)
	req.Header.Set("Authorization", "Bearer "+e.apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// browser is an HTTP client with a cookie jar that does not follow
// redirects, so that each answer can be looked at.
type browser struct {
	t      *testing.T
	base   string
	client *http.Client
}

func (e *env) browser() *browser {
	jar, err := cookiejar.New(nil)
	require.NoError(e.t, err)
	return &browser{t: e.t, base: e.server.URL, client: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

type answer struct {
	status int
	header http.Header
	body   string
}

func (b *browser) do(method, path string, form url.Values) answer {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	require.NoError(b.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := b.client.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	return answer{status: resp.StatusCode, header: resp.Header, body: string(raw)}
}

func (b *browser) get(path string) answer { return b.do(http.MethodGet, path, nil) }

// signIn signs in with the console's token.
func (b *browser) signIn() {
	b.t.Helper()
	a := b.do(http.MethodPost, "/console/login", url.Values{"token": {consoleToken}})
	require.Equal(b.t, http.StatusSeeOther, a.status, a.body)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the CSRF value of the forms of the page at path.
func (b *browser) csrf(path string) string {
	b.t.Helper()
	a := b.get(path)
	require.Equal(b.t, http.StatusOK, a.status)
	m := csrfField.FindStringSubmatch(a.body)
	require.NotNil(b.t, m, "a form with a csrf value on %s", path)
	return m[1]
}
