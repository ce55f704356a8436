package chaostest

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// webhookRelay stands where Stripe's webhook endpoint points: it hands each
// signed event to an API instance that is up (trying the other when one is
// down), as a load balancer would, and delivers a share of the events a
// second time, at about the same moment, to a random instance, as Stripe
// may; and drops a share of them (acknowledged to the simulator, sent to no
// instance), as a webhook Stripe gave up on.
type webhookRelay struct {
	url       string
	srv       *http.Server
	targets   func() []string
	dupShare  float64
	dropShare float64
	client    *http.Client

	mu   sync.Mutex
	rng  *rand.Rand
	seen map[string]bool // events some instance acknowledged

	delivered, duplicates, dropped, failed atomic.Int64
	lastActivity                           atomic.Int64 // unix nanoseconds
	lastFailed                             atomic.Bool  // the latest event was not acknowledged
	inFlight                               sync.WaitGroup
}

func startWebhookRelay(dupShare, dropShare float64, seed uint64, targets func() []string) (*webhookRelay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &webhookRelay{
		url: "http://" + ln.Addr().String(), targets: targets, dupShare: dupShare, dropShare: dropShare,
		client: &http.Client{Timeout: 10 * time.Second},
		rng:    rand.New(rand.NewPCG(seed, 0x77656268)), seen: map[string]bool{},
	}
	r.lastActivity.Store(time.Now().UnixNano())
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *webhookRelay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.lastActivity.Store(time.Now().UnixNano())
	var event struct{ ID string }
	_ = json.Unmarshal(body, &event)
	targets := r.targets()
	if len(targets) == 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	r.mu.Lock()
	if r.rng.Float64() < r.dropShare {
		r.seen[event.ID] = true // acknowledged: the simulator sends it no more
		r.mu.Unlock()
		r.dropped.Add(1)
		r.lastFailed.Store(false)
		w.WriteHeader(http.StatusOK)
		return
	}
	r.rng.Shuffle(len(targets), func(i, j int) { targets[i], targets[j] = targets[j], targets[i] })
	duplicate := r.rng.Float64() < r.dupShare
	dupTarget := targets[r.rng.IntN(len(targets))]
	dupDelay := time.Duration(r.rng.IntN(50)) * time.Millisecond
	r.mu.Unlock()

	if duplicate {
		r.duplicates.Add(1)
		r.inFlight.Add(1)
		go func() {
			defer r.inFlight.Done()
			time.Sleep(dupDelay)
			r.post(dupTarget, req.Header, body)
		}()
	}
	for _, target := range targets {
		if status := r.post(target, req.Header, body); status/100 == 2 {
			r.lastActivity.Store(time.Now().UnixNano())
			r.lastFailed.Store(false)
			r.delivered.Add(1)
			r.mu.Lock()
			r.seen[event.ID] = true
			r.mu.Unlock()
			w.WriteHeader(status)
			return
		}
	}
	r.lastActivity.Store(time.Now().UnixNano())
	r.lastFailed.Store(true)
	r.failed.Add(1)
	w.WriteHeader(http.StatusBadGateway) // the simulator retries with backoff
}

// post forwards an event to one instance; 0 when it could not be reached.
func (r *webhookRelay) post(target string, h http.Header, body []byte) int {
	req, err := http.NewRequest(http.MethodPost, target+"/v1/stripe/webhooks", bytes.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", h.Get("Content-Type"))
	req.Header.Set("Stripe-Signature", h.Get("Stripe-Signature"))
	resp, err := r.client.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// drained tells whether the simulator has no event left to deliver. It
// delivers one event at a time and the next one as soon as the last was
// acknowledged, so a relay idle for a second after an acknowledgement has
// seen them all; after a failure the simulator retries within 10 s, or
// gives up on the event after about 13 s in all.
func (r *webhookRelay) drained() bool {
	idle := time.Since(time.Unix(0, r.lastActivity.Load()))
	return (!r.lastFailed.Load() && idle > time.Second) || idle > webhookQuiet
}

// unacknowledged counts the events no instance acknowledged.
func (r *webhookRelay) unacknowledged(events []SimEvent) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range events {
		if !r.seen[e.ID] {
			n++
		}
	}
	return n
}

func (r *webhookRelay) close() {
	_ = r.srv.Close()
	r.inFlight.Wait()
}
