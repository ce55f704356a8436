package safehttp

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// countingServer is a loopback server that counts the requests it receives:
// a refused dial must leave it at zero.
func countingServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func TestClient_refusesLoopbackUnlessAllowed(t *testing.T) {
	t.Parallel()
	srv, hits := countingServer(t)

	_, err := NewClient(Config{}).Get(srv.URL)
	require.ErrorIs(t, err, ErrNonPublicAddress)
	require.Contains(t, err.Error(), "loopback", "the error says what kind of address was refused")
	require.Zero(t, hits.Load(), "nothing reached the server")

	resp, err := NewClient(Config{AllowPrivate: true}).Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.EqualValues(t, 1, hits.Load())
}

// The Control hook gets "ip:port" as the dialer formats it; IPv6 addresses
// come bracketed, link-local ones with a zone. An address it cannot parse is
// refused: the check fails closed.
func TestRefuseNonPublic_parsesWhatTheDialerPasses(t *testing.T) {
	t.Parallel()
	for address, wantRefused := range map[string]bool{
		"[::1]:443":                  true,
		"[fe80::1%eth0]:443":         true,
		"[::ffff:10.0.0.1]:80":       true,
		"127.0.0.1:80":               true,
		"not-an-address:80":          true,
		"[2606:4700:4700::1111]:443": false,
		"93.184.215.14:443":          false,
	} {
		err := refuseNonPublic("tcp", address, nil)
		if wantRefused {
			require.ErrorIs(t, err, ErrNonPublicAddress, address)
		} else {
			require.NoError(t, err, address)
		}
	}
}

// DNS rebinding: a name that resolved to a public address when the endpoint
// was created answers 127.0.0.1 when the delivery connects. The check is in
// the dialer's Control hook, which sees the address actually dialled, so the
// connection is refused all the same.
func TestClient_refusesARebindingNameAtConnectTime(t *testing.T) {
	t.Parallel()
	srv, hits := countingServer(t)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	require.NoError(t, err)
	dns := newFakeDNS(map[string][]string{"hooks.rebind.test": {"93.184.215.14"}})
	hookURL := "http://hooks.rebind.test:" + port + "/hooks"

	require.NoError(t, CheckURL(t.Context(), hookURL, Config{Resolver: dns.resolver(t)}), "at creation the name is public")

	dns.set(map[string][]string{"hooks.rebind.test": {"127.0.0.1"}})
	_, err = NewClient(Config{Resolver: dns.resolver(t)}).Get(hookURL)
	require.ErrorIs(t, err, ErrNonPublicAddress)
	require.Zero(t, hits.Load())
	// The error, for the log, says what kind of address was refused, not
	// which; the delivery's last_error (Describe) says neither, as for a
	// name that does not resolve (docs/API.md section 7).
	require.Contains(t, err.Error(), "loopback")
	require.NotContains(t, err.Error(), "127.0.0.1")
	require.Equal(t, "no connection: the endpoint's host "+HostRefused, Describe(err, hookURL))

	// The same name and resolver with private addresses allowed reach the
	// server: the refusal above was the address check, not a failed lookup.
	resp, err := NewClient(Config{AllowPrivate: true, Resolver: dns.resolver(t)}).Get(hookURL)
	require.NoError(t, err)
	resp.Body.Close()
	require.EqualValues(t, 1, hits.Load())
}

// A name with one public and one private address must not get through on
// the public one and then be retried, or happy-eyeballed, onto the other.
func TestClient_refusesEveryPrivateAddressOfAName(t *testing.T) {
	t.Parallel()
	srv, hits := countingServer(t)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	require.NoError(t, err)
	// 192.0.2.1 is documentation space: refused too, so no address is
	// left to try and nothing is sent anywhere.
	dns := newFakeDNS(map[string][]string{"mixed.rebind.test": {"192.0.2.1", "127.0.0.1"}})

	_, err = NewClient(Config{Resolver: dns.resolver(t)}).Get("http://mixed.rebind.test:" + port + "/")
	require.ErrorIs(t, err, ErrNonPublicAddress)
	require.Zero(t, hits.Load())
}

func TestClient_doesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	var followed atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/elsewhere" {
			followed.Store(true)
			return
		}
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(srv.Close)

	req, err := http.NewRequest(http.MethodPost, srv.URL+"/hooks", strings.NewReader(`{}`))
	require.NoError(t, err)
	resp, err := NewClient(Config{AllowPrivate: true}).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusTemporaryRedirect, resp.StatusCode, "a redirect is the answer, not an instruction")
	require.False(t, followed.Load())
}

