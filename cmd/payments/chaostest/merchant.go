package chaostest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	paymentsclient "github.com/example/payments/client"
	"github.com/example/payments/internal/webhooktest"
)

// The merchant side of the run (API.md section 7): one HTTP server stands
// for every merchant's endpoint (the path names the endpoint), verifies each
// delivery's Standard Webhooks signature with internal/webhooktest's
// independent implementation (not the service's code), and records what
// arrived. Now and then it fails (500),
// answers too late (past the service's 10 s), or disappears for a few
// seconds (its listener closed, so connections are refused), as a real
// merchant's server does.

// merchantMode is what the receiver does with the next deliveries.
type merchantMode int

const (
	merchantUp merchantMode = iota
	merchantFailing
	merchantSlow
	merchantGone
)

func (m merchantMode) String() string {
	return [...]string{"up", "failing (500)", "slow (past the 10 s timeout)", "gone (connection refused)"}[m]
}

// Arrival is one delivery the receiver got.
type Arrival struct {
	Endpoint  string // the endpoint's name in the run (the URL path's last part)
	WebhookID string // the webhook-id header
	EventID   string // the body's id
	EventType string
	ValidSig  bool
	// SecretUnknown: the receiver did not know the endpoint's secret yet
	// (its registration had committed, but the answer with the secret had
	// not come back to the merchant, lost to a crash and still being
	// retried), so it could not check the signature and refused the
	// delivery, as a merchant must; the sender retries it.
	SecretUnknown bool
	At            time.Time
	Answered      int // the status the receiver answered
	// Acknowledged: answered 2xx in time, so the sender counts it delivered
	// (a slow answer comes after the sender gave up).
	Acknowledged bool
}

// merchant is the receiver.
type merchant struct {
	addr string

	mu       sync.Mutex
	ln       net.Listener
	srv      *http.Server
	mode     merchantMode
	secrets  map[string]string // endpoint name -> its whsec_ secret
	arrivals []Arrival
	// redelivered are the events a merchant asked to redeliver, which may
	// reach endpoints made after them; problems are redeliveries refused.
	redelivered map[string]bool
	problems    []Violation
}

func startMerchant() (*merchant, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	m := &merchant{addr: ln.Addr().String(), secrets: map[string]string{}, redelivered: map[string]bool{}}
	m.serve(ln)
	return m, nil
}

// URL is the address of the endpoint named name.
func (m *merchant) URL(name string) string { return "http://" + m.addr + "/hooks/" + name }

// setSecret gives the receiver an endpoint's secret (whsec_<base64>).
func (m *merchant) setSecret(name, secret string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.secrets[name] = secret
}

func (m *merchant) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(m.receive), ReadHeaderTimeout: 5 * time.Second}
	m.ln, m.srv = ln, srv
	go func() { _ = srv.Serve(ln) }()
}

// setMode switches the receiver; gone closes its listener, and leaving
// gone listens again on the same address.
func (m *merchant) setMode(mode merchantMode) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mode == m.mode {
		return
	}
	if mode == merchantGone {
		_ = m.srv.Close()
	}
	if m.mode == merchantGone {
		// The port was ours a moment ago; retry briefly if the kernel
		// has not let it go yet.
		for range 50 {
			ln, err := net.Listen("tcp", m.addr)
			if err == nil {
				m.serve(ln)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	m.mode = mode
}

func (m *merchant) receive(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	name := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	var event struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}
	_ = json.Unmarshal(body, &event)
	m.mu.Lock()
	mode, key := m.mode, m.secrets[name]
	m.mu.Unlock()
	a := Arrival{Endpoint: name, WebhookID: r.Header.Get("webhook-id"), EventID: event.ID, EventType: event.Type,
		ValidSig: key != "" && webhooktest.Verify(key, r.Header, body, time.Now()) == nil, SecretUnknown: key == "", At: time.Now()}
	switch {
	case a.SecretUnknown:
		a.Answered = http.StatusServiceUnavailable
	case mode == merchantFailing:
		a.Answered = http.StatusInternalServerError
	case mode == merchantSlow:
		time.Sleep(11 * time.Second)
		a.Answered = http.StatusOK // too late: the sender gave up after 10 s
	default:
		a.Answered, a.Acknowledged = http.StatusOK, true
	}
	m.mu.Lock()
	m.arrivals = append(m.arrivals, a)
	m.mu.Unlock()
	w.WriteHeader(a.Answered)
}

// Arrivals is every delivery received so far.
func (m *merchant) Arrivals() []Arrival {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Arrival(nil), m.arrivals...)
}

func (m *merchant) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	_ = m.srv.Close()
}

