package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Hostile values a client chose, each as it must never appear in a page
// (raw) and as it must appear (escaped).
var hostile = []struct{ raw, escaped string }{
	{`<script>alert(1)</script>`, `&lt;script&gt;alert(1)&lt;/script&gt;`},
	{`"><img src=x onerror=alert(2)>`, `&#34;&gt;&lt;img src=x onerror=alert(2)&gt;`},
	{`javascript:alert(3)`, `javascript:alert(3)`}, // as text; never as a link (checked below)
}

// Every page that shows what a client chose escapes it: an idempotency
// key that is HTML, a description, metadata, an endpoint's URL and
// description, an email, and a filter's value echoed back.
func TestConsole_hostileValuesAreEscapedOnEveryPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	pool := e.app.Pool

	// An email with HTML in it (users are made by operators, but a page
	// must not trust them either).
	hostileEmail := `"><script>alert(4)</script>@example.com`
	_, err := pool.Exec(ctx, `UPDATE users SET email = $1 WHERE email = $2`, hostileEmail, e.email)
	require.NoError(t, err)

	// A payment under an idempotency key that is HTML, with a hostile
	// description and metadata, through the API.
	htmlKey := `<script>alert(1)</script>`
	body, _ := json.Marshal(map[string]any{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa",
		"description": hostile[1].raw, "metadata": map[string]string{"note": hostile[0].raw}})
	status, resp := e.apiPost("/v1/payments", htmlKey, string(body))
	require.Equal(t, http.StatusCreated, status, resp)
	var payment struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(resp), &payment))
	// An unfinished key that is HTML too (its request never ran: the row
	// as a crash before the first phase leaves it).
	_, err = pool.Exec(ctx, `INSERT INTO idempotency_keys (user_id, idempotency_key, flow, request_method, request_path, request_params, request_fingerprint, recovery_point, last_run_at)
		SELECT id, $1, 'create_payment', 'POST', '/v1/payments', '{"description": "<script>alert(1)</script>"}', sha256('x'::bytea), 'started', now() FROM users WHERE email = $2`,
		hostile[1].raw, hostileEmail)
	require.NoError(t, err)
	// Webhook endpoints with a hostile description, one with a
	// javascript: URL (the API refuses one; a page must not trust the
	// database either), and a delivery to show.
	_, err = pool.Exec(ctx, `INSERT INTO webhook_endpoints (id, user_id, url, enabled_events, description, secret)
		SELECT 'we_hostile', id, $1, '{*}', $2, 'whsec_x' FROM users WHERE email = $3`, hostile[2].raw, hostile[0].raw, hostileEmail)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO webhook_endpoints (id, user_id, url, enabled_events, description, secret)
		SELECT 'we_hostile2', id, $1, '{*}', $2, 'whsec_y' FROM users WHERE email = $3`,
		`https://example.com/"><img src=x onerror=alert(2)>`, hostile[1].raw, hostileEmail)
	require.NoError(t, err)

	b := e.browser()
	b.signIn()
	csrf := b.csrf("/console")
	story := "/console/keys/" + url.PathEscape(hostileEmail) + "/" + url.PathEscape(htmlKey)
	unfinished := "/console/keys/" + url.PathEscape(hostileEmail) + "/" + url.PathEscape(hostile[1].raw)
	pages := map[string]answer{
		"dashboard":            b.get("/console"),
		"live":                 b.get("/console/live"),
		"keys":                 b.get("/console/keys"),
		"keys by user":         b.get("/console/keys?user=" + url.QueryEscape(hostileEmail)),
		"keys by hostile flow": b.get("/console/keys?flow=" + url.QueryEscape(hostile[0].raw)),
		"keys, hostile state":  b.get("/console/keys?state=" + url.QueryEscape(hostile[0].raw)),
		"keys, hostile age":    b.get("/console/keys?min_age=" + url.QueryEscape(hostile[1].raw)),
		"story":                b.get(story),
		"unfinished story":     b.get(unfinished),
		"confirm":              b.do(http.MethodPost, unfinished+"/retry", url.Values{"csrf": {csrf}}),
		"payments":             b.get("/console/payments"),
		"payments by user":     b.get("/console/payments?user=" + url.QueryEscape(hostile[0].raw)),
		"payment":              b.get("/console/payments/" + payment.ID),
		"endpoints":            b.get("/console/webhook_endpoints"),
		"endpoint":             b.get("/console/webhook_endpoints/we_hostile"),
		"endpoint 2":           b.get("/console/webhook_endpoints/we_hostile2?redelivered=" + url.QueryEscape(hostile[0].raw)),
		"receipts":             b.get("/console/receipts"),
		"unknown payment":      b.get("/console/payments/" + url.PathEscape(hostile[0].raw)),
		"unknown key":          b.get("/console/keys/" + url.PathEscape(hostile[0].raw) + "/" + url.PathEscape(hostile[1].raw)),
		"redeliver, hostile":   b.do(http.MethodPost, "/console/webhook_endpoints/we_hostile/redeliver", url.Values{"csrf": {csrf}, "event": {hostile[0].raw}, "idempotency_key": {"console-redeliver-00000000000000000000000000000000"}}),
	}
	for name, a := range pages {
		assert.NotContains(t, a.body, "<script>alert", name)
		assert.NotContains(t, a.body, "<img src=x", name)
		assert.NotRegexp(t, `(?i)(href|src|action)="\s*javascript:`, a.body, name)
		assertNoInlineScript(t, a.body, name)
	}
	// And each value is there, escaped, where it is shown.
	shows := map[string][]string{
		"dashboard":           {`&#34;&gt;&lt;script&gt;alert(4)&lt;/script&gt;@example.com`, hostile[1].escaped},
		"keys":                {hostile[0].escaped, hostile[1].escaped},
		"story":               {hostile[0].escaped, "description"},
		"unfinished story":    {hostile[1].escaped, `&lt;script&gt;alert(1)&lt;/script&gt;`},
		"confirm":             {hostile[1].escaped},
		"payments":            {hostile[1].escaped},
		"payment":             {hostile[1].escaped, `&lt;script&gt;alert(1)&lt;/script&gt;`},
		"endpoints":           {hostile[0].escaped, `javascript:alert(3)`, `&#34;&gt;&lt;img src=x onerror=alert(2)&gt;`},
		"endpoint":            {hostile[0].escaped, `<code class="url">javascript:alert(3)</code>`},
		"endpoint 2":          {hostile[0].escaped},
		"keys by user":        {`value="&#34;&gt;&lt;script&gt;alert(4)&lt;/script&gt;@example.com"`},
		"keys, hostile state": {hostile[0].escaped},
	}
	for name, want := range shows {
		for _, w := range want {
			assert.Contains(t, pages[name].body, w, name)
		}
	}
	// The story's links carry the key escaped into the path, and follow.
	assert.Contains(t, pages["keys"].body, `href="`+strings.ReplaceAll(story, "&", "&amp;")+`"`)
	assert.Equal(t, http.StatusOK, pages["story"].status)
	assert.Equal(t, http.StatusOK, pages["unfinished story"].status)
}