func TestClient_sendsItsUserAgent(t *testing.T) {
	t.Parallel()
	agents := make(chan string, 3)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { agents <- r.UserAgent() }))
	t.Cleanup(srv.Close)

	get := func(c *http.Client, callerAgent string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		if callerAgent != "" {
			req.Header.Set("User-Agent", callerAgent)
		}
		resp, err := c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, callerAgent, req.Header.Get("User-Agent"), "the caller's request is not modified")
	}
	get(NewClient(Config{AllowPrivate: true}), "")
	require.Equal(t, DefaultUserAgent, <-agents)
	get(NewClient(Config{AllowPrivate: true, UserAgent: "acme-hooks/2"}), "")
	require.Equal(t, "acme-hooks/2", <-agents)
	get(NewClient(Config{AllowPrivate: true}), "curl/8")
	require.Equal(t, DefaultUserAgent, <-agents, "every delivery says who sends it")
}

func TestClient_timesOut(t *testing.T) {
	t.Parallel()
	hung := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // hang until the client gives up (or the test ends)
		case <-r.Context().Done():
		case <-hung:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(hung) })

	start := time.Now()
	_, err := NewClient(Config{AllowPrivate: true, Timeout: 200 * time.Millisecond}).Get(srv.URL)
	var netErr net.Error
	require.ErrorAs(t, err, &netErr)
	require.True(t, netErr.Timeout(), "%v", err)
	require.Less(t, time.Since(start), 5*time.Second)

	require.Equal(t, DefaultTimeout, NewClient(Config{}).Timeout)
}

func TestClient_ignoresProxiesFromTheEnvironment(t *testing.T) {
	t.Parallel()
	// HTTP_PROXY is read once per process by net/http, so the transport is
	// inspected instead: a proxy would be a way around the dialer's check
	// (the proxy connects, not us).
	ua, ok := NewClient(Config{}).Transport.(*userAgentTransport)
	require.True(t, ok)
	tr, ok := ua.next.(*http.Transport)
	require.True(t, ok)
	require.Nil(t, tr.Proxy)
}

func TestReadLimited(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 1<<20)
	require.Len(t, ReadLimited(strings.NewReader(big), MaxResponseBytes), MaxResponseBytes)
	require.Equal(t, []byte("short"), ReadLimited(strings.NewReader("short"), MaxResponseBytes))
	failing := io.MultiReader(strings.NewReader("partial"), iotestErrReader{})
	require.Equal(t, []byte("partial"), ReadLimited(failing, MaxResponseBytes), "what was read before an error is kept")
}

type iotestErrReader struct{}

