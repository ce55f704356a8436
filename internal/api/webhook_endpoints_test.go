package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// API.md section 7: the routes of the webhooks to merchants.

const pathEndpoints = "/v1/webhook_endpoints"

type endpointJSON struct {
	ID            string   `json:"id"`
	Object        string   `json:"object"`
	URL           string   `json:"url"`
	EnabledEvents []string `json:"enabled_events"`
	Description   *string  `json:"description"`
	Status        string   `json:"status"`
	Secret        *string  `json:"secret"`
	Created       int64    `json:"created"`
}

func decodeEndpoint(t *testing.T, body []byte) endpointJSON {
	t.Helper()
	var e endpointJSON
	require.NoError(t, json.Unmarshal(body, &e), string(body))
	return e
}

func (b *testBundle) createEndpoint(t *testing.T, apiKey, idemKey, body string) endpointJSON {
	t.Helper()
	resp, data := b.post(t, apiKey, pathEndpoints, idemKey, body)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(data))
	return decodeEndpoint(t, data)
}

func TestWebhookEndpoints_createShowsTheSecretOnlyThenAndInReplays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := `{"url": "https://example.com/hooks", "description": "orders"}`
	resp, data := b.post(t, aliceKey, pathEndpoints, "we-1", body)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(data))
	created := decodeEndpoint(t, data)
	require.True(t, strings.HasPrefix(created.ID, "we_"), created.ID)
	require.Equal(t, "webhook_endpoint", created.Object)
	require.Equal(t, "https://example.com/hooks", created.URL)
	require.Equal(t, []string{"*"}, created.EnabledEvents)
	require.Equal(t, "orders", *created.Description)
	require.Equal(t, "enabled", created.Status)
	require.InDelta(t, time.Now().Unix(), created.Created, 60)
	require.NotNil(t, created.Secret)
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(*created.Secret, "whsec_"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(*created.Secret, "whsec_"))
	require.Len(t, key, 32)

	again, againData := b.post(t, aliceKey, pathEndpoints, "we-1", `{"description":"orders","url":"https://example.com/hooks"}`)
	require.Equal(t, http.StatusCreated, again.StatusCode)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.JSONEq(t, string(data), string(againData), "the replay carries the same secret")
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM webhook_endpoints"))

	resp, data = b.do(t, http.MethodGet, pathEndpoints+"/"+created.ID, aliceKey, nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))
	got := decodeEndpoint(t, data)
	require.Nil(t, got.Secret, string(data))
	require.NotContains(t, string(data), "secret")
	got.Secret = created.Secret
	require.Equal(t, created, got)

	resp, data = b.do(t, http.MethodGet, pathEndpoints, aliceKey, nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))
	require.NotContains(t, string(data), "secret")

	// Another user reuses the key for their own endpoint: a new one.
	other := b.createEndpoint(t, bobKey, "we-1", body)
	require.NotEqual(t, created.ID, other.ID)
	require.NotEqual(t, *created.Secret, *other.Secret)
}

func TestWebhookEndpoints_listNewestFirstPaginatedOwnOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []string
	for _, k := range []string{"a", "b", "c"} {
		ids = append(ids, b.createEndpoint(t, aliceKey, "we-"+k, `{"url":"https://example.com/`+k+`"}`).ID)
	}
	bobs := b.createEndpoint(t, bobKey, "we-bob", `{"url":"https://example.com/bob"}`)
	page := func(key, query string) (got []string, hasMore bool) {
		resp, data := b.do(t, http.MethodGet, pathEndpoints+query, key, nil, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(data))
		var l struct {
			Object  string         `json:"object"`
			Data    []endpointJSON `json:"data"`
			HasMore bool           `json:"has_more"`
		}
		require.NoError(t, json.Unmarshal(data, &l))
		require.Equal(t, "list", l.Object)
		for _, e := range l.Data {
			got = append(got, e.ID)
		}
		return got, l.HasMore
	}
	got, more := page(aliceKey, "?limit=2")
	require.Equal(t, []string{ids[2], ids[1]}, got)
	require.True(t, more)
	got, more = page(aliceKey, "?limit=2&starting_after="+ids[1])
	require.Equal(t, []string{ids[0]}, got)
	require.False(t, more)
	got, _ = page(bobKey, "")
	require.Equal(t, []string{bobs.ID}, got)

	for _, q := range []string{"?limit=0", "?limit=101", "?limit=x", "?starting_after=" + bobs.ID} {
		resp, data := b.do(t, http.MethodGet, pathEndpoints+q, aliceKey, nil, nil)
		requireProblem(t, resp, data, http.StatusBadRequest, "validation_failed")
	}
}

