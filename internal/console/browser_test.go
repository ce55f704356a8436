package console_test

import (
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// The browser tests drive Debian's chromium, headless, through chromedp:
// one browser for the package, a fresh browser context (its own cookies)
// for each test. In CI (CI=true) a missing chromium fails them;
// scripts/install-deps.sh (make deps, make test) installs it.

var screenshots = flag.Bool("screenshots", false, "write the console's screenshots into docs/console")

var chrome struct {
	once   sync.Once
	ctx    context.Context
	cancel func()
	err    error
}

func startChrome() {
	path, err := exec.LookPath("chromium")
	if err != nil {
		chrome.err = err
		return
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.DisableGPU,
		chromedp.WindowSize(1280, 860))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // chromium refuses to run as root with its sandbox
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	if err := chromedp.Do(bctx); err != nil { // starts the browser
		bcancel()
		acancel()
		chrome.err = err
		return
	}
	chrome.ctx, chrome.cancel = bctx, func() { bcancel(); acancel() }
}

func stopChrome() {
	if chrome.cancel != nil {
		chrome.cancel()
	}
}

// tab is a new tab in a browser context of its own.
func tab(t *testing.T) context.Context {
	t.Helper()
	chrome.once.Do(startChrome)
	if chrome.err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the console's browser tests need chromium (scripts/install-deps.sh installs it): %v", chrome.err)
		}
		t.Skipf("chromium is missing (%v): run scripts/install-deps.sh (make deps) to run the browser tests", chrome.err)
	}
	ctx, cancel := chromedp.NewContext(chrome.ctx, chromedp.WithNewBrowserContext())
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancel() })
	return ctx
}

func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx, steps...))
}

func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(t, err, expr)
	return v
}

