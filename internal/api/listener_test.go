package api_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/api"
)

// rawExchange sends request as bytes on a new connection to srv and reads
// the answer.
func rawExchange(t *testing.T, srv *httptest.Server, request string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	go func() { _, _ = io.WriteString(conn, request) }() // the server may answer before it has read it all
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

// What net/http answers itself, before any handler runs, is problem+json
// like every other error: header fields over its 1 MiB limit (431, which
// used to come as text/plain), a request it cannot parse, a transfer coding
// it does not know (501 from net/http: no input gets a 5xx, docs/API.md
// section 2).
func TestListener_answersOfNetHTTPItselfAreProblems(t *testing.T) {
	t.Parallel()
	handled := false
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled = true
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Listener = api.Listener(srv.Listener)
	srv.Start()
	t.Cleanup(srv.Close)

	for _, tc := range []struct {
		name, request string
		status        int
		detail        string
	}{
		{"1.1 MB header", "GET /v1/payments HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 1100*1024) + "\r\n\r\n",
			http.StatusRequestHeaderFieldsTooLarge, "header"},
		{"garbage", "NOT HTTP AT ALL\r\n\r\n", http.StatusBadRequest, "could not be read as HTTP"},
		{"no host", "GET / HTTP/1.1\r\n\r\n", http.StatusBadRequest, "Host"},
		{"unknown transfer coding", "POST /v1/payments HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: rot13\r\n\r\n",
			http.StatusBadRequest, "transfer encoding"},
	} {
		resp, body := rawExchange(t, srv, tc.request)
		require.Equal(t, tc.status, resp.StatusCode, "%s: %s", tc.name, body)
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"), tc.name)
		var p struct {
			Status       int
			Code, Detail string
		}
		require.NoError(t, json.Unmarshal(body, &p), "%s: %s", tc.name, body)
		require.Equal(t, tc.status, p.Status, tc.name)
		require.Equal(t, "validation_failed", p.Code, tc.name)
		require.Contains(t, p.Detail, tc.detail, tc.name)
	}
	require.False(t, handled)

	// Everything else is the handler's, untouched.
	resp, body := rawExchange(t, srv, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	require.Equal(t, http.StatusNoContent, resp.StatusCode, string(body))
}

// docs/API.md section 2: a request body must be JSON, which is UTF-8 (RFC
// 8259 section 8.1). A Content-Type naming another charset used to be read
// as UTF-8 all the same; it is 415 now.
func TestContentType_aCharsetOtherThanUTF8Is415(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const body = `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`
	for i, contentType := range []string{"application/json; charset=iso-8859-1", "application/json; charset=utf-16", "application/json;charset=latin1"} {
		resp, data := b.do(t, http.MethodPost, pathPayments, aliceKey, strings.NewReader(body),
			http.Header{"Content-Type": {contentType}, "Idempotency-Key": {"charset-" + string(rune('a'+i))}})
		requireProblem(t, resp, data, http.StatusUnsupportedMediaType, "unsupported_media_type")
	}
	for i, contentType := range []string{"application/json; charset=utf-8", "application/json; charset=UTF-8", "application/json"} {
		resp, data := b.do(t, http.MethodPost, pathPayments, aliceKey, strings.NewReader(body),
			http.Header{"Content-Type": {contentType}, "Idempotency-Key": {"utf8-" + string(rune('a'+i))}})
		require.Equal(t, http.StatusCreated, resp.StatusCode, "%s: %s", contentType, data)
	}
}
