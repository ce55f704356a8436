package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The receiver of `payments listen`, tested without the API: deliveries are
// signed here by hand, with crypto/hmac, following the Standard Webhooks
// specification, not with the library the receiver verifies with.

const listenSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // base64 of 24 bytes

var listenClock = time.Date(2025, 11, 22, 9, 30, 0, 0, time.UTC)

// signedDelivery is a POST as the service sends it to an endpoint.
func signedDelivery(t *testing.T, secret, id string, ts time.Time, body string) *http.Request {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	require.NoError(t, err)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + strconv.FormatInt(ts.Unix(), 10) + "." + body))
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	return req
}

func eventBody(id, typ string) string {
	return `{"id":"` + id + `","object":"event","type":"` + typ + `","data":{"object":{"id":"pay_1"}},"created":1763800000}`
}

func newTestReceiver(t *testing.T, forwardTo string) (*receiver, *bytes.Buffer) {
	t.Helper()
	var out bytes.Buffer
	r, err := newReceiver(listenSecret, forwardTo, &out, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	r.now = func() time.Time { return listenClock }
	return r, &out
}

func TestReceiver_printsEachDeliveryWithItsVerification(t *testing.T) {
	t.Parallel()
	r, out := newTestReceiver(t, "")

	w := httptest.NewRecorder()
	r.ServeHTTP(w, signedDelivery(t, listenSecret, "evt_1", time.Now(), eventBody("evt_1", "payment.succeeded")))
	require.Equal(t, http.StatusOK, w.Code)

	// Signed with another secret, and tampered with after signing: both
	// are printed as INVALID, and still acknowledged (the user reads the
	// line; the service has nothing to retry).
	w = httptest.NewRecorder()
	r.ServeHTTP(w, signedDelivery(t, "whsec_b3RoZXIgc2VjcmV0", "evt_2", time.Now(), eventBody("evt_2", "refund.failed")))
	require.Equal(t, http.StatusOK, w.Code)
	tampered := signedDelivery(t, listenSecret, "evt_3", time.Now(), eventBody("evt_3", "payment.failed"))
	tampered.Body = io.NopCloser(strings.NewReader(eventBody("evt_3", "payment.succeeded")))
	r.ServeHTTP(httptest.NewRecorder(), tampered)
	// A replayed old delivery fails the specification's timestamp check.
	r.ServeHTTP(httptest.NewRecorder(), signedDelivery(t, listenSecret, "evt_4", time.Now().Add(-time.Hour), eventBody("evt_4", "payment.canceled")))

	require.Equal(t, "2025-11-22T09:30:00Z payment.succeeded evt_1 signature ok\n"+
		"2025-11-22T09:30:00Z refund.failed evt_2 signature INVALID\n"+
		"2025-11-22T09:30:00Z payment.succeeded evt_3 signature INVALID\n"+
		"2025-11-22T09:30:00Z payment.canceled evt_4 signature INVALID\n", out.String())
}

func TestReceiver_forwardsBodyAndWebhookHeadersUnchanged(t *testing.T) {
	t.Parallel()
	type forwarded struct {
		body    string
		headers http.Header
	}
	var mu sync.Mutex
	var got []forwarded
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, forwarded{string(body), r.Header.Clone()})
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(app.Close)
	r, out := newTestReceiver(t, app.URL+"/webhooks")

	delivery := signedDelivery(t, listenSecret, "evt_1", time.Now(), eventBody("evt_1", "payment.succeeded"))
	w := httptest.NewRecorder()
	r.ServeHTTP(w, delivery)

	require.Equal(t, http.StatusAccepted, w.Code, "the service sees the app's answer")
	require.Equal(t, "2025-11-22T09:30:00Z payment.succeeded evt_1 signature ok -> forwarded 202\n", out.String())
	require.Len(t, got, 1)
	require.Equal(t, eventBody("evt_1", "payment.succeeded"), got[0].body)
	for _, h := range []string{"webhook-id", "webhook-timestamp", "webhook-signature", "Content-Type"} {
		require.Equal(t, delivery.Header.Get(h), got[0].headers.Get(h), h)
	}
	// So the app can verify the forwarded delivery with the printed secret.
	var event struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(got[0].body), &event))
	require.Equal(t, "evt_1", event.ID)
}

func TestReceiver_answers502WhenTheForwardFails(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedURL := "http://" + ln.Addr().String() + "/webhooks"
	require.NoError(t, ln.Close()) // nothing listens there any more
	r, out := newTestReceiver(t, closedURL)

	w := httptest.NewRecorder()
	r.ServeHTTP(w, signedDelivery(t, listenSecret, "evt_1", time.Now(), eventBody("evt_1", "payment.succeeded")))
	require.Equal(t, http.StatusBadGateway, w.Code, "the service retries it later")
	require.Contains(t, out.String(), "payment.succeeded evt_1 signature ok -> forward failed: ")
}

