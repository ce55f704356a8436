package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const paymentBody = `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","description":"console test"}`

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *env) keyState(key string) (point string, needsAttention bool) {
	e.t.Helper()
	require.NoError(e.t, e.app.Pool.QueryRow(context.Background(),
		`SELECT recovery_point, needs_attention_at IS NOT NULL FROM idempotency_keys WHERE idempotency_key = $1`, key).
		Scan(&point, &needsAttention))
	return point, needsAttention
}

// A request that failed after Stripe answered, then given up on by the
// completer (the mark it sets past Stripe's idempotency window is set here
// directly: the window is 24 hours), is re-driven from its story, after a
// confirmation, as `payments keys retry` does.
func TestConsole_redriveAKeyThatNeedsAttention(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{failpoints: "after_stripe:payment_intent=error"})
	status, body := e.apiPostTo(e.crashURL, "/v1/payments", "crashed-1", paymentBody)
	require.GreaterOrEqual(t, status, 500, body)
	point, _ := e.keyState("crashed-1")
	require.NotEqual(t, "finished", point)
	_, err := e.app.Pool.Exec(context.Background(), `UPDATE idempotency_keys SET needs_attention_at = now() WHERE idempotency_key = 'crashed-1'`)
	require.NoError(t, err)

	b := e.browser()
	b.signIn()
	assert.Regexp(t, `id="total-needs-attention">1<`, b.get("/console").body)
	assert.Contains(t, b.get("/console/keys?state=needs_attention").body, ">crashed-1<")
	story := "/console/keys/" + url.PathEscape(e.email) + "/crashed-1"
	page := b.get(story)
	require.Equal(t, http.StatusOK, page.status)
	assert.Contains(t, page.body, "Needs attention since")
	assert.Contains(t, page.body, "payment_intent", "the Stripe step and its child key")
	csrf := b.csrf(story)

	// First the confirmation: nothing is done yet.
	a := b.do(http.MethodPost, story+"/retry", url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusOK, a.status)
	assert.Contains(t, a.body, "Yes, re-drive it")
	assert.Contains(t, a.body, `name="confirm" value="yes"`)
	_, needs := e.keyState("crashed-1")
	assert.True(t, needs, "not re-driven before the confirmation")

	a = b.do(http.MethodPost, story+"/retry", url.Values{"csrf": {csrf}, "confirm": {"yes"}})
	require.Equal(t, http.StatusOK, a.status, a.body)
	assert.Contains(t, a.body, "It is finished")
	assert.Contains(t, a.body, "Status 201")
	point, needs = e.keyState("crashed-1")
	assert.Equal(t, "finished", point)
	assert.False(t, needs)
	assert.Contains(t, b.get(story).body, "Status 201")

	// Again: it has its answer, nothing to do.
	a = b.do(http.MethodPost, story+"/retry", url.Values{"csrf": {csrf}, "confirm": {"yes"}})
	assert.Equal(t, http.StatusConflict, a.status)
}

var (
	redeliverKey = regexp.MustCompile(`name="idempotency_key" value="([^"]+)"`)
	csrfValue    = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
)

// Redeliver from an endpoint's page goes through the API's redeliver flow:
// the event is sent again, once however often the form is sent.
func TestConsole_redeliverAnEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{worker: true})
	status, body := e.apiPost("/v1/webhook_endpoints", "endpoint-1", `{"url":"`+e.hooks.URL+`/hook","enabled_events":["payment.succeeded"]}`)
	require.Equal(t, http.StatusCreated, status, body)
	var ep struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(body), &ep))
	status, body = e.apiPost("/v1/payments", "pay-1", paymentBody)
	require.Equal(t, http.StatusCreated, status, body)
	eventually(t, 20*time.Second, "the first delivery", func() bool { return e.received.Load() == 1 })

	b := e.browser()
	b.signIn()
	page := b.get("/console/webhook_endpoints/" + ep.ID)
	require.Equal(t, http.StatusOK, page.status)
	assert.Contains(t, page.body, "payment.succeeded")
	eventually(t, 10*time.Second, "the delivery shown as succeeded", func() bool {
		page = b.get("/console/webhook_endpoints/" + ep.ID)
		return regexp.MustCompile(`class="delivery-status">succeeded<`).MatchString(page.body)
	})
	var event string
	require.NoError(t, e.app.Pool.QueryRow(context.Background(), `SELECT event_id FROM webhook_deliveries WHERE endpoint_id = $1`, ep.ID).Scan(&event))
	form := url.Values{"csrf": {csrfValue.FindStringSubmatch(page.body)[1]}, "event": {event},
		"idempotency_key": {redeliverKey.FindStringSubmatch(page.body)[1]}}

	a := b.do(http.MethodPost, "/console/webhook_endpoints/"+ep.ID+"/redeliver", form)
	require.Equal(t, http.StatusSeeOther, a.status, a.body)
	assert.Equal(t, "/console/webhook_endpoints/"+ep.ID+"?redelivered="+event, a.header.Get("Location"))
	eventually(t, 20*time.Second, "the redelivery", func() bool { return e.received.Load() == 2 })

	// The same form again is the same request: replayed, not redelivered.
	a = b.do(http.MethodPost, "/console/webhook_endpoints/"+ep.ID+"/redeliver", form)
	require.Equal(t, http.StatusSeeOther, a.status, a.body)
	var cycle int
	var flow string
	require.NoError(t, e.app.Pool.QueryRow(context.Background(), `SELECT d.cycle, k.flow FROM webhook_deliveries d
		JOIN idempotency_keys k ON k.id = d.idempotency_key_id WHERE d.endpoint_id = $1`, ep.ID).Scan(&cycle, &flow))
	assert.Equal(t, 1, cycle)
	assert.Equal(t, "redeliver_event", flow)

	// Without the CSRF value, nothing happens.
	form.Del("csrf")
	form.Set("idempotency_key", "console-redeliver-11111111111111111111111111111111")
	a = b.do(http.MethodPost, "/console/webhook_endpoints/"+ep.ID+"/redeliver", form)
	assert.Equal(t, http.StatusForbidden, a.status)
	// Another user's event, or none, is not redelivered through this endpoint.
	form.Set("csrf", csrfValue.FindStringSubmatch(page.body)[1])
	form.Set("event", "evt_nope")
	assert.Equal(t, http.StatusNotFound, b.do(http.MethodPost, "/console/webhook_endpoints/"+ep.ID+"/redeliver", form).status)
}