// waitFor evaluates expr (from DevTools: the page's policy allows no eval)
// until it is true.
func waitFor(t *testing.T, ctx context.Context, within time.Duration, expr string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`"hidden=" + document.hidden + " res=" + performance.getEntriesByType("resource").map(e => e.name + ":" + e.responseStatus).join(",") + " stale=" + (document.querySelector("[data-live]") || {getAttribute(){}}).getAttribute("data-stale") + "\n" + (document.body ? document.body.innerText : "")`))
			t.Fatalf("after %v, still not %s (err %v); the page says:\n%s", within, expr, err, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func text(t *testing.T, ctx context.Context, selector string) string {
	t.Helper()
	return eval[string](t, ctx, `(document.querySelector(`+strconv.Quote(selector)+`) || {textContent: ""}).textContent.trim()`)
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if !*screenshots {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG (less is JPEG)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll("../../docs/console", 0o755))
	require.NoError(t, os.WriteFile(filepath.Join("../../docs/console", name+".png"), png, 0o644))
}

// ready waits until the page has loaded and selector is in it.
func ready(t *testing.T, ctx context.Context, selector string) {
	t.Helper()
	waitFor(t, ctx, 20*time.Second, `document.readyState === "complete" && !!document.querySelector(`+strconv.Quote(selector)+`)`)
}

// click clicks the element once the page has loaded: a DOM click, which
// follows a link or submits a form as a person's does.
func click(t *testing.T, ctx context.Context, selector string) {
	t.Helper()
	ready(t, ctx, selector)
	eval[bool](t, ctx, `document.querySelector(`+strconv.Quote(selector)+`).click(), true`)
}

func signInWithBrowser(t *testing.T, ctx context.Context, base, token string) {
	t.Helper()
	do(t, ctx, chromedp.Navigate(base+"/console"))
	ready(t, ctx, "#token")
	require.Equal(t, base+"/console/login", eval[string](t, ctx, "location.href"), "sent to the sign-in")
	do(t, ctx, chromedp.SendKeys(chromedp.ID("token"), token))
	click(t, ctx, `form button[type="submit"]`)
}

// The operator's tour: sign in, see a crashed request appear as unfinished
// and the completer finish it without a reload, re-drive a key that needs
// attention, redeliver an event.
func TestBrowser_operatorsTour(t *testing.T) {
	t.Parallel()
	ctx := tab(t)
	e := newEnv(t, envConfig{failpoints: "after_stripe:payment_intent=error", worker: true, completerGrace: 4 * time.Second})
	base := e.server.URL

	signInWithBrowser(t, ctx, base, consoleToken)
	waitFor(t, ctx, 10*time.Second, `location.pathname === "/console" && !!document.querySelector("#total-unfinished")`)
	require.Equal(t, "0", text(t, ctx, "#total-unfinished"))
	// A mark that a reload would wipe.
	eval[bool](t, ctx, `window.notReloaded = true`)

	// A request fails after Stripe answered, on the instance with the
	// failpoint: the open page shows it unfinished, by itself.
	status, body := e.apiPostTo(e.crashURL, "/v1/payments", "crashed-in-browser", paymentBody)
	require.GreaterOrEqual(t, status, 500, body)
	waitFor(t, ctx, 10*time.Second, `document.querySelector("#total-unfinished").textContent === "1"`)
	require.Contains(t, text(t, ctx, "#live"), "crashed-in-browser")
	screenshot(t, ctx, "dashboard")
	// The completer finishes it; the page follows, still without a reload.
	waitFor(t, ctx, 20*time.Second, `document.querySelector("#total-unfinished").textContent === "0" && document.querySelector("#total-finished").textContent === "1"`)
	require.True(t, eval[bool](t, ctx, `window.notReloaded === true`), "the page was not reloaded")

	// Another request fails, and is given up on (the completer's mark
	// past Stripe's 24-hour window, set here directly).
	status, body = e.apiPostTo(e.crashURL, "/v1/payments", "needs-a-person", paymentBody)
	require.GreaterOrEqual(t, status, 500, body)
	_, err := e.app.Pool.Exec(context.Background(), `UPDATE idempotency_keys SET needs_attention_at = now() WHERE idempotency_key = 'needs-a-person'`)
	require.NoError(t, err)
	do(t, ctx, chromedp.Navigate(base+"/console/keys?state=needs_attention"))
	ready(t, ctx, "a.key")
	screenshot(t, ctx, "keys")
	click(t, ctx, "a.key")
	ready(t, ctx, "dl.facts")
	require.Contains(t, text(t, ctx, "main"), "Needs attention since")
	screenshot(t, ctx, "story")
	click(t, ctx, `main form button[type="submit"]`)
	click(t, ctx, "#confirm-retry")
	waitFor(t, ctx, 20*time.Second, `document.querySelector("main").textContent.includes("It is finished")`)
	point, needs := e.keyState("needs-a-person")
	require.Equal(t, "finished", point)
	require.False(t, needs)

	// An endpoint gets a payment's event; the operator redelivers it.
	status, body = e.apiPost("/v1/webhook_endpoints", "endpoint-b", `{"url":"`+e.hooks.URL+`/hook","enabled_events":["payment.succeeded"],"description":"the shop's endpoint"}`)
	require.Equal(t, http.StatusCreated, status, body)
	var ep struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(body), &ep))
	status, body = e.apiPost("/v1/payments", "paid-b", paymentBody)
	require.Equal(t, http.StatusCreated, status, body)
	var pay struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(body), &pay))
	eventually(t, 20*time.Second, "the first delivery", func() bool { return e.received.Load() == 1 })
	do(t, ctx, chromedp.Navigate(base+"/console/webhook_endpoints/"+ep.ID))
	click(t, ctx, `td form button[type="submit"]`)
	ready(t, ctx, "#redelivered")
	eventually(t, 20*time.Second, "the redelivery", func() bool { return e.received.Load() == 2 })
	do(t, ctx, chromedp.Navigate(base+"/console/webhook_endpoints/"+ep.ID))
	ready(t, ctx, "td.delivery-status")
	screenshot(t, ctx, "endpoint")
	do(t, ctx, chromedp.Navigate(base+"/console/payments/"+pay.ID))
	ready(t, ctx, "dl.facts")
	screenshot(t, ctx, "payment")
}

