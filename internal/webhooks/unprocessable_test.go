package webhooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/stripesim"
)

// A signed event the service cannot decode or apply is answered 200
// ("unprocessable"), never a 5xx (which Stripe would retry for days), and
// kept aside with its reason for an operator; it changes nothing else. Text
// PostgreSQL cannot hold is refused before any SQL: the body is kept as
// bytes. Each body here once answered 500.
func TestWebhook_unprocessableEventsAre200AndKeptAside(t *testing.T) {
	t.Parallel()
	now := time.Now().Unix()
	objectOf := func(object string) []byte {
		return []byte(fmt.Sprintf(`{"id":"evt_shape","object":"event","api_version":"2099-01-01","created":%d,"type":"payment_intent.succeeded","data":{"object":%s}}`, now, object))
	}
	for _, tc := range []struct {
		name    string
		payload []byte
		reason  string // a part of the reason kept
		eventID any    // what is kept of the id: a string, or nil
	}{
		{"id a number", []byte(fmt.Sprintf(`{"id":12345,"object":"event","created":%d,"type":"payment_intent.succeeded","data":{"object":{"id":"pi_w"}}}`, now)),
			"shape", nil},
		{"NUL in the id", []byte(fmt.Sprintf(`{"id":"evt_\u0000nul","object":"event","created":%d,"type":"payment_intent.succeeded","data":{"object":{"id":"pi_w"}}}`, now)),
			"$.id holds a NUL", nil},
		{"NUL in metadata", event("evt_meta_nul", "payment_intent.succeeded", now,
			map[string]any{"id": "pi_w", "object": "payment_intent", "status": "succeeded", "metadata": map[string]string{"payment": "pay_w\x00"}}),
			"NUL", "evt_meta_nul"},
		{"NUL in a metadata key", event("evt_key_nul", "charge.refunded", now,
			map[string]any{"id": "ch_1", "object": "charge", "metadata": map[string]string{"k\x00": "v"}}),
			"NUL", "evt_key_nul"},
		{"another API version's shape: amount as text", objectOf(`{"id":"pi_w","object":"payment_intent","amount":"two thousand","status":"succeeded"}`),
			"payment_intent.succeeded", "evt_shape"},
		{"another API version's shape: metadata a list", objectOf(`{"id":"pi_w","object":"payment_intent","metadata":["a"],"status":"succeeded"}`),
			"payment_intent.succeeded", "evt_shape"},
		{"invalid UTF-8", append([]byte(`{"id":"evt_utf8","object":"event","type":"payment_intent.succeeded","description":"`), 0xff, 0xfe, '"', '}'),
			"UTF-8", "evt_utf8"},
		{"not JSON", []byte(`{"id":"evt_cut","type":`), "not JSON", nil},
		{"not an object", []byte(`["evt_list"]`), "not a JSON object", nil},
		{"no id", []byte(`{"object":"event","type":"payment_intent.succeeded","data":{"object":{}}}`), "no id", nil},
		{"no data", []byte(`{"id":"evt_nodata","object":"event","type":"payment_intent.succeeded"}`), "no data", "evt_nodata"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			for range 2 { // a second delivery of the same body is kept once
				status, out := b.deliver(t, tc.payload, secret, time.Now())
				require.Equal(t, http.StatusOK, status, "%v", out)
				require.Equal(t, "unprocessable", out["outcome"])
			}
			var eventID *string
			var reason string
			var payload []byte
			require.NoError(t, b.pool.QueryRow(context.Background(),
				"SELECT event_id, reason, payload FROM stripe_events_unprocessable").Scan(&eventID, &reason, &payload))
			require.Contains(t, reason, tc.reason)
			require.Equal(t, tc.payload, payload, "the body is kept exactly as it came")
			if tc.eventID == nil {
				require.Nil(t, eventID)
			} else {
				require.NotNil(t, eventID)
				require.Equal(t, tc.eventID, *eventID)
			}
			require.Zero(t, b.count(t, "SELECT count(*) FROM stripe_events"), "not in the inbox: a corrected delivery may still be applied")
			st, _, _ := b.payment(t)
			require.Equal(t, "requires_capture", st, "nothing applied")
			require.Equal(t, "2", b.metric(t, "payments_stripe_events_unprocessable_total"), "counted per delivery")
		})
	}
}