// troubleMerchant switches the receiver between health and trouble until
// ctx ends, then leaves it up, so that every delivery can succeed before
// the run settles.
func troubleMerchant(done <-chan struct{}, m *merchant, rng *rand.Rand, stats *Stats) {
	defer m.setMode(merchantUp)
	for {
		select {
		case <-done:
			return
		case <-time.After(time.Duration(3+rng.IntN(6)) * time.Second):
		}
		mode := []merchantMode{merchantFailing, merchantFailing, merchantGone, merchantGone, merchantSlow}[rng.IntN(5)]
		m.setMode(mode)
		stats.Add("merchant receiver: "+mode.String(), 1)
		trouble := time.Duration(1+rng.IntN(3)) * time.Second
		if mode == merchantSlow {
			trouble = 500 * time.Millisecond // a few deliveries each hold a worker for 10 s
		}
		select {
		case <-done:
			return
		case <-time.After(trouble):
		}
		m.setMode(merchantUp)
	}
}

// merchantKeyPrefix starts the Idempotency-Keys of the endpoints' creation,
// which the run's clients do not send (and the checker does not look for).
const merchantKeyPrefix = "chaos-endpoint-"

// merchantEndpoints are the endpoints each user registers before the
// clients start: everything, the payment events, and two refund types.
var merchantEndpoints = []struct {
	name    string
	enabled []string
}{
	{"all", []string{"*"}},
	{"payments", []string{"payment.*"}},
	{"refunds", []string{"refund.succeeded", "refund.failed"}},
}

// registerEndpoint creates the endpoint named name for the user of apiKey,
// pointing at the receiver, retrying with one Idempotency-Key until the
// answer is final, and gives the receiver its secret. It returns its id.
func (m *merchant) registerEndpoint(ctx context.Context, base, apiKey, name string, enabled []string) (string, error) {
	ep, err := merchantClient(base, apiKey).CreateWebhookEndpoint(ctx,
		paymentsclient.CreateWebhookEndpointParams{URL: m.URL(name), EnabledEvents: enabled},
		paymentsclient.WithIdempotencyKey(merchantKeyPrefix+name))
	if err != nil {
		return "", fmt.Errorf("chaos: registering endpoint %s: %w", name, err)
	}
	m.setSecret(name, ep.Secret)
	return ep.ID, nil
}

// deleteEndpoint deletes endpoint id of the user of apiKey. A 404 is an
// earlier attempt's success whose answer was lost to a crash.
func deleteEndpoint(ctx context.Context, base, apiKey, id string) error {
	_, err := merchantClient(base, apiKey).DeleteWebhookEndpoint(ctx, id)
	var answer *paymentsclient.Error
	if errors.As(err, &answer) && answer.Status == http.StatusNotFound {
		return nil
	}
	return err
}

// merchantClient is the service's Go client for the merchant's own calls,
// as the user of apiKey: the instances are being crashed meanwhile, so it
// retries (409, 429, 5xx, lost connections) up to 100 times, a few hundred
// milliseconds apart.
func merchantClient(base, apiKey string) *paymentsclient.Client {
	return paymentsclient.New(base, apiKey, paymentsclient.WithHTTPClient(controlClient),
		paymentsclient.WithMaxAttempts(100), paymentsclient.WithBackoff(100*time.Millisecond, 400*time.Millisecond))
}

// redeliverLatest asks the service to redeliver the newest event of the
// user of apiKey (POST /v1/events/{id}/redeliver): every endpoint that
// subscribes to it and exists gets it again, one made since too. Anything
// but 200 is a problem.
func (m *merchant) redeliverLatest(ctx context.Context, base, apiKey string, n int, stats *Stats, logf func(string, ...any)) {
	c := merchantClient(base, apiKey)
	events, err := c.ListEventsPage(ctx, paymentsclient.ListEventsParams{Limit: paymentsclient.Int64(1)})
	if err != nil {
		if ctx.Err() == nil {
			logf("chaos: listing events: %v", err)
		}
		return
	}
	if len(events.Data) == 0 {
		return
	}
	id := events.Data[0].ID
	m.mu.Lock()
	m.redelivered[id] = true // before the request: its deliveries may arrive before its answer
	m.mu.Unlock()
	if _, err := c.RedeliverEvent(ctx, id, paymentsclient.WithIdempotencyKey(fmt.Sprintf("%sredeliver-%d", merchantKeyPrefix, n))); err != nil {
		if ctx.Err() != nil {
			return
		}
		m.mu.Lock()
		m.problems = append(m.problems, Violation{Rule: "merchant-webhook", Key: id, Detail: "redelivery refused: " + err.Error()})
		m.mu.Unlock()
		return
	}
	stats.Add("merchant redeliveries", 1)
}

// Redelivered are the events redelivered during the run.
func (m *merchant) Redelivered() map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.redelivered)
}

func (m *merchant) redeliveryProblems() []Violation {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.problems)
}
