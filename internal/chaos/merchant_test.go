package chaos

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The receiver's verifier against the Standard Webhooks specification's
// published example (its README's secret, message and signature), so that
// it checks the service against the specification, not against itself.
func TestVerifyStandardWebhook_theSpecificationsExample(t *testing.T) {
	t.Parallel()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_"))
	require.NoError(t, err)
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	body := []byte(`{"test": 2432232314}`)
	require.NoError(t, verifyStandardWebhook(key, h, body))

	h.Set("webhook-signature", "v1a,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= v1,AAAA")
	require.Error(t, verifyStandardWebhook(key, h, body), "no v1 signature that matches")
	h.Set("webhook-signature", "v1,bm9wZQ== v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	require.NoError(t, verifyStandardWebhook(key, h, body), "any of several signatures")
	require.Error(t, verifyStandardWebhook(key, h, []byte(`{"test": 2432232315}`)), "another body")
}
