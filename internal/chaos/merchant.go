package chaos

import (
	"encoding/json"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

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
	At        time.Time
	Answered  int // the status the receiver answered
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
}

func startMerchant() (*merchant, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	m := &merchant{addr: ln.Addr().String(), secrets: map[string]string{}}
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
		ValidSig: key != "" && webhooktest.Verify(key, r.Header, body, time.Now()) == nil, At: time.Now()}
	switch mode {
	case merchantFailing:
		a.Answered = http.StatusInternalServerError
	case merchantSlow:
		time.Sleep(11 * time.Second)
		a.Answered = http.StatusOK // too late: the sender gave up after 10 s
	default:
		a.Answered = http.StatusOK
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
