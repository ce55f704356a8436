package stripesim

import (
	"cmp"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// APIVersion is the Stripe API version the simulator speaks and stamps on its
// events: the one stripe-go v76 pins.
const APIVersion = "2023-10-16"

// Config configures a Simulator. The zero value is a simulator without
// webhook delivery.
type Config struct {
	WebhookURL    string           // empty: no delivery
	WebhookSecret string           // whsec_...; signs every delivery
	Logger        *slog.Logger     // nil: discard
	Now           func() time.Time // nil: time.Now (inject for tests of 24h key retention); Advance moves it on

	// AuthorisationLifetime is how long an uncaptured authorisation lives
	// before the simulator cancels it (cancellation_reason automatic).
	// Default 7 days, as at Stripe; a chaos run makes it seconds, so that
	// expiries happen while it runs, without moving the clock (which would
	// also expire the idempotency keys of requests still retrying).
	AuthorisationLifetime time.Duration

	// WebhookMaxAttempts bounds the deliveries of one event (default 8).
	WebhookMaxAttempts int
	// WebhookBackoff is the wait after the first failed delivery; it doubles
	// after each further failure, up to 10s (default 100ms).
	WebhookBackoff time.Duration
}

// Simulator is an in-memory Stripe. It is safe for concurrent use. One mutex
// guards all state; it is never held while a request sleeps or while a
// webhook is delivered.
type Simulator struct {
	clock func() time.Time
	// authorisationLifetime is Config.AuthorisationLifetime or its default.
	authorisationLifetime time.Duration
	offset                atomic.Int64 // nanoseconds Advance added to clock
	logger                *slog.Logger
	webhooks              *deliverer // nil without Config.WebhookURL
	closing               chan struct{}
	close                 sync.Once

	mu         sync.Mutex
	state      *state
	timer      *time.Timer // fires when the next later change is due; nil until one is scheduled
	applyingAt time.Time   // while applyDue applies a change: when it fell due (see now)
	closed     bool        // Close ran: the timer is never armed again
	gen        uint64      // counts changes of state, for store (persist.go)

	store *stateStore // nil unless made by Open: the state lives in a file too
}

// New returns a simulator with no objects. Call Close to stop its webhook
// delivery.
func New(cfg Config) *Simulator {
	s := &Simulator{
		clock:   cfg.Now,
		logger:  cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)),
		closing: make(chan struct{}),
		state:   newState(),
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	s.authorisationLifetime = cmp.Or(cfg.AuthorisationLifetime, defaultAuthorisationLifetime)
	if cfg.WebhookURL != "" {
		s.webhooks = newDeliverer(cfg, s.logger)
	}
	return s
}

// Handler serves the Stripe API under /v1/ and the control surface under
// /_sim/.
func (s *Simulator) Handler() http.Handler {
	mux := http.NewServeMux()

	mux.Handle("POST /v1/customers", s.api(s.createCustomer))
	mux.Handle("GET /v1/customers/{id}", s.api(s.getCustomer))
	mux.Handle("POST /v1/payment_intents", s.api(s.createPaymentIntent))
	mux.Handle("GET /v1/payment_intents", s.api(s.listPaymentIntents))
	mux.Handle("GET /v1/payment_intents/search", s.api(s.searchPaymentIntents))
	mux.Handle("GET /v1/payment_intents/{id}", s.api(s.getPaymentIntent))
	mux.Handle("POST /v1/payment_intents/{id}/capture", s.api(s.capturePaymentIntent))
	mux.Handle("POST /v1/payment_intents/{id}/cancel", s.api(s.cancelPaymentIntent))
	mux.Handle("POST /v1/refunds", s.api(s.createRefund))
	mux.Handle("GET /v1/refunds", s.api(s.listRefunds))
	mux.Handle("GET /v1/refunds/{id}", s.api(s.getRefund))
	mux.Handle("GET /v1/disputes/{id}", s.api(s.getDispute))
	mux.Handle("GET /v1/events", s.api(s.listEvents))
	mux.Handle("/v1/", s.api(unrecognizedURL))

	mux.Handle("GET /_sim/objects", loopbackOnly(http.HandlerFunc(s.serveObjects)))
	mux.Handle("GET /_sim/requests", loopbackOnly(http.HandlerFunc(s.serveRequests)))
	mux.Handle("GET /_sim/faults", loopbackOnly(http.HandlerFunc(s.serveFaults)))
	mux.Handle("POST /_sim/faults", loopbackOnly(http.HandlerFunc(s.serveAddFault)))
	mux.Handle("DELETE /_sim/faults", loopbackOnly(http.HandlerFunc(s.serveClearFaults)))
	mux.Handle("POST /_sim/reset", loopbackOnly(http.HandlerFunc(s.serveReset)))
	mux.Handle("POST /_sim/advance", loopbackOnly(http.HandlerFunc(s.serveAdvance)))
	mux.Handle("GET /_sim/late_requests", loopbackOnly(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeControl(w, http.StatusOK, map[string]int{"late_requests": s.LateRequests()})
	})))
	mux.Handle("POST /_sim/disputes/{id}/close", loopbackOnly(http.HandlerFunc(s.serveCloseDispute)))
	mux.Handle("GET /_sim/webhook_faults", loopbackOnly(http.HandlerFunc(s.serveWebhookFaults)))
	mux.Handle("POST /_sim/webhook_faults", loopbackOnly(http.HandlerFunc(s.serveAddWebhookFault)))
	mux.Handle("DELETE /_sim/webhook_faults", loopbackOnly(http.HandlerFunc(s.serveClearWebhookFaults)))
	mux.Handle("/_sim/", loopbackOnly(http.HandlerFunc(serveControlNotFound)))

	return mux
}

// Close stops webhook delivery, waits for its goroutine, stops the timer of
// later changes and wakes requests sleeping in a delay fault. Events not yet
// delivered are dropped. Close is safe to call more than once.
func (s *Simulator) Close() {
	s.close.Do(func() {
		s.mu.Lock()
		s.closed = true
		if s.timer != nil {
			s.timer.Stop()
		}
		s.mu.Unlock()
		close(s.closing)
		if s.webhooks != nil {
			s.webhooks.close()
		}
		s.save()
	})
}

// Reset forgets every object, idempotency key, fault (webhook faults too),
// recorded request, undelivered event and later change, and the time
// Advance added.
func (s *Simulator) Reset() {
	s.mu.Lock()
	s.state = newState()
	s.offset.Store(0)
	s.changed()
	s.armTimer()
	if s.webhooks != nil {
		s.webhooks.clear() // under s.mu, so no event of the old state slips in after
	}
	s.mu.Unlock()
	s.save()
}

// sleep waits for d, or less if the simulator closes. It never holds s.mu.
func (s *Simulator) sleep(d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.closing:
	}
}
