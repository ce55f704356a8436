// Package webhooktest is a merchant's webhook endpoint for tests: an HTTP
// server that receives the service's deliveries, verifies each one by the
// Standard Webhooks specification with its own code (crypto/hmac and
// base64 only, nothing shared with the sender), records what it got, and
// can be told to misbehave: fail with 500, hang past the sender's timeout,
// or close the connection without an answer.
//
//	r := webhooktest.NewReceiver(t)          // closed when the test ends
//	// create an endpoint with URL r.URL(), then:
//	r.SetSecret(endpoint.Secret)
//	r.SetMode(webhooktest.Fail)              // answer 500 until told otherwise
//	...
//	r.SetMode(webhooktest.OK)
//	got := r.Deliveries()                    // every request, in arrival order
//	ok := r.Acknowledged()                   // event id -> its 2xx-answered deliveries
//
// It is exported for the chaos suite; it has no test dependencies of its
// own beyond testing.TB in NewReceiver.
package webhooktest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Mode is how the receiver answers.
type Mode int

// The receiver's modes.
const (
	// OK answers 200 to a delivery that verifies, 400 to one that does not.
	OK Mode = iota
	// Fail answers 500.
	Fail
	// Hang answers nothing for HangFor (default 11 s, past the 10 s a
	// sender waits), then 200: the sender must have given up by then.
	Hang
	// Close closes the connection without answering.
	Close
)

func (m Mode) String() string {
	return [...]string{"ok", "fail", "hang", "close"}[m]
}

// Tolerance is how far a delivery's webhook-timestamp may be from the
// receiver's clock, as the specification's libraries allow.
const Tolerance = 5 * time.Minute

// Delivery is one request the receiver got.
type Delivery struct {
	// ID, Timestamp and Signature are the webhook-id, webhook-timestamp and
	// webhook-signature headers.
	ID, Timestamp, Signature string
	ContentType              string
	Body                     []byte
	// Event is the body's "id" and "type".
	EventID, EventType string
	// Err is why the delivery did not verify; nil when it did.
	Err error
	// Answered is the mode the receiver answered it in.
	Answered   Mode
	ReceivedAt time.Time
}

// Acknowledged tells whether the receiver answered the delivery 2xx.
func (d Delivery) Acknowledged() bool { return d.Answered == OK && d.Err == nil }

// Receiver is a merchant's endpoint.
type Receiver struct {
	server *httptest.Server
	done   chan struct{}

	mu         sync.Mutex
	secret     string
	mode       Mode
	hangFor    time.Duration
	deliveries []Delivery
	now        func() time.Time
}

// New starts a receiver on a loopback port; Close stops it.
func New() *Receiver {
	r := &Receiver{done: make(chan struct{}), hangFor: 11 * time.Second, now: time.Now}
	r.server = httptest.NewServer(http.HandlerFunc(r.serve))
	return r
}

// NewReceiver starts a receiver that is closed when the test ends.
func NewReceiver(t testing.TB) *Receiver {
	r := New()
	t.Cleanup(r.Close)
	return r
}

// Close ends any hanging request and stops the server.
func (r *Receiver) Close() {
	select {
	case <-r.done:
	default:
		close(r.done)
	}
	r.server.CloseClientConnections()
	r.server.Close()
}

// URL is where to send deliveries.
func (r *Receiver) URL() string { return r.server.URL }

// SetSecret sets the endpoint's secret ("whsec_..."), which deliveries are
// verified with. Until it is set, every delivery fails verification.
func (r *Receiver) SetSecret(secret string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.secret = secret
}

// SetMode sets how the receiver answers from now on.
func (r *Receiver) SetMode(m Mode) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mode = m
}

// SetHangFor sets how long a hanging answer waits.
func (r *Receiver) SetHangFor(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hangFor = d
}

// Deliveries returns every request received so far, in arrival order.
func (r *Receiver) Deliveries() []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Delivery(nil), r.deliveries...)
}

// Acknowledged returns, by event id, the deliveries the receiver answered
// 2xx: those that verified while it was OK.
func (r *Receiver) Acknowledged() map[string][]Delivery {
	out := map[string][]Delivery{}
	for _, d := range r.Deliveries() {
		if d.Acknowledged() {
			out[d.ID] = append(out[d.ID], d)
		}
	}
	return out
}

// Invalid returns the deliveries that did not verify.
func (r *Receiver) Invalid() []Delivery {
	var out []Delivery
	for _, d := range r.Deliveries() {
		if d.Err != nil {
			out = append(out, d)
		}
	}
	return out
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	r.mu.Lock()
	secret, mode, hangFor, now := r.secret, r.mode, r.hangFor, r.now()
	d := Delivery{
		ID: req.Header.Get("webhook-id"), Timestamp: req.Header.Get("webhook-timestamp"),
		Signature: req.Header.Get("webhook-signature"), ContentType: req.Header.Get("Content-Type"),
		Body: body, Answered: mode, ReceivedAt: now,
	}
	d.Err = Verify(secret, req.Header, body, now)
	if d.Err == nil && req.Method != http.MethodPost {
		d.Err = fmt.Errorf("method %s, not POST", req.Method)
	}
	if d.Err == nil && d.ContentType != "application/json" {
		d.Err = fmt.Errorf("Content-Type %q, not application/json", d.ContentType)
	}
	var event struct{ ID, Type string }
	if err := json.Unmarshal(body, &event); err == nil {
		d.EventID, d.EventType = event.ID, event.Type
	}
	if d.Err == nil && d.EventID != d.ID {
		d.Err = fmt.Errorf("webhook-id %q is not the event's id %q", d.ID, d.EventID)
	}
	r.deliveries = append(r.deliveries, d)
	r.mu.Unlock()

	switch mode {
	case Fail:
		http.Error(w, "failing on purpose", http.StatusInternalServerError)
	case Hang:
		select {
		case <-time.After(hangFor):
		case <-r.done:
		}
		w.WriteHeader(http.StatusOK)
	case Close:
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	default:
		if d.Err != nil {
			http.Error(w, d.Err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// Errors of Verify.
var (
	ErrMissingHeaders = errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	ErrTimestamp      = errors.New("webhook-timestamp is not a time within the tolerance")
	ErrSignature      = errors.New("no signature in webhook-signature matches")
)

// Verify checks a delivery as the Standard Webhooks specification says:
// the key is the base64-decoded part of secret after "whsec_"; the signed
// content is "{webhook-id}.{webhook-timestamp}.{body}"; webhook-signature
// holds space-separated "v1,<base64 HMAC-SHA256>" entries, one of which
// must match; and the timestamp is within Tolerance of now.
func Verify(secret string, header http.Header, body []byte, now time.Time) error {
	id, ts, sigs := header.Get("webhook-id"), header.Get("webhook-timestamp"), header.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return ErrMissingHeaders
	}
	seconds, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrTimestamp
	}
	if at := time.Unix(seconds, 0); at.Before(now.Add(-Tolerance)) || at.After(now.Add(Tolerance)) {
		return ErrTimestamp
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || secret == "" {
		return fmt.Errorf("the secret %q is not whsec_ and base64", secret)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, entry := range strings.Fields(sigs) {
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrSignature
}