// FuzzUnprocessable: whatever a signed body holds, the answer is 200 (an
// event, or kept aside as unprocessable), never a 5xx.
func FuzzUnprocessable(f *testing.F) {
	now := time.Now().Unix()
	f.Add(event("evt_f", "payment_intent.succeeded", now, intent("pi_w", "succeeded", 2000)))
	f.Add([]byte(`{"id":1}`))
	f.Add([]byte(`{"id":"a\u0000","type":"x","data":{"object":{}}}`))
	f.Add([]byte{0xff})
	f.Add([]byte(`{"id":"evt_r","type":"charge.refund.updated","data":{"object":{"id":"re_1","amount":"x"}}}`))
	b := setup(f)
	f.Fuzz(func(t *testing.T, payload []byte) {
		if len(payload) == 0 {
			return
		}
		status, _ := b.deliverRaw(t, payload, secret)
		if status != http.StatusOK {
			t.Fatalf("a signed body got %d: %q", status, payload)
		}
	})
}

// STRIPE_WEBHOOK_SECRET may hold several secrets, so one can be rolled: an
// event signed with any of them is taken, also when its Stripe-Signature
// carries several v1 signatures (Stripe signs with the old and the new
// secret while both are live); one signed with neither is 400.
func TestWebhook_anyOfSeveralSecretsVerifies(t *testing.T) {
	t.Parallel()
	const oldSecret, newSecret = "whsec_old_0123456789", "whsec_new_0123456789"
	b := setupWith(t, " "+oldSecret+", "+newSecret+" ")
	now := time.Now()
	signBoth := func(payload []byte) string {
		withOld := stripesim.Sign(payload, oldSecret, now)
		withNew := stripesim.Sign(payload, newSecret, now)
		return withOld + "," + withNew[strings.Index(withNew, "v1="):]
	}
	for i, sign := range []func([]byte) string{
		func(p []byte) string { return stripesim.Sign(p, oldSecret, now) },
		func(p []byte) string { return stripesim.Sign(p, newSecret, now) },
		signBoth,
	} {
		payload := event(fmt.Sprintf("evt_roll_%d", i), "customer.created", now.Unix(), map[string]any{"id": "cus_1"})
		status, out := b.deliverSigned(t, payload, sign(payload))
		require.Equal(t, http.StatusOK, status, "%v", out)
		require.Equal(t, "ignored", out["outcome"])
	}
	payload := event("evt_roll_other", "customer.created", now.Unix(), map[string]any{"id": "cus_1"})
	status, out := b.deliverSigned(t, payload, stripesim.Sign(payload, "whsec_other_0123456789", now))
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "webhook_signature_invalid", out["code"])
	require.Equal(t, 3, b.count(t, "SELECT count(*) FROM stripe_events"))
}

// Stripe's deliveries take up to 256 KiB, and a 413 names that limit; the
// other routes keep 64 KiB, and their 413 names theirs.
func TestWebhook_bodyLimitIs256KiBAndItsOwn413SaysSo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now()
	pad := func(n int) []byte {
		base := event("evt_big", "customer.created", now.Unix(), map[string]any{"id": "cus_1", "description": ""})
		// Fill the description so that the body is n bytes.
		filler := strings.Repeat("x", n-len(base))
		return bytes.Replace(base, []byte(`"description":""`), []byte(`"description":"`+filler+`"`), 1)
	}
	big := pad(256 << 10)
	require.Len(t, big, 256<<10)
	status, out := b.deliverRaw(t, big, secret)
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.Equal(t, "ignored", out["outcome"])

	tooBig := pad(256<<10 + 1)
	status, out = b.deliverRaw(t, tooBig, secret)
	require.Equal(t, http.StatusRequestEntityTooLarge, status)
	require.Equal(t, "body_too_large", out["code"])
	require.Contains(t, out["detail"], "262144 bytes")

	req, err := http.NewRequest(http.MethodPost, b.server.URL+"/v1/payments", bytes.NewReader(bytes.Repeat([]byte(" "), 64<<10+1)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk_dev_alice_0123456789abcdef")
	req.Header.Set("Idempotency-Key", "big")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, string(data))
	require.Contains(t, string(data), "65536 bytes")
}

// deliverRaw posts payload signed with key now, and returns the status and
// the JSON body (nil when it is not JSON).
func (b *testBundle) deliverRaw(t *testing.T, payload []byte, key string) (int, map[string]any) {
	return b.deliverSigned(t, payload, stripesim.Sign(payload, key, time.Now()))
}

func (b *testBundle) deliverSigned(t *testing.T, payload []byte, signature string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.server.URL+"/v1/stripe/webhooks", bytes.NewReader(payload))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", signature)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	_ = json.Unmarshal(body, &out)
	return resp.StatusCode, out
}

// metric reads one counter's value from /metrics, as text.
func (b *testBundle) metric(t *testing.T, name string) string {
	t.Helper()
	resp, err := http.Get(b.server.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(data), "\n") {
		if value, ok := strings.CutPrefix(line, name+" "); ok {
			return value
		}
	}
	return ""
}
