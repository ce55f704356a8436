package client_test

// The client's tests run against the real service: TestMain builds
// cmd/payments and starts `payments dev` (its own PostgreSQL, the Stripe
// simulator, the demo users) on free ports, once for the whole package. The
// faults come from the simulator's control surface (lost responses, dropped
// connections, 500s, delays) and from a transport that loses answers on
// their way back to the client.
//
// The tests do not run in parallel: a simulator fault hits the next
// matching request, whichever test sent it.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/client"
	"github.com/example/payments/internal/openapitest"
)

const (
	aliceKey = "sk_dev_alice_0123456789abcdef"
	bobKey   = "sk_dev_bob_0123456789abcdef"
)

var (
	baseURL string // the API of the payments dev under test
	simURL  string // its Stripe simulator
	// runID makes the keys of this run new: dev's data lives as long as the
	// test binary, and go test -count=2 runs the examples twice in it.
	runID = fmt.Sprint(time.Now().UnixNano())
)

func TestMain(m *testing.M) { os.Exit(runWithDev(m)) }

func runWithDev(m *testing.M) int {
	dir, err := os.MkdirTemp("", "payments-client-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	// As root, dev runs PostgreSQL as the postgres user, which must reach
	// the data dir (MkdirTemp makes it 0700).
	if err := os.Chmod(dir, 0o755); err != nil {
		panic(err)
	}
	binary := filepath.Join(dir, "payments")
	if out, err := exec.Command("go", "build", "-o", binary, "github.com/example/payments/cmd/payments").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building payments: %v\n%s", err, out)
		return 1
	}
	dev := exec.Command(binary, "dev", "--data-dir", filepath.Join(dir, "data"),
		"--addr", "127.0.0.1:0", "--stripesim-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0")
	dev.Env = append(os.Environ(), "DATABASE_URL=", "STRIPE_API_BASE=", "STRIPE_SECRET_KEY=", "PAYMENTS_FAILPOINTS=",
		"PAYMENTS_LOG_LEVEL=warn")
	var devLog bytes.Buffer
	dev.Stderr = &devLog
	stdout, err := dev.StdoutPipe()
	if err != nil {
		panic(err)
	}
	if err := dev.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "starting payments dev: %v\n", err)
		return 1
	}
	defer stopDev(dev)

	found := make(chan struct{})
	go func() {
		apiLine, stripeLine := regexp.MustCompile(`API:\s+(http://\S+)`), regexp.MustCompile(`Stripe:\s+(http://\S+)`)
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			if m := apiLine.FindStringSubmatch(lines.Text()); m != nil {
				baseURL = m[1]
			}
			if m := stripeLine.FindStringSubmatch(lines.Text()); m != nil {
				simURL = m[1]
				close(found)
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case <-found:
	case <-time.After(120 * time.Second):
		fmt.Fprintf(os.Stderr, "payments dev did not start within 120 s:\n%s", devLog.String())
		return 1
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "payments dev's log:\n%s", devLog.String())
	}
	return code
}

func stopDev(dev *exec.Cmd) {
	_ = dev.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = dev.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(45 * time.Second):
		_ = dev.Process.Kill()
		<-done
	}
}

// newClient is a client of alice's whose every exchange is also checked
// against the OpenAPI document: what the client sends must be what the
// document allows, and what it gets what the document promises.
func newClient(t *testing.T, opts ...client.Option) *client.Client {
	t.Helper()
	hc := &http.Client{Timeout: 30 * time.Second, Transport: openapitest.Transport(t, nil)}
	return client.New(baseURL, aliceKey, append([]client.Option{client.WithHTTPClient(hc)}, opts...)...)
}

// key is a key new to this run.
func key(name string) string { return name + "-" + runID }

// attempts records what a client's observer saw.
type attempts struct{ seen []client.Attempt }

func (a *attempts) observe(at client.Attempt) { a.seen = append(a.seen, at) }

func (a *attempts) statuses() []int {
	var s []int
	for _, at := range a.seen {
		s = append(s, at.Status)
	}
	return s
}

// addFault adds a fault to the simulator; the test removes every fault when
// it ends.
func addFault(t *testing.T, fault string) {
	t.Helper()
	resp, err := http.Post(simURL+"/_sim/faults", "application/json", strings.NewReader(fault))
	require.NoError(t, err)
	resp.Body.Close()
	require.Less(t, resp.StatusCode, 300)
	t.Cleanup(func() { clearFaults(t) })
}

func clearFaults(t *testing.T) {
	req, _ := http.NewRequest(http.MethodDelete, simURL+"/_sim/faults", nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
}

// paymentIntentsOf counts the simulator's PaymentIntents made for payment.
func paymentIntentsOf(t *testing.T, payment string) int {
	t.Helper()
	resp, err := http.Get(simURL + "/_sim/objects?type=payment_intent")
	require.NoError(t, err)
	defer resp.Body.Close()
	var objects []struct {
		Metadata map[string]string `json:"metadata"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&objects))
	n := 0
	for _, o := range objects {
		if o.Metadata["payment"] == payment {
			n++
		}
	}
	return n
}

// losingTransport loses the answers to the first lose requests on their
// way back: the service got and executed each request, and the client sees
// a broken connection.
type losingTransport struct {
	next http.RoundTripper
	lose int
}

func (l *losingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	if err != nil || l.lose == 0 {
		return resp, err
	}
	l.lose--
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, fmt.Errorf("test: the answer (%d) was lost on its way back: %w", resp.StatusCode, io.ErrUnexpectedEOF)
}

func visa(amount int64) client.CreatePaymentParams {
	return client.CreatePaymentParams{Amount: amount, Currency: "usd", PaymentMethod: "pm_card_visa"}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