func TestWebhookEndpoints_anotherUsersIsNotFoundAndDeleteIsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := b.createEndpoint(t, aliceKey, "we-1", `{"url":"https://example.com/hooks"}`)

	resp, data := b.do(t, http.MethodGet, pathEndpoints+"/"+e.ID, bobKey, nil, nil)
	requireProblem(t, resp, data, http.StatusNotFound, "not_found")
	resp, data = b.do(t, http.MethodDelete, pathEndpoints+"/"+e.ID, bobKey, nil, nil)
	requireProblem(t, resp, data, http.StatusNotFound, "not_found")
	resp, data = b.do(t, http.MethodGet, pathEndpoints+"/we_nope", aliceKey, nil, nil)
	requireProblem(t, resp, data, http.StatusNotFound, "not_found")

	resp, data = b.do(t, http.MethodDelete, pathEndpoints+"/"+e.ID, aliceKey, nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))
	require.JSONEq(t, `{"id":"`+e.ID+`","object":"webhook_endpoint","deleted":true}`, string(data))

	resp, data = b.do(t, http.MethodDelete, pathEndpoints+"/"+e.ID, aliceKey, nil, nil)
	requireProblem(t, resp, data, http.StatusNotFound, "not_found")
	resp, data = b.do(t, http.MethodGet, pathEndpoints+"/"+e.ID, aliceKey, nil, nil)
	requireProblem(t, resp, data, http.StatusNotFound, "not_found")
	resp, data = b.do(t, http.MethodGet, pathEndpoints, aliceKey, nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.JSONEq(t, `{"object":"list","data":[],"has_more":false}`, string(data))
}

func TestWebhookEndpoints_invalidInputIsRefusedAndNotStored(t *testing.T) {
	t.Parallel()
	refused := errors.New("resolves to 10.0.0.1, a private address")
	b := setup(t, setupOpts{checkURL: func(_ context.Context, raw string) error {
		if strings.Contains(raw, "internal") {
			return refused
		}
		return nil
	}})
	for name, body := range map[string]string{
		"no url":             `{}`,
		"empty url":          `{"url":""}`,
		"relative url":       `{"url":"/hooks"}`,
		"ftp url":            `{"url":"ftp://example.com/hooks"}`,
		"no host":            `{"url":"https:///hooks"}`,
		"user info":          `{"url":"https://user:pass@example.com/hooks"}`,
		"too long":           `{"url":"https://example.com/` + strings.Repeat("a", 2048) + `"}`,
		"refused by check":   `{"url":"https://internal.example.com/hooks"}`,
		"unknown event":      `{"url":"https://example.com/hooks","enabled_events":["payment.refunded"]}`,
		"unknown prefix":     `{"url":"https://example.com/hooks","enabled_events":["charge.*"]}`,
		"bare prefix":        `{"url":"https://example.com/hooks","enabled_events":["payment"]}`,
		"empty list":         `{"url":"https://example.com/hooks","enabled_events":[]}`,
		"events not strings": `{"url":"https://example.com/hooks","enabled_events":[1]}`,
		"unknown field":      `{"url":"https://example.com/hooks","secret":"whsec_mine"}`,
	} {
		resp, data := b.post(t, aliceKey, pathEndpoints, "we-bad", body)
		requireProblem(t, resp, data, http.StatusBadRequest, "validation_failed")
		require.NotContains(t, string(data), "secret\":\"whsec", name)
	}
	require.Equal(t, 0, b.count(t, "SELECT count(*) FROM webhook_endpoints"))
	require.Equal(t, 0, b.keyRows(t), "nothing refused before the work is stored")

	// The key is free for the fixed request.
	e := b.createEndpoint(t, aliceKey, "we-bad", `{"url":"http://example.com:8080/hooks","enabled_events":["payment.succeeded","refund.*","*"]}`)
	require.Equal(t, []string{"payment.succeeded", "refund.*", "*"}, e.EnabledEvents)
	resp, data := b.post(t, aliceKey, pathEndpoints, "we-bad", `{"url":"https://example.com/other"}`)
	requireProblem(t, resp, data, http.StatusUnprocessableEntity, "idempotency_key_reused")
	resp, data = b.post(t, aliceKey, pathEndpoints, "", `{"url":"https://example.com/other"}`)
	requireProblem(t, resp, data, http.StatusBadRequest, "idempotency_key_missing")
}

// insertEvent writes an event of the user with email, as the event worker would.
func (b *testBundle) insertEvent(t *testing.T, email, id, eventType string) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), `INSERT INTO events (id, user_id, type, data)
		SELECT $1, id, $2, $4 FROM users WHERE email = $3`, id, eventType, email, eventPayment)
	require.NoError(t, err)
}

