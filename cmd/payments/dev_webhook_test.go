package main_test

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var webhookApplied = regexp.MustCompile(`"msg":"stripe webhook".*"type":"(payment_intent.succeeded)","outcome":"(?:applied|no_change)"`)

func TestDev_theSimulatorsWebhooksReachTheService(t *testing.T) {
	t.Parallel()
	dev, base := startDev(t, filepath.Join(worldReachableDir(t), "data"))

	status, body, err := createPayment(t, base, "webhook-demo")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(body))
	dev.waitFor(t, &dev.stderr, webhookApplied)

	// The flow and the webhook both learned of the payment; the merchant
	// hears of it once.
	var events struct {
		Data []struct{ Type string } `json:"data"`
	}
	require.Eventually(t, func() bool {
		code, body := get(t, base+"/v1/events", aliceKey)
		require.Equal(t, http.StatusOK, code)
		require.NoError(t, json.Unmarshal([]byte(body), &events))
		return len(events.Data) > 0
	}, 20*time.Second, 50*time.Millisecond)
	time.Sleep(500 * time.Millisecond) // a duplicate, if there were one, would be written by now
	code, out := get(t, base+"/v1/events", aliceKey)
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal([]byte(out), &events))
	require.Len(t, events.Data, 1)
	require.Equal(t, "payment.succeeded", events.Data[0].Type)
}
