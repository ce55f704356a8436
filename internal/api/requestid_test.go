package api_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/api"
)

// lockedBuffer is a log's destination written by the server's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Issue 42, item 7: a client's X-Request-Id was trusted and logged as sent,
// up to about a megabyte (three requests grew the log by 3 MB), so ids
// could be spoofed and the log flooded. Now an id is taken only as 1 to 128
// visible ASCII characters (%x21-7E); anything else gets a new id made by
// the service, and the one sent is neither echoed nor logged.
func TestRequestID_onlyShortVisibleASCIIIsTaken(t *testing.T) {
	t.Parallel()
	var logs lockedBuffer
	b := setup(t, setupOpts{logger: slog.New(slog.NewJSONHandler(&logs, nil))})

	send := func(ids ...string) *http.Response {
		t.Helper()
		header := http.Header{}
		for _, id := range ids {
			header.Add("X-Request-Id", id)
		}
		resp, _ := b.do(t, http.MethodGet, "/healthz", "", nil, header)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return resp
	}

	longest := strings.Repeat("r", api.MaxRequestIDLen)
	for _, id := range []string{"a", "req_0123-ABC.xyz:42/~!", longest, "!\"#$%&'()*+,-./~"} {
		resp := send(id)
		require.Equal(t, id, resp.Header.Get("X-Request-Id"), "a valid id is kept")
		require.Contains(t, logs.String(), `"request_id":`+jsonString(id), "and logged")
	}

	marker := "zq" // in none of the ids the service makes
	for _, ids := range [][]string{
		{longest + "r"},                  // 129 characters
		{strings.Repeat(marker, 50_000)}, // 100 kB
		{"has space" + marker},           // a space is not visible
		{"tab\tinside" + marker},         // nor a tab
		{"caf\u00e9" + marker},           // nor beyond ASCII
		{"one" + marker, "two" + marker}, // two ids are none
	} {
		resp := send(ids...)
		got := resp.Header.Get("X-Request-Id")
		require.NotEmpty(t, got, "%q: the service made an id", ids)
		require.NotContains(t, got, marker)
		require.LessOrEqual(t, len(got), api.MaxRequestIDLen)
	}
	resp := send("")
	require.NotEmpty(t, resp.Header.Get("X-Request-Id"), "an empty id is none: the service makes one")
	require.NotContains(t, logs.String(), marker, "a refused id is never logged")
	require.Less(t, len(logs.String()), 64<<10, "the log did not grow by what was sent")
}

func jsonString(s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSpace(buf.String())
}