// Without the token, or without the session's CSRF value, the browser is
// refused.
func TestBrowser_refusedWithoutTheCredentialOrTheCSRFValue(t *testing.T) {
	t.Parallel()
	ctx := tab(t)
	e := newEnv(t, envConfig{})
	base := e.server.URL

	signInWithBrowser(t, ctx, base, "not-the-token")
	waitFor(t, ctx, 10*time.Second, `document.querySelector("main").textContent.includes("That is not the console's token")`)
	// Issue 42: a wrong token is an error, styled as one (it was styled as
	// information, in blue).
	require.Equal(t, "That is not the console's token.", text(t, ctx, `p.message.error[role="alert"]`))
	require.Equal(t, "rgb(253, 236, 234)", eval[string](t, ctx, `getComputedStyle(document.querySelector("p.message")).backgroundColor`))
	signInWithBrowser(t, ctx, base, e.apiKey)
	waitFor(t, ctx, 10*time.Second, `document.querySelector("main").textContent.includes("That is not the console's token")`)
	do(t, ctx, chromedp.Navigate(base+"/console/keys"))
	require.Equal(t, base+"/console/login", eval[string](t, ctx, "location.href"))

	signInWithBrowser(t, ctx, base, consoleToken)
	waitFor(t, ctx, 10*time.Second, `location.pathname === "/console" && !!document.querySelector("#total-unfinished")`)
	// A form whose CSRF value is gone, as a form another site made would
	// be: refused.
	ready(t, ctx, "form.logout button")
	eval[bool](t, ctx, `document.querySelector('form.logout input[name="csrf"]').remove(), true`)
	click(t, ctx, "form.logout button")
	waitFor(t, ctx, 10*time.Second, `document.title.startsWith("Refused")`)
	// The session itself is intact: the console still opens.
	do(t, ctx, chromedp.Navigate(base+"/console"))
	require.Equal(t, base+"/console", eval[string](t, ctx, "location.href"))
}

// requireFits checks that the page at path, in the 1,280 px window, needs
// no horizontal scrolling, and writes its screenshot (name, when set).
func requireFits(t *testing.T, ctx context.Context, base, path, selector, name string) {
	t.Helper()
	do(t, ctx, chromedp.Navigate(base+path))
	ready(t, ctx, selector)
	if name != "" {
		screenshot(t, ctx, name)
	}
	width := eval[int](t, ctx, `document.scrollingElement.scrollWidth`)
	require.LessOrEqual(t, width, 1280, "%s is %d px wide in a 1,280 px window", path, width)
}

