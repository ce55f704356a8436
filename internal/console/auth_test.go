package console_test

import (
	"crypto/tls"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"

	"github.com/example/payments/internal/api"
)

// Without a token the console is not served at all.
func TestConsole_absentWithoutAToken(t *testing.T) {
	t.Parallel()
	h, err := api.NewHandler(api.Config{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	for _, path := range []string{"/console", "/console/login", "/console/keys"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		assert.Equal(t, http.StatusNotFound, rec.Code, path)
	}
}

func TestConsole_withoutASessionGetsAreSentToSignInAndPostsAre401(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	b := e.browser()
	for _, path := range []string{"/console", "/console/keys?state=unfinished", "/console/keys/a%40b/k", "/console/payments",
		"/console/payments/pay_x", "/console/webhook_endpoints", "/console/webhook_endpoints/we_x", "/console/receipts", "/console/live"} {
		a := b.get(path)
		assert.Equal(t, http.StatusSeeOther, a.status, path)
		assert.Equal(t, "/console/login", a.header.Get("Location"), path)
	}
	for _, path := range []string{"/console/keys/a%40b/k/retry", "/console/webhook_endpoints/we_x/redeliver", "/console/logout"} {
		a := b.do(http.MethodPost, path, url.Values{"csrf": {"anything"}, "confirm": {"yes"}})
		assert.Equal(t, http.StatusUnauthorized, a.status, path)
	}
	// A merchant's API key is no credential here, neither as a bearer
	// token nor as the sign-in's token.
	req, _ := http.NewRequest(http.MethodGet, e.server.URL+"/console", nil)
	req.Header.Set("Authorization", "Bearer "+e.apiKey)
	resp, err := b.client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
	a := b.do(http.MethodPost, "/console/login", url.Values{"token": {e.apiKey}})
	assert.Equal(t, http.StatusUnauthorized, a.status)
	assert.Contains(t, a.body, `name="token"`, "the form again")
	assert.Empty(t, a.header.Values("Set-Cookie"))
	// A forged or altered cookie is no session.
	u, _ := url.Parse(e.server.URL + "/console")
	b.client.Jar.SetCookies(u, []*http.Cookie{{Name: "payments_console", Value: "AAAA.BBBB", Path: "/console"}})
	assert.Equal(t, http.StatusSeeOther, b.get("/console").status)
}

func TestConsole_signInSetsAStrictHttpOnlyCookieOnTheConsolesPath(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	b := e.browser()
	a := b.do(http.MethodPost, "/console/login", url.Values{"token": {consoleToken}})
	require.Equal(t, http.StatusSeeOther, a.status)
	assert.Equal(t, "/console", a.header.Get("Location"))
	cookies := (&http.Response{Header: a.header}).Cookies()
	require.Len(t, cookies, 1)
	c := cookies[0]
	assert.True(t, c.HttpOnly)
	assert.Equal(t, http.SameSiteStrictMode, c.SameSite)
	assert.Equal(t, "/console", c.Path)
	assert.False(t, c.Secure, "plain HTTP: a Secure cookie would never come back")
	assert.Equal(t, http.StatusOK, b.get("/console").status)

	// Tampering with one character of the signed cookie ends the session.
	u, _ := url.Parse(e.server.URL + "/console")
	v := []byte(b.client.Jar.Cookies(u)[0].Value)
	v[3] ^= 1
	b.client.Jar.SetCookies(u, []*http.Cookie{{Name: "payments_console", Value: string(v), Path: "/console"}})
	assert.Equal(t, http.StatusSeeOther, b.get("/console").status)
}

func TestConsole_cookieIsSecureOverTLS(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	srv := httptest.NewTLSServer(e.server.Config.Handler)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	client := srv.Client()
	client.Jar = jar
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	client.Transport.(*http.Transport).TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the test's own server
	resp, err := client.PostForm(srv.URL+"/console/login", url.Values{"token": {consoleToken}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Len(t, resp.Cookies(), 1)
	assert.True(t, resp.Cookies()[0].Secure)
}

func TestConsole_aPostWithoutTheSessionsCSRFValueIs403(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	other := e.browser()
	other.signIn()
	otherCSRF := other.csrf("/console")

	b := e.browser()
	b.signIn()
	own := b.csrf("/console")
	path := "/console/keys/" + url.PathEscape(e.email) + "/no-such-key/retry"
	for name, form := range map[string]url.Values{
		"none":                   {"confirm": {"yes"}},
		"empty":                  {"csrf": {""}, "confirm": {"yes"}},
		"another session's":      {"csrf": {otherCSRF}, "confirm": {"yes"}},
		"in the query, not form": nil,
	} {
		p := path
		if form == nil {
			p += "?csrf=" + url.QueryEscape(own)
			form = url.Values{"confirm": {"yes"}}
		}
		a := b.do(http.MethodPost, p, form)
		assert.Equal(t, http.StatusForbidden, a.status, name)
	}
	// With it, the request goes through (to a key that does not exist).
	a := b.do(http.MethodPost, path, url.Values{"csrf": {own}, "confirm": {"yes"}})
	assert.Equal(t, http.StatusNotFound, a.status, a.body)
	// Signing out takes the CSRF value too, and ends the session.
	assert.Equal(t, http.StatusForbidden, b.do(http.MethodPost, "/console/logout", url.Values{}).status)
	assert.Equal(t, http.StatusSeeOther, b.do(http.MethodPost, "/console/logout", url.Values{"csrf": {own}}).status)
	assert.Equal(t, http.StatusSeeOther, b.get("/console").status)
}

// assertNoInlineScript parses body as a browser would and fails on a
// script element without src or with content, an event handler or style
// attribute, and a javascript: URL in an attribute: what a hostile value
// would need to run, and what the policy blocks anyway.
func assertNoInlineScript(t *testing.T, body, name string) {
	t.Helper()
	z := html.NewTokenizer(strings.NewReader(body))
	inScript := false
	for {
		switch z.Next() {
		case html.ErrorToken:
			return
		case html.StartTagToken, html.SelfClosingTagToken:
			tok := z.Token()
			if tok.Data == "script" {
				inScript = true
				src := ""
				for _, a := range tok.Attr {
					if a.Key == "src" {
						src = a.Val
					}
				}
				assert.True(t, strings.HasPrefix(src, "/console/assets/"), "%s: a script not from the console's assets: %s", name, tok)
			}
			for _, a := range tok.Attr {
				assert.False(t, strings.HasPrefix(a.Key, "on"), "%s: an event handler: %s", name, tok)
				assert.NotEqual(t, "style", a.Key, "%s: a style attribute: %s", name, tok)
				assert.False(t, strings.HasPrefix(strings.ToLower(strings.TrimSpace(a.Val)), "javascript:"), "%s: a javascript: URL: %s", name, tok)
			}
		case html.EndTagToken:
			if z.Token().Data == "script" {
				inScript = false
			}
		case html.TextToken:
			if inScript {
				assert.Empty(t, strings.TrimSpace(string(z.Text())), "%s: a script with inline code", name)
			}
		}
	}
}

// Every answer, signed in or not, found or not, carries the strict
// headers, and no page has inline script, an event handler or a style
// attribute, which the policy would block anyway.
func TestConsole_everyPageHasAStrictCSPAndNoInlineScript(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	anon := e.browser()
	b := e.browser()
	b.signIn()
	check := func(name string, a answer) {
		t.Helper()
		csp := a.header.Get("Content-Security-Policy")
		assert.Contains(t, csp, "script-src 'self'", name)
		assert.Contains(t, csp, "default-src 'self'", name)
		assert.Contains(t, csp, "frame-ancestors 'none'", name)
		assert.NotContains(t, csp, "unsafe-inline", name)
		assert.NotContains(t, csp, "unsafe-eval", name)
		assert.Equal(t, "nosniff", a.header.Get("X-Content-Type-Options"), name)
		assert.NotEmpty(t, a.header.Get("Referrer-Policy"), name)
		if strings.HasPrefix(a.header.Get("Content-Type"), "text/html") {
			assertNoInlineScript(t, a.body, name)
		}
	}
	check("sign-in", anon.get("/console/login"))
	check("303", anon.get("/console"))
	check("401", anon.do(http.MethodPost, "/console/logout", url.Values{}))
	check("wrong token", anon.do(http.MethodPost, "/console/login", url.Values{"token": {"nope"}}))
	for asset, kind := range map[string]string{"console.js": "text/javascript", "console.css": "text/css"} {
		a := anon.get("/console/assets/" + asset)
		assert.Equal(t, http.StatusOK, a.status, asset)
		assert.Contains(t, a.header.Get("Content-Type"), kind, asset)
		check(asset, a)
	}
	for _, path := range []string{"/console", "/console/live", "/console/keys", "/console/payments", "/console/webhook_endpoints",
		"/console/receipts", "/console/nothing-here", "/console/payments/pay_missing"} {
		check(path, b.get(path))
	}
	check("403", b.do(http.MethodPost, "/console/logout", url.Values{}))
	require.Regexp(t, `<script src="/console/assets/console.js" defer></script>`, b.get("/console").body, "the one script, by address")
}

// Failed sign-ins are charged to the API's limiter of failed
// authentications: past its burst, the address is refused without the
// token being compared. The guesses are sent at once, many more than the
// burst, so that the refill during the test cannot cover them.
func TestConsole_failedSignInsAreLimited(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	b := e.browser()
	const guesses = 200
	answers := make(chan answer, guesses)
	var wg sync.WaitGroup
	for range guesses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers <- b.do(http.MethodPost, "/console/login", url.Values{"token": {"guess"}})
		}()
	}
	wg.Wait()
	close(answers)
	limited := 0
	for a := range answers {
		if a.status == http.StatusTooManyRequests {
			limited++
			assert.NotEmpty(t, a.header.Get("Retry-After"))
			assert.Contains(t, a.body, "Too many failed sign-ins")
		} else {
			assert.Equal(t, http.StatusUnauthorized, a.status)
		}
	}
	assert.Greater(t, limited, 0, "no guess was limited")
	assert.LessOrEqual(t, guesses-limited, guesses/2, "most guesses were compared")
}

// Behind a proxy that ends TLS, the console hears plain HTTP; the proxy's
// X-Forwarded-Proto (or RFC 7239 Forwarded) says the browser used HTTPS,
// and the cookie is Secure. Trusting the header from anyone is safe: it can
// only make the cookie stricter.
func TestConsole_cookieIsSecureBehindAProxyThatEndsTLS(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	for name, header := range map[string][2]string{
		"X-Forwarded-Proto": {"X-Forwarded-Proto", "https"},
		"Forwarded":         {"Forwarded", `for=192.0.2.60;proto=https;by=203.0.113.43`},
	} {
		req, err := http.NewRequest(http.MethodPost, e.server.URL+"/console/login", strings.NewReader(url.Values{"token": {consoleToken}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set(header[0], header[1])
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, name)
		require.Len(t, resp.Cookies(), 1, name)
		assert.True(t, resp.Cookies()[0].Secure, name)
	}
}
