package stripesim

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// event is Stripe's event object. It is encoded once, when the state change
// happens, and delivered as those bytes.
type event struct {
	ID              string       `json:"id"`
	Object          string       `json:"object"`
	APIVersion      string       `json:"api_version"`
	Created         int64        `json:"created"`
	Data            eventData    `json:"data"`
	Livemode        bool         `json:"livemode"`
	PendingWebhooks int          `json:"pending_webhooks"`
	Request         eventRequest `json:"request"`
	Type            string       `json:"type"`

	// made is when the simulator made the event, on its clock, to the
	// nanosecond (Created is in seconds): GET /v1/events keeps 30 days of
	// it and lists it events_lag after it (eventlist.go).
	made time.Time

	// raw is the event's encoding, kept by a simulator whose state lives in
	// a file (Open), which writes every event on every save: Data.Object is
	// then a slice of it, so that the object's JSON is held once, not in
	// the event and again in its encoding (keepEncoding). nil otherwise:
	// the envelope would cost some 250 bytes an event for nothing.
	raw []byte
}

// keepEncoding encodes ev once and for all (an event never changes after
// emit), and points Data.Object into the encoding.
func (ev *event) keepEncoding() {
	raw := snapshot(ev)
	if i := bytes.Index(raw, ev.Data.Object); i >= 0 { // the snapshot is copied verbatim: compact already
		ev.Data.Object = raw[i : i+len(ev.Data.Object) : i+len(ev.Data.Object)]
	}
	ev.raw = raw
}

type eventData struct {
	Object json.RawMessage `json:"object"`
}

type eventRequest struct {
	ID             *string `json:"id"`
	IdempotencyKey *string `json:"idempotency_key"`
}

// emit records that obj changed, as an event of the given type, and queues it
// for delivery; c is the request that changed it, nil for a later change.
// It runs with s.mu held and never blocks.
func (s *Simulator) emit(c *call, typ string, obj any) {
	ev := &event{
		ID:         newID("evt"),
		Object:     "event",
		APIVersion: APIVersion,
		Created:    s.now().Unix(),
		Data:       eventData{Object: snapshot(obj)},
		Type:       typ,
		made:       s.now(),
	}
	if c != nil { // nil: a change Stripe made on its own, with no request behind it
		// A copy of the id: a pointer into c would keep the whole request
		// (its form, its key's claim) alive as long as the event, 30 days.
		ev.Request = eventRequest{ID: nullable(c.requestID), IdempotencyKey: nullable(c.idempotencyKey)}
	}
	if s.webhooks != nil {
		ev.PendingWebhooks = 1
	}
	s.state.events.add(ev.ID, ev)
	if s.store != nil {
		ev.keepEncoding()
	}
	if s.webhooks != nil { // encoded only when someone listens
		payload := ev.raw
		if payload == nil {
			payload = snapshot(ev)
		}
		s.webhooks.send(outgoing{payload: payload, eventType: typ, object: objectID(ev.Data.Object)})
	}
}

// objectID is the id of the object an event is about.
func objectID(obj json.RawMessage) string {
	var o struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(obj, &o) // a snapshot of one of our objects: always an object with an id
	return o.ID
}

// Delivery defaults: with them an event is abandoned after about 13 seconds
// of failures (0.1 + 0.2 + ... + 6.4).
const (
	defaultWebhookMaxAttempts = 8
	defaultWebhookBackoff     = 100 * time.Millisecond
	maxWebhookBackoff         = 10 * time.Second
	webhookTimeout            = 10 * time.Second
)

// deliverer posts events to one endpoint from a single goroutine, so they
// arrive in the order they were queued: the order of creation, unless a
// webhook fault (webhook_faults.go) queues an event twice, later, or after
// the next one about its object. A failing event holds up the ones behind
// it until it succeeds or runs out of attempts, at the price of
// head-of-line blocking.
type deliverer struct {
	url         string
	secret      string
	maxAttempts int
	backoff     time.Duration
	client      *http.Client
	logger      *slog.Logger

	mu      sync.Mutex
	pending []outgoing
	faults  []*WebhookFault       // armed, oldest first
	held    map[string][]outgoing // by object id: events a reorder fault holds back
	era     int                   // bumped by clear, so that a delayed event of a forgotten state is dropped
	wake    chan struct{}         // capacity 1: "pending may have grown"

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

func newDeliverer(cfg Config, logger *slog.Logger) *deliverer {
	ctx, cancel := context.WithCancel(context.Background())
	d := &deliverer{
		url:         cfg.WebhookURL,
		secret:      cfg.WebhookSecret,
		maxAttempts: cmp.Or(cfg.WebhookMaxAttempts, defaultWebhookMaxAttempts),
		backoff:     cmp.Or(cfg.WebhookBackoff, defaultWebhookBackoff),
		client:      &http.Client{Timeout: webhookTimeout},
		logger:      logger,
		wake:        make(chan struct{}, 1),
		ctx:         ctx,
		cancel:      cancel,
		done:        make(chan struct{}),
	}
	go d.run()
	return d
}

// outgoing is an event to deliver: its encoding, and what faults match on.
type outgoing struct {
	payload   []byte
	eventType string
	object    string // the id of the object it is about
}

// enqueue queues events for delivery, behind the ones already queued.
func (d *deliverer) enqueue(events ...outgoing) {
	d.mu.Lock()
	d.pending = append(d.pending, events...)
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default: // already signalled
	}
}

// clear drops the events not yet picked up for delivery, held or delayed,
// and disarms the webhook faults.
func (d *deliverer) clear() {
	d.mu.Lock()
	d.pending = nil
	d.faults = nil
	d.held = nil
	d.era++
	d.mu.Unlock()
}

// close stops delivery, abandoning pending events, and waits for it.
func (d *deliverer) close() {
	d.cancel()
	<-d.done
}

func (d *deliverer) run() {
	defer close(d.done)
	for {
		payload, ok := d.next()
		if !ok {
			select {
			case <-d.wake:
				continue
			case <-d.ctx.Done():
				return
			}
		}
		d.deliver(payload)
	}
}

func (d *deliverer) next() ([]byte, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.pending) == 0 {
		return nil, false
	}
	ev := d.pending[0]
	d.pending = d.pending[1:]
	return ev.payload, true
}

// deliver posts one event until the endpoint answers 2xx, the attempts run
// out or the deliverer closes.
func (d *deliverer) deliver(payload []byte) {
	wait := d.backoff
	for attempt := 1; ; attempt++ {
		err := d.post(payload)
		if err == nil {
			return
		}
		if attempt == d.maxAttempts {
			d.logger.Error("stripesim: webhook abandoned", "url", d.url, "attempts", attempt, "error", err)
			return
		}
		d.logger.Warn("stripesim: webhook failed, retrying", "url", d.url, "attempt", attempt, "retry_in", wait, "error", err)
		select {
		case <-time.After(wait):
		case <-d.ctx.Done():
			return
		}
		wait = min(2*wait, maxWebhookBackoff)
	}
}

func (d *deliverer) post(payload []byte) error {
	req, err := http.NewRequestWithContext(d.ctx, http.MethodPost, d.url, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
	req.Header.Set("Stripe-Signature", Sign(payload, d.secret, time.Now()))

	resp, err := d.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("endpoint answered %s", resp.Status)
	}
	return nil
}

// Sign returns the Stripe-Signature header for payload sent at t:
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<payload>" keyed by secret>".
// The whole secret, "whsec_" prefix included, is the key, as at Stripe. The
// timestamp is the wall clock (never Config.Now): receivers reject
// signatures more than five minutes old.
func Sign(payload []byte, secret string, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(payload)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}
