package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/keyadmin"
)

// keys list and keys show say what is known of a lock: "(locked)" and "a
// process is executing the request" while its holder renews it; once the
// holder is overdue, until when the lock holds and that its holder may
// have died.
func TestKeysText_aLockWhoseHolderIsOverdue(t *testing.T) {
	until := time.Date(2030, 1, 1, 12, 1, 30, 0, time.UTC)
	summary := keyadmin.Summary{User: "alice@example.com", Key: "k", Method: "POST", Path: "/v1/payments",
		RecoveryPoint: "payment_created", Locked: true, LockExpiresAt: &until, SpentStripeSteps: []string{}}

	var out bytes.Buffer
	require.NoError(t, printKeyList(&out, keyadmin.Locked, []keyadmin.Summary{summary}))
	require.Contains(t, out.String(), "payment_created (locked)")
	out.Reset()
	require.NoError(t, printKeyStory(&out, &keyadmin.Story{Summary: summary, Phases: []keyadmin.Phase{}}))
	require.Contains(t, out.String(), "held until 2030-01-01T12:01:30Z: a process is executing the request")

	summary.LockOverdue = true
	out.Reset()
	require.NoError(t, printKeyList(&out, keyadmin.Locked, []keyadmin.Summary{summary}))
	require.Contains(t, out.String(), "payment_created (held until 2030-01-01T12:01:30Z; its holder may have died)")
	out.Reset()
	require.NoError(t, printKeyStory(&out, &keyadmin.Story{Summary: summary, Phases: []keyadmin.Phase{}}))
	require.Contains(t, out.String(), "held until 2030-01-01T12:01:30Z: the process executing the request has not renewed it for over half its lifetime and may have died")
	require.NotContains(t, out.String(), "a process is executing the request")
}
