package main_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	listenReady     = regexp.MustCompile(`Ready: webhook endpoint (we_\S+) `)
	listenDelivered = regexp.MustCompile(`(?m)^\S+ payment\.succeeded (evt_\S+) signature ok$`)
	listenForwarded = regexp.MustCompile(`(?m)^\S+ payment\.succeeded (evt_\S+) signature ok -> forwarded 200$`)
	listenDeleted   = regexp.MustCompile(`Deleted webhook endpoint (we_\S+)`)
)

// Issue 16: `payments listen` against `payments dev`, as the README's tour
// uses it. Two listeners, one printing only and one forwarding to an app,
// both get the payment's event, signed with their own endpoint's secret;
// on SIGTERM each deletes its endpoint and exits 0.
func TestListen_printsVerifiedDeliveriesForwardsThemAndDeletesItsEndpoint(t *testing.T) {
	t.Parallel()
	_, base := startDev(t, filepath.Join(worldReachableDir(t), "data"))

	type delivery struct {
		body    []byte
		headers http.Header
	}
	forwarded := make(chan delivery, 10)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		forwarded <- delivery{body, r.Header.Clone()}
	}))
	t.Cleanup(app.Close)

	// A wrong key is a final answer: listen says so and exits at once,
	// without retrying for a minute.
	refused := startProc(t, nil, "listen", "--api", base, "--api-key", "sk_dev_nobody_0123456789abcdef")
	select {
	case <-refused.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("listen kept running with a key the API refuses")
	}
	require.Equal(t, 1, refused.cmd.ProcessState.ExitCode())
	require.Contains(t, refused.output(&refused.stderr), "401")

	printing := startProc(t, nil, "listen", "--api", base) // alice's key by default
	forwarding := startProc(t, nil, "listen", "--api", base, "--api-key", aliceKey, "--events", "payment.*",
		"--forward-to", app.URL+"/webhooks")
	printingEndpoint := printing.waitFor(t, &printing.stdout, listenReady)
	forwardingEndpoint := forwarding.waitFor(t, &forwarding.stdout, listenReady)
	require.NotEqual(t, printingEndpoint, forwardingEndpoint)

	status, body, err := createPayment(t, base, "listen-demo")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(body))
	var payment struct{ ID string }
	require.NoError(t, json.Unmarshal(body, &payment))

	eventID := printing.waitFor(t, &printing.stdout, listenDelivered)
	require.Equal(t, eventID, forwarding.waitFor(t, &forwarding.stdout, listenForwarded), "one event, sent to both endpoints")
	select {
	case d := <-forwarded:
		var event struct {
			ID, Type string
			Data     struct{ Object struct{ ID string } }
		}
		require.NoError(t, json.Unmarshal(d.body, &event), "%s", d.body)
		require.Equal(t, eventID, event.ID)
		require.Equal(t, "payment.succeeded", event.Type)
		require.Equal(t, payment.ID, event.Data.Object.ID)
		require.Equal(t, eventID, d.headers.Get("webhook-id"))
		require.NotEmpty(t, d.headers.Get("webhook-timestamp"))
		require.Regexp(t, `^v1,`, d.headers.Get("webhook-signature"))
	case <-time.After(30 * time.Second):
		t.Fatal("nothing was forwarded to the app")
	}

	for _, l := range []struct {
		proc     *proc
		endpoint string
	}{{printing, printingEndpoint}, {forwarding, forwardingEndpoint}} {
		require.Zero(t, l.proc.signalAndWait(t, syscall.SIGTERM))
		require.Equal(t, l.endpoint, l.proc.waitFor(t, &l.proc.stdout, listenDeleted))
		status, body := get(t, base+"/v1/webhook_endpoints/"+l.endpoint, aliceKey)
		require.Equal(t, http.StatusNotFound, status, "the endpoint is gone: %s", body)
	}
}