// Issue 42, item 8: the payments table was 1,395 px wide in a 1,280 px
// window, the endpoints page wrapped its URLs every few characters, and
// amounts were in minor units ("2000 USD" for $20.00). Every page, with
// realistic data (long descriptions, emails and URLs, three currencies),
// fits the window, and money reads in major units with its symbol.
func TestBrowser_pagesFitA1280pxWindowAndShowMoney(t *testing.T) {
	t.Parallel()
	ctx := tab(t)
	e := newEnv(t, envConfig{failpoints: "after_stripe:payment_intent=error"})
	base := e.server.URL
	require.Equal(t, 1280, eval[int](t, ctx, `window.innerWidth`), "the window is 1,280 px wide")

	var ids []string
	for i, body := range []string{
		`{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","description":"Order 10492: two annual plans for the Northwind Traders accounting team, billed in advance","metadata":{"order_id":"10492","customer":"cus_northwind_traders_accounting"}}`,
		`{"amount":2000,"currency":"jpy","payment_method":"pm_card_visa","description":"Tokyo store order 7731, gift-wrapped, delivery on Saturday morning"}`,
		`{"amount":123456,"currency":"eur","payment_method":"pm_card_mastercard","description":"Invoice 2026-11-0042 for consulting services rendered in October and November"}`,
		`{"amount":99999999,"currency":"usd","payment_method":"pm_card_visa","capture":false}`,
	} {
		status, out := e.apiPost("/v1/payments", "fit-pay-"+strconv.Itoa(i), body)
		require.Equal(t, http.StatusCreated, status, out)
		var p struct{ ID string }
		require.NoError(t, json.Unmarshal([]byte(out), &p))
		ids = append(ids, p.ID)
	}
	status, out := e.apiPost("/v1/refunds", "fit-refund", `{"payment":"`+ids[0]+`","amount":550,"reason":"requested_by_customer"}`)
	require.Equal(t, http.StatusCreated, status, out)
	status, out = e.apiPost("/v1/webhook_endpoints", "fit-endpoint",
		`{"url":"`+e.hooks.URL+`/merchants/northwind-traders/integrations/payments/webhooks/v2/receive?tenant=northwind-eu-west-1&signature-version=2","description":"Northwind's production endpoint for payment and refund events"}`)
	require.Equal(t, http.StatusCreated, status, out)
	var ep struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(out), &ep))
	// A key left unfinished by a crash, and now locked by another process.
	status, out = e.apiPostTo(e.crashURL, "/v1/payments", "order-10493-held-by-another-process", paymentBody)
	require.GreaterOrEqual(t, status, 500, out)
	_, err := e.app.Pool.Exec(context.Background(), `UPDATE idempotency_keys SET locked_at = now(), lock_expires_at = now() + interval '1 minute'
		WHERE idempotency_key = 'order-10493-held-by-another-process'`)
	require.NoError(t, err)

	signInWithBrowser(t, ctx, base, consoleToken)
	waitFor(t, ctx, 10*time.Second, `location.pathname === "/console" && !!document.querySelector("#total-unfinished")`)
	requireFits(t, ctx, base, "/console", "#total-unfinished", "")
	requireFits(t, ctx, base, "/console/keys", "a.key", "")
	requireFits(t, ctx, base, "/console/keys/"+e.email+"/order-10493-held-by-another-process", "dl.facts", "story-locked")
	require.True(t, eval[bool](t, ctx, `document.querySelector("#redrive-why") !== null && document.querySelector('button[aria-describedby="redrive-why"]').disabled`),
		"re-drive is disabled while the key is locked")
	requireFits(t, ctx, base, "/console/payments", "table", "payments")
	list := text(t, ctx, "main table")
	for _, want := range []string{"$20.00", "$5.50", "¥2,000", "€1,234.56", "$999,999.99"} {
		require.Contains(t, list, want)
	}
	for _, minor := range []string{"2000 USD", "2000 JPY", "123456"} {
		require.NotContains(t, list, minor)
	}
	requireFits(t, ctx, base, "/console/payments/"+ids[0], "dl.facts", "")
	require.Contains(t, text(t, ctx, "dl.facts"), "$20.00 (captured $20.00, refunded $5.50)")
	requireFits(t, ctx, base, "/console/payments/"+ids[1], "dl.facts", "")
	require.Contains(t, text(t, ctx, "dl.facts"), "¥2,000")
	requireFits(t, ctx, base, "/console/webhook_endpoints", "table", "endpoints")
	// The URL wraps in a column at least 16rem wide: a line holds far
	// more than the four characters it held.
	lineHeight := eval[float64](t, ctx, `parseFloat(getComputedStyle(document.querySelector(".cell-url")).lineHeight)`)
	urlHeight := eval[float64](t, ctx, `document.querySelector(".cell-url").getBoundingClientRect().height`)
	urlLength := eval[int](t, ctx, `document.querySelector(".cell-url").textContent.length`)
	require.Less(t, urlHeight/lineHeight, float64(urlLength)/20, "the URL wraps every 20 characters or more")
	requireFits(t, ctx, base, "/console/webhook_endpoints/"+ep.ID, "dl.facts", "")
	requireFits(t, ctx, base, "/console/receipts", "main", "")
}
