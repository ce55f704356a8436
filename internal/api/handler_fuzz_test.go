package api_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/openapitest"
)

// fuzzMethods are the methods FuzzHandler picks from.
var fuzzMethods = []string{http.MethodGet, http.MethodPost, http.MethodHead, http.MethodDelete, http.MethodPut}

// FuzzHandler sends arbitrary requests through the whole API (router,
// authentication with a demo user's real key, decoding, the flows, a real
// database, the Stripe simulator over HTTP): a method from fuzzMethods, a
// path, a query, an Idempotency-Key, a Content-Type and a body. No input may
// get a 5xx, and every 4xx is a problem+json with a code.
//
// The request is parsed from its wire form by net/http, as the server would:
// what it cannot parse the server answers itself, before the API. In paths,
// queries and bodies, {authorised}, {captured} and {refund} stand for the ids
// of a payment awaiting capture, a captured payment and a refund of it, made
// when the target starts, so that the fuzzer reaches the flows behind them.
func FuzzHandler(f *testing.F) {
	b := setup(f)
	ids := map[string]string{}
	for name, body := range map[string]string{
		"authorised": `{"amount":5000,"currency":"usd","payment_method":"pm_card_visa","capture":false}`,
		"captured":   `{"amount":5000,"currency":"usd","payment_method":"pm_card_visa"}`,
	} {
		resp, data, err := b.send(jsonRequest{apiKey: aliceKey, path: pathPayments, idemKey: "fuzz-" + name, body: body})
		require.NoError(f, err)
		require.Equal(f, http.StatusCreated, resp.StatusCode, string(data))
		var p struct{ ID string }
		require.NoError(f, json.Unmarshal(data, &p))
		ids["{"+name+"}"] = p.ID
	}
	resp, data, err := b.send(jsonRequest{apiKey: aliceKey, path: pathRefunds, idemKey: "fuzz-refund",
		body: fmt.Sprintf(`{"payment":%q,"amount":100}`, ids["{captured}"])})
	require.NoError(f, err)
	require.Equal(f, http.StatusCreated, resp.StatusCode, string(data))
	var re struct{ ID string }
	require.NoError(f, json.Unmarshal(data, &re))
	ids["{refund}"] = re.ID
	withIDs := func(s string) string {
		for placeholder, id := range ids {
			s = strings.ReplaceAll(s, placeholder, id)
		}
		return s
	}

	const (
		get, post, head, del, put = 0, 1, 2, 3, 4
		jsonType                  = "application/json"
		visa                      = `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`
	)
	for _, seed := range []struct {
		method             byte
		path, query        string
		idemKey, mediaType string
		body               string
	}{
		// Valid requests.
		{post, "/v1/payments", "", "seed-1", jsonType, visa},
		{post, "/v1/payments", "", "seed-2", jsonType, `{"amount":3100,"currency":"eur","payment_method":"pm_card_mastercard","capture":false,"description":"d","metadata":{"order":"1"}}`},
		{post, "/v1/payments", "", "seed-3", jsonType, `{"amount":2000,"currency":"usd","payment_method":"pm_card_chargeDeclined"}`},
		{post, "/v1/payments/{authorised}/capture", "", "seed-4", jsonType, `{"amount":1000}`},
		{post, "/v1/payments/{authorised}/cancel", "", "seed-5", "", ""},
		{post, "/v1/refunds", "", "seed-6", jsonType, `{"payment":"{captured}","amount":50,"reason":"duplicate"}`},
		{get, "/v1/payments/{captured}", "", "", "", ""},
		{get, "/v1/payments", "limit=2&starting_after={captured}", "", "", ""},
		{get, "/v1/refunds/{refund}", "", "", "", ""},
		{get, "/v1/events", "limit=100", "", "", ""},
		{get, "/v1/idempotency_keys/fuzz-captured", "", "", "", ""},
		{get, "/healthz", "", "", "", ""},
		{head, "/v1/payments", "", "", "", ""},
		{del, "/v1/payments/{captured}", "", "", "", ""},
		{put, "/v1/refunds", "", "seed-7", jsonType, `{}`},
		{post, "/v1/stripe/webhooks", "", "", jsonType, `{"id":"evt_1","type":"charge.refunded"}`},
		// Issue 14, items 3 and 4.
		{post, "/v1/payments", "", "seed-8", jsonType, `{"amount":100,"AMOUNT":5000,"currency":"usd","payment_method":"pm_card_visa"}`},
		{post, "/v1/payments", "", "seed-8", jsonType, `{"AMOUNT":5000,"amount":100,"currency":"usd","payment_method":"pm_card_visa"}`},
		{post, "/v1/payments", "", "seed-9", jsonType, `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","description":"a\u0000b"}`},
		{post, "/v1/payments", "", "seed-10", jsonType, "{\"amount\":2000,\"currency\":\"usd\",\"payment_method\":\"pm_card_visa\",\"description\":\"a\xffb\"}"},
		{post, "/v1/payments", "", "seed-11", jsonType, `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","metadata":{"\ud800":"x","a":"1","a":"2"}}`},
		{post, "/v1/refunds", "", "seed-12", jsonType, `{"payment":"pay_\u0000"}`},
		{post, "/v1/payments/pay_%00/capture", "", "seed-13", "", ""},
		{get, "/v1/payments/pay_%00", "", "", "", ""},
		{get, "/v1/refunds/re_%ff", "", "", "", ""},
		{get, "/v1/idempotency_keys/a%00b", "", "", "", ""},
		{get, "/v1/payments", "starting_after=%00", "", "", ""},
		{get, "/v1/events", "starting_after=%ff", "", "", ""},
		// Webhooks to merchants (API.md section 7).
		{post, "/v1/webhook_endpoints", "", "seed-14", jsonType, `{"url":"https://example.com/hooks","enabled_events":["refund.*"],"description":"d"}`},
		{post, "/v1/webhook_endpoints", "", "seed-15", jsonType, "{\"url\":\"https://example.com/a\u0000b\",\"enabled_events\":[\"*\",\"\xff\"]}"},
		{get, "/v1/webhook_endpoints", "limit=1&starting_after=we_%00", "", "", ""},
		{del, "/v1/webhook_endpoints/we_%ff", "", "", "", ""},
		{get, "/v1/events", "type=refund.failed", "", "", ""},
		{get, "/v1/events/evt_%00/deliveries", "", "", "", ""},
		{post, "/v1/events/evt_%ff/redeliver", "", "seed-16", "", ""},
	} {
		f.Add(seed.method, seed.path, seed.query, seed.idemKey, seed.mediaType, []byte(seed.body))
	}

	f.Fuzz(func(t *testing.T, method byte, path, query, idemKey, mediaType string, body []byte) {
		// Each input's exchange is checked against the OpenAPI document too:
		// the request may be anything, but the answer must be one it lists.
		handler := openapitest.Handler(t, b.handler)
		var raw bytes.Buffer
		target := withIDs(path)
		if !strings.HasPrefix(target, "/") {
			target = "/" + target
		}
		if query != "" {
			target += "?" + withIDs(query)
		}
		fmt.Fprintf(&raw, "%s %s HTTP/1.1\r\nHost: payments.test\r\nAuthorization: Bearer %s\r\n",
			fuzzMethods[int(method)%len(fuzzMethods)], target, aliceKey)
		if idemKey != "" {
			fmt.Fprintf(&raw, "Idempotency-Key: %s\r\n", idemKey)
		}
		if mediaType != "" {
			fmt.Fprintf(&raw, "Content-Type: %s\r\n", mediaType)
		}
		body = []byte(withIDs(string(body)))
		fmt.Fprintf(&raw, "Content-Length: %d\r\n\r\n", len(body))
		raw.Write(body)
		req, err := http.ReadRequest(bufio.NewReader(&raw))
		if err != nil {
			return // net/http answers 400 itself, before any handler
		}
		req.RemoteAddr = "192.0.2.1:1234"

		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s: %d %s", req.Method, req.RequestURI, rec.Code, rec.Body)
		}
		if rec.Code >= 400 {
			require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"), "%s %s: %d %s", req.Method, req.RequestURI, rec.Code, rec.Body)
			var p struct{ Code string }
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), "%s %s: %s", req.Method, req.RequestURI, rec.Body)
			require.NotEmpty(t, p.Code, "%s %s: %s", req.Method, req.RequestURI, rec.Body)
		}
	})
}