func (iotestErrReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

func TestCheckURL(t *testing.T) {
	t.Parallel()
	dns := newFakeDNS(map[string][]string{
		"public.test":   {"93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"},
		"private.test":  {"10.0.0.7"},
		"mixed.test":    {"93.184.215.14", "127.0.0.1"},
		"metadata.test": {"169.254.169.254"},
		"v6local.test":  {"::1"},
	})
	for _, tc := range []struct {
		url          string
		allowPrivate bool
		wantErr      string // "" for accepted
	}{
		{url: "https://public.test/hooks"},
		{url: "http://public.test:8080/hooks?x=1"},
		{url: "https://93.184.215.14/hooks"},
		{url: "https://[2606:4700:4700::1111]/hooks"},
		{url: "", wantErr: "absolute http or https"},
		{url: "public.test/hooks", wantErr: "absolute http or https"},
		{url: "/hooks", wantErr: "absolute http or https"},
		{url: "ftp://public.test/hooks", wantErr: "absolute http or https"},
		{url: "javascript:alert(1)", wantErr: "absolute http or https"},
		{url: "https:///hooks", wantErr: "host"},
		{url: "http://:8080/hooks", wantErr: "host"},
		{url: "https://user:pass@public.test/hooks", wantErr: "user information"},
		{url: "https://user@public.test/hooks", wantErr: "user information"},
		{url: "https://public.test/" + strings.Repeat("a", 2048), wantErr: "2048"},
		{url: "http://127.0.0.1/hooks", wantErr: "loopback"},
		{url: "http://[::1]:8080/hooks", wantErr: "loopback"},
		{url: "http://[::ffff:127.0.0.1]/hooks", wantErr: "loopback"},
		{url: "http://10.1.2.3/hooks", wantErr: "private"},
		{url: "http://0.0.0.0:8080/", wantErr: "unspecified"},
		{url: "http://169.254.169.254/latest/meta-data/", wantErr: "link-local"},
		{url: "https://private.test/hooks", wantErr: `"private.test" ` + HostRefused},
		{url: "https://mixed.test/hooks", wantErr: `"mixed.test" ` + HostRefused},
		{url: "https://metadata.test/hooks", wantErr: `"metadata.test" ` + HostRefused},
		{url: "https://v6local.test/hooks", wantErr: `"v6local.test" ` + HostRefused},
		{url: "https://nowhere.test/hooks", wantErr: `"nowhere.test" ` + HostRefused},
		// Allowed private addresses need no lookup at all.
		{url: "http://127.0.0.1:8080/hooks", allowPrivate: true},
		{url: "https://private.test/hooks", allowPrivate: true},
		{url: "https://nowhere.test/hooks", allowPrivate: true},
		{url: "ftp://127.0.0.1/", allowPrivate: true, wantErr: "absolute http or https"},
		{url: "https://u:p@127.0.0.1/", allowPrivate: true, wantErr: "user information"},
	} {
		err := CheckURL(t.Context(), tc.url, Config{AllowPrivate: tc.allowPrivate, Resolver: dns.resolver(t)})
		if tc.wantErr == "" {
			require.NoError(t, err, "%q", tc.url)
			continue
		}
		require.ErrorIs(t, err, ErrInvalidURL, "%q", tc.url)
		require.Contains(t, err.Error(), tc.wantErr, "%q", tc.url)
	}
}

// The exported CheckURL asks the system's resolver: localhost is in every
// hosts file, so this needs no network.
func TestCheckURL_localhostIsRefused(t *testing.T) {
	t.Parallel()
	err := CheckURL(context.Background(), "http://localhost:8080/hooks", Config{})
	require.ErrorIs(t, err, ErrInvalidURL)
	require.Contains(t, err.Error(), `"localhost" `+HostRefused)
	require.NoError(t, CheckURL(context.Background(), "http://localhost:8080/hooks", Config{AllowPrivate: true}))
}

func TestCheckURL_errorIsFitForAProblemDetail(t *testing.T) {
	t.Parallel()
	long := "https://x.test/" + strings.Repeat("a", 3000)
	err := CheckURL(t.Context(), long, Config{Resolver: newFakeDNS(nil).resolver(t)})
	require.Less(t, len(err.Error()), 200, "the detail does not echo a long URL back")
	_, parseErr := url.Parse("http://[::1")
	require.Error(t, parseErr)
	err = CheckURL(t.Context(), "http://[::1", Config{Resolver: newFakeDNS(nil).resolver(t)})
	require.ErrorIs(t, err, ErrInvalidURL)
}

// The webhook dispatcher has up to merchanthooks.DefaultPerEndpoint
// attempts in flight to one endpoint: the client keeps as many idle
// connections to a host, so that the next round of attempts reuses them
// instead of dialling (and, for https, handshaking) again.
func TestClient_keepsAsManyIdleConnectionsPerHostAsAnEndpointHasAttempts(t *testing.T) {
	t.Parallel()
	const perEndpoint = 10 // merchanthooks.DefaultPerEndpoint
	var dialled atomic.Int64
	var release atomic.Pointer[chan struct{}]
	var inside atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gate := *release.Load()
		inside.Add(1)
		<-gate
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialled.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	client := NewClient(Config{AllowPrivate: true})

	round := func() {
		inside.Store(0)
		gate := make(chan struct{})
		release.Store(&gate)
		done := make(chan error, perEndpoint)
		for range perEndpoint {
			go func() {
				resp, err := client.Post(srv.URL, "application/json", strings.NewReader("{}"))
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				done <- err
			}()
		}
		// All in flight at once, as the dispatcher's attempts are.
		require.Eventually(t, func() bool { return inside.Load() == perEndpoint }, 5*time.Second, time.Millisecond)
		close(gate)
		for range perEndpoint {
			require.NoError(t, <-done)
		}
	}
	round()
	require.EqualValues(t, perEndpoint, dialled.Load())
	round()
	require.EqualValues(t, perEndpoint, dialled.Load(), "the second round reused the first's connections")
}
