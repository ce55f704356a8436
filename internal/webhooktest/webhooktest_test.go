package webhooktest_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/webhooktest"
)

// Verify against the Standard Webhooks specification's published example
// (its README's secret, message and signature), so that the tests check the
// service against the specification, not against the service.
func TestVerify_theSpecificationsExample(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	at := time.Unix(1614265330, 0)
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	body := []byte(`{"test": 2432232314}`)
	require.NoError(t, webhooktest.Verify(secret, h, body, at))

	require.ErrorIs(t, webhooktest.Verify(secret, h, body, at.Add(webhooktest.Tolerance+time.Second)), webhooktest.ErrTimestamp)
	require.ErrorIs(t, webhooktest.Verify(secret, h, []byte(`{"test": 2432232315}`), at), webhooktest.ErrSignature, "another body")
	h.Set("webhook-signature", "v1a,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= v1,AAAA")
	require.ErrorIs(t, webhooktest.Verify(secret, h, body, at), webhooktest.ErrSignature, "no v1 signature that matches")
	h.Set("webhook-signature", "v1,bm9wZQ== v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	require.NoError(t, webhooktest.Verify(secret, h, body, at), "any of several signatures")
	h.Del("webhook-id")
	require.ErrorIs(t, webhooktest.Verify(secret, h, body, at), webhooktest.ErrMissingHeaders)
}