// Registration retries like a good client: a network error, a 409 and a 503
// are tried again, always with the one Idempotency-Key made for it, so the
// API creates one endpoint however many tries it takes.
func TestRegisterEndpoint_retriesWithOneIdempotencyKey(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys, bodies []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		bodies = append(bodies, string(body))
		try := len(keys)
		mu.Unlock()
		assert.Equal(t, "/v1/webhook_endpoints", r.URL.Path)
		assert.Equal(t, "Bearer sk_test_key", r.Header.Get("Authorization"))
		switch try {
		case 1: // the connection drops before an answer
			conn, _, err := w.(http.Hijacker).Hijack()
			assert.NoError(t, err)
			conn.Close()
		case 2:
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusConflict)
		case 3:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":"we_1","object":"webhook_endpoint","url":"http://127.0.0.1:1/","enabled_events":["*"],"status":"enabled","secret":"whsec_abc","created":1}`)
		}
	}))
	t.Cleanup(api.Close)

	c := &apiClient{base: api.URL, key: "sk_test_key", http: api.Client(), log: slog.New(slog.DiscardHandler)}
	endpoint, err := c.createEndpoint(t.Context(), "http://127.0.0.1:1/", []string{"payment.*", "refund.failed"})
	require.NoError(t, err)
	require.Equal(t, "we_1", endpoint.ID)
	require.Equal(t, "whsec_abc", endpoint.Secret)

	require.Len(t, keys, 4)
	require.NotEmpty(t, keys[0])
	for i := range keys {
		require.Equal(t, keys[0], keys[i])
		require.JSONEq(t, `{"url":"http://127.0.0.1:1/","enabled_events":["payment.*","refund.failed"],"description":"payments listen"}`, bodies[i])
	}
}

func TestRegisterEndpoint_aFinalRefusalIsNotRetried(t *testing.T) {
	t.Parallel()
	var tries atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tries.Add(1)
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"status":401,"code":"unauthorized","title":"Unauthorized","detail":"unknown API key"}`)
	}))
	t.Cleanup(api.Close)

	c := &apiClient{base: api.URL, key: "sk_wrong", http: api.Client(), log: slog.New(slog.DiscardHandler)}
	_, err := c.createEndpoint(t.Context(), "http://127.0.0.1:1/", []string{"*"})
	require.ErrorContains(t, err, "401")
	require.ErrorContains(t, err, "unknown API key")
	require.EqualValues(t, 1, tries.Load())
}

// A wrong --api: nothing answers there. listen used to retry for a minute,
// printing JSON lines with the wait in nanoseconds; it says what it does in
// words, gives up once nothing has answered for unreachableDeadline, and
// says what to check.
func TestRegisterEndpoint_givesUpOnAnAddressWhereNothingAnswers(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now

	var progress bytes.Buffer
	c := &apiClient{base: "http://" + addr, key: "sk_test_key", http: &http.Client{}, log: slog.New(slog.DiscardHandler),
		progress: &progress, unreachableFor: 500 * time.Millisecond}
	start := time.Now()
	_, err = c.createEndpoint(t.Context(), "http://127.0.0.1:1/", []string{"*"})
	require.Error(t, err)
	require.Less(t, time.Since(start), 10*time.Second)
	require.Contains(t, err.Error(), "nothing answers at http://"+addr)
	require.Contains(t, err.Error(), "--api")
	lines := progress.String()
	require.Contains(t, lines, "cannot reach http://"+addr)
	require.Regexp(t, `trying again in [0-9.]+m?s\n`, lines, "durations in words")
	require.NotContains(t, lines, `"wait"`)
	require.NotContains(t, lines, "{")
}

// payments serve refuses an endpoint on this machine unless
// PAYMENTS_WEBHOOK_ALLOW_PRIVATE=true; listen names the setting.
func TestRegisterEndpoint_aLoopbackRefusalNamesTheSetting(t *testing.T) {
	t.Parallel()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"status":400,"code":"validation_failed","title":"Bad Request",`+
			`"detail":"url is refused: invalid webhook url: url's host 127.0.0.1 is a loopback address; webhooks are delivered only to public addresses."}`)
	}))
	t.Cleanup(api.Close)
	c := &apiClient{base: api.URL, key: "sk_test_key", http: api.Client(), log: slog.New(slog.DiscardHandler)}
	_, err := c.createEndpoint(t.Context(), "http://127.0.0.1:1/", []string{"*"})
	require.ErrorContains(t, err, "loopback address")
	require.ErrorContains(t, err, "PAYMENTS_WEBHOOK_ALLOW_PRIVATE=true")
}