func TestEvents_getOneFilterByTypeAndNotFoundAcrossUsers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insertEvent(t, "alice@example.com", "evt_ok", "payment.succeeded")
	b.insertEvent(t, "alice@example.com", "evt_refund", "refund.failed")
	b.insertEvent(t, "bob@example.com", "evt_bob", "refund.failed")

	resp, data := b.do(t, http.MethodGet, "/v1/events/evt_ok", aliceKey, nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))
	var e map[string]any
	require.NoError(t, json.Unmarshal(data, &e))
	require.Equal(t, "evt_ok", e["id"])
	require.Equal(t, "event", e["object"])
	require.Equal(t, "payment.succeeded", e["type"])
	var payment map[string]any
	require.NoError(t, json.Unmarshal([]byte(eventPayment), &payment))
	require.Equal(t, map[string]any{"object": payment}, e["data"])

	for _, path := range []string{"/v1/events/evt_bob", "/v1/events/evt_nope", "/v1/events/evt_bob/deliveries"} {
		resp, data = b.do(t, http.MethodGet, path, aliceKey, nil, nil)
		requireProblem(t, resp, data, http.StatusNotFound, "not_found")
	}

	resp, data = b.do(t, http.MethodGet, "/v1/events?type=refund.failed", aliceKey, nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))
	var l struct {
		Data []map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal(data, &l))
	require.Len(t, l.Data, 1)
	require.Equal(t, "evt_refund", l.Data[0]["id"])
	for _, q := range []string{"?type=refund", "?type=", "?type=payment.*"} {
		resp, data = b.do(t, http.MethodGet, "/v1/events"+q, aliceKey, nil, nil)
		requireProblem(t, resp, data, http.StatusBadRequest, "validation_failed")
	}
}

func TestRedeliver_restartsTheEventsDeliveriesOnceAndIsReplayed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	all := b.createEndpoint(t, aliceKey, "we-all", `{"url":"https://example.com/all"}`)
	refunds := b.createEndpoint(t, aliceKey, "we-refunds", `{"url":"https://example.com/refunds","enabled_events":["refund.*"]}`)
	gone := b.createEndpoint(t, aliceKey, "we-gone", `{"url":"https://example.com/gone"}`)
	b.insertEvent(t, "alice@example.com", "evt_1", "payment.succeeded")
	// As the event worker left them: one delivered, one failed for good,
	// one to an endpoint deleted since.
	_, err := b.pool.Exec(context.Background(), `INSERT INTO webhook_deliveries (event_id, endpoint_id, user_id, status, attempts, last_status_code)
		SELECT 'evt_1', e.id, e.user_id, s.status, 1, 200 FROM webhook_endpoints e
		JOIN (VALUES ($1, 'succeeded'), ($2, 'failed'), ($3, 'succeeded')) s(id, status) ON s.id = e.id`, all.ID, refunds.ID, gone.ID)
	require.NoError(t, err)
	resp, data := b.do(t, http.MethodDelete, pathEndpoints+"/"+gone.ID, aliceKey, nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))

	resp, data = b.post(t, bobKey, "/v1/events/evt_1/redeliver", "re-1", "")
	requireProblem(t, resp, data, http.StatusNotFound, "not_found")
	resp, data = b.post(t, aliceKey, "/v1/events/evt_1/redeliver", "", "")
	requireProblem(t, resp, data, http.StatusBadRequest, "idempotency_key_missing")

	resp, data = b.post(t, aliceKey, "/v1/events/evt_1/redeliver", "re-1", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))
	var l struct {
		Object string           `json:"object"`
		Data   []map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal(data, &l))
	require.Equal(t, "list", l.Object)
	require.Len(t, l.Data, 1, "only the endpoint that still exists and subscribes to payment.succeeded: %s", data)
	d := l.Data[0]
	require.Equal(t, "webhook_delivery", d["object"])
	require.Equal(t, "evt_1", d["event"])
	require.Equal(t, all.ID, d["endpoint"])
	require.Equal(t, "pending", d["status"])
	require.EqualValues(t, 1, d["attempts"])
	require.InDelta(t, time.Now().Unix(), d["next_attempt"], 60)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM webhook_deliveries WHERE event_id = 'evt_1' AND endpoint_id = $1
		AND cycle = 1 AND cycle_attempts = 0 AND status = 'pending' AND next_attempt_at <= now()`, all.ID),
		"a new cycle, due at once for the webhook dispatcher")

	again, againData := b.post(t, aliceKey, "/v1/events/evt_1/redeliver", "re-1", "")
	require.Equal(t, http.StatusOK, again.StatusCode)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.JSONEq(t, string(data), string(againData))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM webhook_deliveries WHERE event_id = 'evt_1' AND endpoint_id = $1
		AND cycle = 1`, all.ID), "a replay starts no other cycle")

	resp, data = b.do(t, http.MethodGet, "/v1/events/evt_1/deliveries", aliceKey, nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))
	require.NoError(t, json.Unmarshal(data, &l))
	require.Len(t, l.Data, 3, "every delivery, the deleted endpoint's history too")
}