// Issue 42, item 8: re-drive was offered while the key was locked (being
// executed). Its story now shows the button disabled with the reason, and
// the re-drive is refused (409) with that reason, confirmed or not, while
// the lock is live; once it lapses, the re-drive is offered and works.
func TestConsole_redriveIsRefusedWhileTheKeyIsLocked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{failpoints: "after_stripe:payment_intent=error"})
	status, body := e.apiPostTo(e.crashURL, "/v1/payments", "held-1", paymentBody)
	require.GreaterOrEqual(t, status, 500, body)
	// Another process holds it now: its lock is live for a minute.
	_, err := e.app.Pool.Exec(context.Background(), `UPDATE idempotency_keys SET locked_at = now(), lock_expires_at = now() + interval '1 minute'
		WHERE idempotency_key = 'held-1'`)
	require.NoError(t, err)

	b := e.browser()
	b.signIn()
	story := "/console/keys/" + url.PathEscape(e.email) + "/held-1"
	page := b.get(story)
	require.Equal(t, http.StatusOK, page.status)
	assert.Regexp(t, `<button type="button" disabled[^>]*>Re-drive this key`, page.body)
	assert.Contains(t, page.body, "Not while it is locked")
	assert.NotContains(t, page.body, `action="`+story+`/retry"`, "no form to send")
	csrf := b.csrf("/console")
	for _, form := range []url.Values{{"csrf": {csrf}}, {"csrf": {csrf}, "confirm": {"yes"}}} {
		a := b.do(http.MethodPost, story+"/retry", form)
		assert.Equal(t, http.StatusConflict, a.status, form)
		assert.Regexp(t, `being executed right now`, a.body)
		assert.Contains(t, a.body, `class="message error" role="alert"`, "styled as an error")
	}
	point, _ := e.keyState("held-1")
	assert.NotEqual(t, "finished", point, "nothing was re-driven")

	// The lock lapses: the re-drive is offered, and finishes the key.
	_, err = e.app.Pool.Exec(context.Background(), `UPDATE idempotency_keys SET lock_expires_at = now() - interval '1 second' WHERE idempotency_key = 'held-1'`)
	require.NoError(t, err)
	assert.Contains(t, b.get(story).body, `action="`+story+`/retry"`)
	a := b.do(http.MethodPost, story+"/retry", url.Values{"csrf": {csrf}, "confirm": {"yes"}})
	require.Equal(t, http.StatusOK, a.status, a.body)
	point, _ = e.keyState("held-1")
	assert.Equal(t, "finished", point)
}

// A key's story lists the recovery points of its flow, as the flow declares
// them, with the key's place among them, apart from the audit trail (it
// listed the audit trail's action names under "Recovery points committed").
func TestConsole_storyShowsTheFlowsRecoveryPoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{failpoints: "after_stripe:payment_intent=error"})
	status, body := e.apiPostTo(e.crashURL, "/v1/payments", "points-1", paymentBody)
	require.GreaterOrEqual(t, status, 500, body)
	point, _ := e.keyState("points-1")
	require.Equal(t, "payment_created", point)

	b := e.browser()
	b.signIn()
	page := b.get("/console/keys/" + url.PathEscape(e.email) + "/points-1").body
	points := regexp.MustCompile(`(?s)<ol class="points".*?</ol>`).FindString(page)
	require.NotEmpty(t, points, page)
	var order []string
	for _, m := range regexp.MustCompile(`<li class="(\w+)"><span class="point point-(\w+)">`).FindAllStringSubmatch(points, -1) {
		order = append(order, m[2]+":"+m[1])
	}
	assert.Equal(t, []string{"started:passed", "payment_created:here", "payment_intent_created:ahead", "finished:ahead"}, order)
	assert.Contains(t, page, "<h2>Audit trail</h2>")
	assert.NotContains(t, page, "Recovery points committed")
}
