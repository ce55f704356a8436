package stripeclient_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/example/payments/internal/stripeclient"
)

// stripeMockVersion is the official stripe-mock whose embedded OpenAPI spec
// is Stripe's API version 2023-10-16, the one stripe-go v76 speaks. Bump it
// together with stripe-go.
const stripeMockVersion = "v0.183.0"

// TestContractWithStripeMock sends every request the service makes to the
// official stripe-mock, which validates it against Stripe's published spec.
// stripe-mock keeps no state and answers fixtures, so only one thing is
// asserted: each request shape is accepted. Every payment intent the
// wrapper creates carries error_on_requires_action=true (3-D Secure is a
// decline), so the two creations check that parameter too, with and without
// manual capture; that Stripe then answers a 402 for a card that needs
// authentication is beyond stripe-mock (it answers fixtures) and is the
// simulator's to show.
func TestContractWithStripeMock(t *testing.T) {
	t.Parallel()
	url := startStripeMock(t)
	c := newClient(t, url)
	ctx := context.Background()

	full := stripeclient.PaymentIntentRequest{
		Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_visa",
		Description: "order 42", Metadata: map[string]string{"key_row": "kr_1"},
	}
	manual := stripeclient.PaymentIntentRequest{Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_visa", CaptureManually: true}
	calls := map[string]func() error{
		"create payment intent": func() error { _, err := c.CreatePaymentIntent(ctx, "contract-1", full); return err },
		"create manual":         func() error { _, err := c.CreatePaymentIntent(ctx, "contract-2", manual); return err },
		"capture part":          func() error { _, err := c.CapturePaymentIntent(ctx, "contract-3", "pi_123", 1500); return err },
		"capture all":           func() error { _, err := c.CapturePaymentIntent(ctx, "contract-4", "pi_123", 0); return err },
		"cancel":                func() error { _, err := c.CancelPaymentIntent(ctx, "contract-5", "pi_123"); return err },
		"get payment intent":    func() error { _, err := c.GetPaymentIntent(ctx, "pi_123"); return err },
		"list by metadata": func() error {
			_, err := c.ListPaymentIntentsByMetadata(ctx, time.Unix(1700000000, 0), time.Unix(1700000600, 0), "key_row", `it's "quoted"`)
			return err
		},
		"refund part": func() error {
			_, err := c.CreateRefund(ctx, "contract-6", stripeclient.RefundRequest{
				PaymentIntent: "pi_123", Amount: 500, Reason: "requested_by_customer", Metadata: map[string]string{"key_row": "kr_2"},
			})
			return err
		},
		"refund rest": func() error {
			_, err := c.CreateRefund(ctx, "contract-7", stripeclient.RefundRequest{PaymentIntent: "pi_123"})
			return err
		},
		"get refund": func() error { _, err := c.GetRefund(ctx, "re_123"); return err },
		"list a payment intent's refunds": func() error {
			_, err := c.ListRefunds(ctx, "pi_123")
			return err
		},
	}
	for name, call := range calls {
		require.NoError(t, call(), "stripe-mock %s rejected %q", stripeMockVersion, name)
	}

	// The creations above did carry the parameter the spec accepted.
	require.Equal(t, "true", createIntentForm(t).Get("error_on_requires_action"))

	// The negative control: stripe-mock does reject a shape outside the spec.
	bogus := &stripe.PaymentIntentParams{Amount: stripe.Int64(2000), Currency: stripe.String("usd")}
	bogus.AddExtra("bogus_param", "1")
	_, err := rawStripe(url).PaymentIntents.New(bogus)
	var stripeErr *stripe.Error
	require.ErrorAs(t, err, &stripeErr)
	require.Equal(t, stripe.ErrorTypeInvalidRequest, stripeErr.Type)
	require.Contains(t, stripeErr.Msg, "additional properties are not allowed")
}

// createIntentForm is the form the wrapper's CreatePaymentIntent sends,
// caught by a server that answers a fixture.
func createIntentForm(t *testing.T) url.Values {
	t.Helper()
	var form url.Values
	rec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		form = r.PostForm
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"pi_123","object":"payment_intent","status":"succeeded"}`))
	}))
	defer rec.Close()
	c, err := stripeclient.New(stripeclient.Config{SecretKey: testKey, APIBase: rec.URL})
	require.NoError(t, err)
	_, err = c.CreatePaymentIntent(context.Background(), "contract-param", stripeclient.PaymentIntentRequest{
		Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_visa"})
	require.NoError(t, err)
	return form
}

// rawStripe is a plain stripe-go client, for requests the wrapper never sends.
func rawStripe(url string) *client.API {
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(url),
		MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	return client.New(testKey, &stripe.Backends{API: backend, Connect: backend, Uploads: backend})
}

// startStripeMock runs stripe-mock on two free loopback ports (given both,
// it never binds its default :12112 on all interfaces) and returns its HTTP
// base URL. It skips the test, saying why, when stripe-mock cannot be built.
func startStripeMock(t *testing.T) string {
	t.Helper()
	bin, err := stripeMockBinary()
	if err != nil {
		t.Skipf("skipping the stripe-mock contract test: cannot build stripe-mock %s: %v", stripeMockVersion, err)
	}

	httpAddr, httpsAddr := freeLoopbackAddr(t), freeLoopbackAddr(t)
	logPath := filepath.Join(t.TempDir(), "stripe-mock.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	cmd := exec.Command(bin, "-http-addr", httpAddr, "-https-addr", httpsAddr, "-strict-version-check")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	require.NoError(t, cmd.Start())

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // this process only, by its own handle
		<-exited
		_ = logFile.Close()
	})

	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", httpAddr, 100*time.Millisecond)
		if err == nil {
			_ = conn.Close()
			return "http://" + httpAddr
		}
		select {
		case err := <-exited:
			out, _ := os.ReadFile(logPath)
			t.Fatalf("stripe-mock exited before listening (%v):\n%s", err, out)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(logPath)
			t.Fatalf("stripe-mock did not listen on %s within 20s:\n%s", httpAddr, out)
		}
	}
}

var stripeMock struct {
	once sync.Once
	path string
	err  error
}

// stripeMockBinary returns the pinned stripe-mock, building it from the Go
// module proxy into the user's cache the first time and reusing it after.
func stripeMockBinary() (string, error) {
	stripeMock.once.Do(func() {
		stripeMock.path, stripeMock.err = buildStripeMock()
	})
	return stripeMock.path, stripeMock.err
}

func buildStripeMock() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "payments-tools", "stripe-mock-"+stripeMockVersion)
	bin := filepath.Join(dir, "stripe-mock")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}

	// Build into a private directory and rename, so that concurrent test
	// binaries never see a half-written file.
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("go", "install", "github.com/stripe/stripe-mock@"+stripeMockVersion)
	cmd.Dir = tmp // outside this module: its go.mod must not influence the build
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install: %w\n%s", err, out)
	}
	if err := os.Rename(filepath.Join(tmp, "stripe-mock"), bin); err != nil {
		return "", err
	}
	return bin, nil
}

// freeLoopbackAddr returns a 127.0.0.1 address with a port free right now.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}
