package console_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/console"
	"github.com/example/payments/internal/keyadmin"
	"github.com/example/payments/internal/recovery"
)

// Issue 42, item 7: a console cookie kept working after sign-out for up to
// 12 hours (the session was the signed cookie alone). Sessions are now
// kept on the server: signing out ends the session for the cookie wherever
// it is (kept by the browser, copied elsewhere), on every instance that
// shares the database.
func TestConsole_signOutEndsTheSessionOnTheServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	// A second instance on the same database, as a second `payments serve`.
	other, err := console.New(console.Config{Token: consoleToken, Pool: e.app.Pool,
		Keys: keyadmin.New(e.app.Pool, e.app.Engine.Flows(), recovery.NewCompleter(recovery.CompleterConfig{Engine: e.app.Engine}))})
	require.NoError(t, err)
	otherServer := httptest.NewServer(other)
	t.Cleanup(otherServer.Close)

	b := e.browser()
	b.signIn()
	csrf := b.csrf("/console")
	u, _ := url.Parse(e.server.URL + "/console")
	cookie := b.client.Jar.Cookies(u)[0].Value

	// A copy of the cookie, in another client, and on the other instance.
	copied := e.browser()
	copied.client.Jar.SetCookies(u, []*http.Cookie{{Name: "payments_console", Value: cookie, Path: "/console"}})
	onOther := e.browser()
	onOther.base = otherServer.URL
	otherURL, _ := url.Parse(otherServer.URL + "/console")
	onOther.client.Jar.SetCookies(otherURL, []*http.Cookie{{Name: "payments_console", Value: cookie, Path: "/console"}})
	require.Equal(t, http.StatusOK, copied.get("/console").status, "the session is the cookie's")
	require.Equal(t, http.StatusOK, onOther.get("/console").status, "on every instance")

	out := b.do(http.MethodPost, "/console/logout", url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, out.status)
	assert.Equal(t, "/console/login", out.header.Get("Location"))

	for name, c := range map[string]*browser{"this browser": b, "a copy of the cookie": copied, "the other instance": onOther} {
		a := c.get("/console")
		assert.Equal(t, http.StatusSeeOther, a.status, name)
		assert.Equal(t, "/console/login", a.header.Get("Location"), name)
	}
	// The copied cookie, with the session's CSRF value, cannot act either.
	a := copied.do(http.MethodPost, "/console/keys/x/y/retry", url.Values{"csrf": {csrf}, "confirm": {"yes"}})
	assert.Equal(t, http.StatusUnauthorized, a.status)

	// Signing in again is a new session; the old cookie stays refused.
	b.signIn()
	assert.Equal(t, http.StatusOK, b.get("/console").status)
	assert.Equal(t, http.StatusSeeOther, copied.get("/console").status)
}

// Issue 42, item 7: /console/assets/ listed its directory, without a
// session. A directory is 404 now, with a session or without; the files
// are served as before.
func TestConsole_assetsAreServedButNotListed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	anonymous := e.browser()
	signedIn := e.browser()
	signedIn.signIn()
	for name, b := range map[string]*browser{"without a session": anonymous, "with one": signedIn} {
		for _, path := range []string{"/console/assets/", "/console/assets", "/console/assets/./", "/console/assets/%2e/", "/console/assets/nothing.css"} {
			a := b.get(path)
			assert.Equal(t, http.StatusNotFound, a.status, "%s %s: %s", name, path, a.body)
			// http.FileServer's listing: <pre> of <a href="console.css">.
			assert.NotContains(t, a.body, `href="console.css"`, "%s %s lists nothing", name, path)
			assert.NotContains(t, a.body, `href="console.js"`, "%s %s lists nothing", name, path)
			assert.NotContains(t, a.body, "<pre>", "%s %s lists nothing", name, path)
		}
		for _, path := range []string{"/console/assets/console.css", "/console/assets/console.js"} {
			assert.Equal(t, http.StatusOK, b.get(path).status, "%s %s", name, path)
		}
	}
}
