package stripeclient_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/stripesim"
)

// sent is how one request reached the server: its framing and body.
type sent struct {
	method, path     string
	contentLength    int64
	transferEncoding []string
	body             string
}

// TestCallsSendTheirLengthAndDecodeAsStripeGo holds the client's backend
// (backend.go) to what it replaces in stripe-go: every POST arrives with a
// Content-Length and its whole form, not chunked; every answer decodes to
// exactly what stripe-go's own decoding of the same bytes gives, with the
// answer's headers and bytes in LastResponse.
func TestCallsSendTheirLengthAndDecodeAsStripeGo(t *testing.T) {
	t.Parallel()
	sim := stripesim.New(stripesim.Config{})
	var mu sync.Mutex
	var seen []sent
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		seen = append(seen, sent{r.Method, r.URL.Path, r.ContentLength, r.TransferEncoding, string(body)})
		mu.Unlock()
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		sim.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.Close()
		sim.Close()
	})
	client := newClient(t, srv.URL)
	ctx := context.Background()

	req := payment("pm_card_visa")
	req.CaptureManually = true
	req.Metadata = map[string]string{"key_row": "kr_1"}
	pi, err := client.CreatePaymentIntent(ctx, "length-1", req)
	require.NoError(t, err)
	requireAsStripeGoDecodes(t, pi)
	require.Equal(t, stripe.PaymentIntentStatusRequiresCapture, pi.Status)
	require.Equal(t, "kr_1", pi.Metadata["key_row"])

	captured, err := client.CapturePaymentIntent(ctx, "length-2", pi.ID, 1500)
	require.NoError(t, err)
	requireAsStripeGoDecodes(t, captured)
	require.EqualValues(t, 1500, captured.AmountReceived)

	re, err := client.CreateRefund(ctx, "length-3", stripeclient.RefundRequest{PaymentIntent: pi.ID, Amount: 500})
	require.NoError(t, err)
	requireAsStripeGoDecodes(t, re)
	require.EqualValues(t, 500, re.Amount)

	got, err := client.GetPaymentIntent(ctx, pi.ID)
	require.NoError(t, err)
	requireAsStripeGoDecodes(t, got)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, got.Status)

	// A declined card is still stripe-go's card error, from the same bytes.
	_, err = client.CreatePaymentIntent(ctx, "length-4", payment("pm_card_chargeDeclined"))
	decline, ok := stripeclient.AsDecline(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, "card_declined", decline.Code)
	require.NotEmpty(t, decline.PaymentIntent)

	mu.Lock()
	defer mu.Unlock()
	posts := 0
	for _, s := range seen {
		if s.method != http.MethodPost {
			require.Zero(t, s.contentLength, "%s %s", s.method, s.path)
			continue
		}
		posts++
		require.Empty(t, s.transferEncoding, "%s %s went out chunked", s.method, s.path)
		require.Positive(t, s.contentLength, "%s %s", s.method, s.path)
		require.EqualValues(t, len(s.body), s.contentLength, "%s %s", s.method, s.path)
		require.Contains(t, s.body, "amount", "%s %s", s.method, s.path)
	}
	require.Equal(t, 4, posts)
}

// requireAsStripeGoDecodes checks that obj, decoded by the backend, is what
// stripe-go's own UnmarshalJSON makes of the answer's bytes.
func requireAsStripeGoDecodes[T any, P interface {
	*T
	json.Unmarshaler
	stripe.LastResponseSetter
}](t *testing.T, obj P) {
	t.Helper()
	last := lastResponse(obj)
	require.NotNil(t, last)
	require.Equal(t, http.StatusOK, last.StatusCode)
	require.NotEmpty(t, last.RequestID, "Request-Id header")
	var want T
	require.NoError(t, P(&want).UnmarshalJSON(last.RawJSON))
	P(&want).SetLastResponse(last)
	require.Equal(t, &want, (*T)(obj))
}

// lastResponse is the APIResponse the call set on obj.
func lastResponse(obj any) *stripe.APIResponse {
	switch o := obj.(type) {
	case *stripe.PaymentIntent:
		return o.LastResponse
	case *stripe.Refund:
		return o.LastResponse
	}
	return nil
}
