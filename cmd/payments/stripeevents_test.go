package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/dbtest"
)

// `payments stripe-events list --unprocessable` shows the operator the
// signed Stripe events that were kept aside, with why; --json gives each
// body's exact bytes too, also when they are not text.
func TestStripeEvents_listUnprocessable(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(context.Background(), `
		INSERT INTO stripe_events_unprocessable (event_id, event_type, reason, payload, payload_sha256) VALUES
		(NULL, NULL, 'the body is not valid UTF-8', '\xff7b'::bytea, sha256('\xff7b'::bytea)),
		('evt_1', 'payment_intent.succeeded', 'decoding payment_intent.succeeded''s object: bad amount', '{"id":"evt_1"}'::bytea, sha256('{"id":"evt_1"}'::bytea))`)
	require.NoError(t, err)

	run := func(args ...string) (string, string, int) {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(binary, append([]string{"stripe-events", "list"}, args...)...)
		cmd.Env, cmd.Stdout, cmd.Stderr = append(os.Environ(), "DATABASE_URL="+url), &stdout, &stderr
		_ = cmd.Run()
		return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
	}
	stdout, stderr, code := run("--unprocessable")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, `"evt_1"`)
	require.Contains(t, stdout, "bad amount")
	require.Contains(t, stdout, "not valid UTF-8")

	stdout, stderr, code = run("--unprocessable", "--json")
	require.Zero(t, code, stderr)
	var out struct {
		Events []struct {
			EventID       *string `json:"event_id"`
			Reason        string  `json:"reason"`
			Payload       *string `json:"payload"`
			PayloadBase64 string  `json:"payload_base64"`
		} `json:"events"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
	require.Len(t, out.Events, 2)
	require.Equal(t, "evt_1", *out.Events[0].EventID, "newest first")
	require.Equal(t, `{"id":"evt_1"}`, *out.Events[0].Payload)
	require.Nil(t, out.Events[1].EventID)
	require.Nil(t, out.Events[1].Payload, "not text")
	require.Equal(t, "/3s=", out.Events[1].PayloadBase64)

	_, _, code = run()
	require.Equal(t, 2, code, "--unprocessable is the list there is: without it, a usage error")
}
