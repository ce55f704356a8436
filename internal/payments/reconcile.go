package payments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stripe/stripe-go/v76"
	"golang.org/x/time/rate"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/stripeclient"
)

// The reconciler: the service's records converge to Stripe's without any
// webhook (docs/API.md section 2). A webhook can be lost, and some of
// Stripe's changes come with no request of ours behind them (an
// authorisation Stripe let lapse, a refund that fails days later, a refund
// made in Stripe's dashboard). Every one of them is an event in Stripe's
// event log, which Stripe keeps for 30 days and lists at GET /v1/events,
// and which is where Stripe sends an integration that missed webhooks
// (docs.stripe.com/webhooks/process-undelivered-events). So the
// reconciler reads the log, and asks about single objects only where the
// service itself is unsure. A pass:
//
//	lock      the cursor row (stripe_event_cursor: the created time and id of
//	          the newest event read) FOR UPDATE SKIP LOCKED, for the pass: a
//	          second reader, on this instance or another, finds it taken and
//	          skips its pass, so one instance reads at a time, and a reader
//	          that dies lets go with its connection
//	read      the events created since the cursor less Config.Margin, newest
//	          first, 100 a page, at most Config.MaxPages pages a pass, at most
//	          Config.Rate calls a second; only the types the webhook applies
//	          (EventTypes)
//	apply     each event not in the inbox yet (stripe_events, one probe of
//	          its primary key per event), oldest first, through the webhook's
//	          own code and record of event ids (Config.Apply is
//	          webhooks.Receiver.Apply): an event is applied once whichever way
//	          it came
//	advance   the cursor to the newest event read, once the pass read the
//	          whole window
//	unsure    the payments Stripe answered "processing" (payments_awaiting_stripe)
//	          whose check is due: one already moved (the log, or a webhook,
//	          told) is forgotten without a call; one still processing is
//	          retrieved (GET /v1/payment_intents/{id}) and moved as its
//	          webhook would move it, with back-off
//
// The margin: Stripe's list may show an event a little after it happened
// (the simulator's events_lag fault), later than its webhook; an event that
// shows up late is listed with its own created time, before events already
// read, so each pass reads again the Margin before the cursor. Stripe
// publishes no bound on that delay; the default, 2 minutes (four default
// intervals), is this code's choice, and a trade: the events re-read are
// in the inbox already (one index probe each, nothing applied), but every
// 100 events in the window cost a list call each pass. With 5 minutes,
// the benchmark's million payments a month (docs/BENCHMARKS-reconcile.md)
// read each event 11 times and took two pages a pass; with 2 minutes, one.
// An event Stripe lists later than the margin is missed by the log; its
// webhook (Stripe retries for days) still brings it.
//
// A window of more than Config.MaxPages pages (the first pass, over 30 days
// of events, or the pass after an outage) is swept from the newest event
// down in passes of MaxPages pages, each applied oldest first and
// continuing after the oldest event the last one read; the cursor
// advances when the sweep reaches the window's start. Within a sweep,
// older events are applied after newer ones: the inbox makes that safe
// (an older PaymentIntent event is stale, a refund moves only forward),
// but the merchant's events of one object may then come out of Stripe's
// order.
//
// Stripe's 429 ends the pass, and no pass calls Stripe before the pause
// (rateLimitPause) is over. Any other failure to reach Stripe ends the
// pass too, with an error; the next pass starts again from the cursor.

// rateLimitPause is how long the reconciler leaves Stripe alone after a
// 429: Stripe asks clients that hit its limits to back off exponentially
// (docs.stripe.com/rate-limits); one pause of this length per 429, with
// the next interval after it, is that back-off at the rate this job runs.
const rateLimitPause = 10 * time.Second

// EventTypes are the event types the reconciler lists (types[]): those
// the webhook receiver applies (internal/webhooks), PaymentIntent events,
// refund events and charge.refunded, and the dispute events
// (charge.dispute.*), which the receiver records as ignored until it
// applies them. Stripe takes up to 20 types (docs.stripe.com/api/events/list).
var EventTypes = []string{
	"payment_intent.succeeded", "payment_intent.amount_capturable_updated", "payment_intent.canceled",
	"payment_intent.payment_failed",
	"charge.refunded", "refund.created", "charge.refund.updated",
	"charge.dispute.created", "charge.dispute.updated", "charge.dispute.closed",
	"charge.dispute.funds_withdrawn", "charge.dispute.funds_reinstated",
}

// ApplyEvent applies one Stripe event, given as the bytes Stripe sent,
// exactly once: webhooks.Receiver.Apply.
type ApplyEvent func(ctx context.Context, payload []byte) (EventOutcome, error)

// ReconcilerConfig configures a Reconciler. Zero values take the defaults.
type ReconcilerConfig struct {
	// Apply applies an event as the webhook does. Required.
	Apply ApplyEvent
	// Margin is how far before the cursor each pass reads again (see the
	// package comment). Default 2m.
	Margin time.Duration
	// MaxPages bounds the pages of the log one pass reads. Default 50.
	MaxPages int
	// PageSize is how many events a page of the log holds. Default 100,
	// the most Stripe gives (tests make it small).
	PageSize int
	// After is how long a payment Stripe answered "processing" waits for
	// the log to tell where it ended up before it is retrieved, and the
	// first step of its back-off. Default 5m.
	After time.Duration
	// BackoffCap bounds the back-off between two retrieves of one unsure
	// payment. Default 6h.
	BackoffCap time.Duration
	// Rate is how many Stripe calls a second the reconciler makes at most
	// (a burst of one). Default 20: a fifth of Stripe's live-mode limit of
	// 100 read operations a second (docs.stripe.com/rate-limits), leaving
	// the rest to the flows.
	Rate float64
	// Batch is how many unsure payments a pass claims. Default 100.
	Batch int
	// Now is the clock; nil: the database's.
	Now      func() time.Time
	Logger   *slog.Logger
	Registry prometheus.Registerer
}

// Reconciler reads Stripe's event log and asks about the payments the
// service is unsure of.
type Reconciler struct {
	s       *Service
	cfg     ReconcilerConfig
	limiter *rate.Limiter
	log     *slog.Logger

	mu          sync.Mutex
	pausedUntil time.Time // after a 429
	sweep       *sweep    // a window of more than MaxPages pages, part read

	events, calls *prometheus.CounterVec
	unsure        *prometheus.CounterVec
}

// sweep is a window of the log being read in several passes, newest first.
type sweep struct {
	after   string // the oldest event read so far: the next pass goes on after it
	newest  eventHead
	started time.Time // the window's start (cursor less margin), as the sweep began
}

// eventHead is what the reconciler reads of an event itself.
type eventHead struct {
	ID      string `json:"id"`
	Created int64  `json:"created"`
}

// NewReconciler returns a Reconciler over the service's pool and Stripe client.
func (s *Service) NewReconciler(cfg ReconcilerConfig) *Reconciler {
	if cfg.Margin <= 0 {
		cfg.Margin = 2 * time.Minute
	}
	if cfg.MaxPages <= 0 {
		cfg.MaxPages = 50
	}
	if cfg.After <= 0 {
		cfg.After = 5 * time.Minute
	}
	if cfg.BackoffCap <= 0 {
		cfg.BackoffCap = 6 * time.Hour
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 20
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 100
	}
	r := &Reconciler{s: s, cfg: cfg, limiter: rate.NewLimiter(rate.Limit(cfg.Rate), 1), log: cfg.Logger,
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payments_reconciler_events_total",
			Help: "Events the reconciler read from Stripe's event log, by what became of them (known: in the inbox already; else the webhook's outcome).",
		}, []string{"outcome"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payments_reconciler_stripe_calls_total",
			Help: "Stripe calls the reconciler made, by outcome (ok, rate_limited, refused, error).",
		}, []string{"outcome"}),
		unsure: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payments_reconciler_unsure_total",
			Help: "Payments the service was unsure of that the reconciler checked, by result (settled: moved without a call; retrieved; moved: moved by the retrieve).",
		}, []string{"result"}),
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(r.events, r.calls, r.unsure)
	}
	return r
}

// ReconcileRun is what one pass did.
type ReconcileRun struct {
	Busy     bool // another reader holds the log: nothing read
	Pages    int  // pages of the log read
	Listed   int  // events the pages listed
	Applied  int  // of those, events not in the inbox yet, applied through the webhook's code
	Moved    int  // of those, events that changed a record (outcome applied)
	Partial  bool // the window was more than MaxPages pages: the next pass goes on
	Unsure   int  // unsure payments checked
	Retrieve int  // of those, retrieved from Stripe
	Paused   bool // Stripe answered 429 (in this pass or one before): nothing more until the pause ends
}

// errRateLimited ends a pass on Stripe's 429.
var errRateLimited = errors.New("stripe rate limit")

// RunOnce makes one pass: it reads Stripe's event log from the cursor and
// applies what is new, then checks the unsure payments that are due. A
// 429 from Stripe ends it with Paused and no error.
func (r *Reconciler) RunOnce(ctx context.Context) (ReconcileRun, error) {
	var run ReconcileRun
	if r.cfg.Apply == nil {
		return run, bug("the reconciler has no ApplyEvent")
	}
	if r.paused() {
		run.Paused = true
		return run, nil
	}
	err := r.readLog(ctx, &run)
	if err != nil && !errors.Is(err, errRateLimited) {
		// A sweep's next page starts after an event Stripe may no longer
		// list (past its 30 days): the next pass starts again from the cursor.
		r.setSweep(nil)
	}
	if err == nil {
		err = r.checkUnsure(ctx, &run)
	}
	if errors.Is(err, errRateLimited) {
		run.Paused = true
		r.pause()
		r.log.WarnContext(ctx, "reconciler: Stripe answered 429; pausing", slog.Duration("pause", rateLimitPause))
		return run, nil
	}
	return run, err
}

// readLog reads the log's window from the cursor, under the cursor's row
// lock, and applies what is new.
func (r *Reconciler) readLog(ctx context.Context, run *ReconcileRun) error {
	// READ COMMITTED: the transaction only holds the cursor's row lock
	// and writes the cursor; the events are applied in transactions of
	// their own. Once: a pass is not run again on a conflict.
	return db.WithTx(ctx, r.s.pool, db.TxOptions{Isolation: pgx.ReadCommitted, Attempts: 1}, func(ctx context.Context, tx *db.Tx) error {
		rows, err := queries.LockStripeEventCursor(ctx, tx)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			run.Busy = true
			return nil
		}
		cur := rows[0]
		var since time.Time // zero: all Stripe keeps
		if cur.Created.Valid {
			since = cur.Created.Time.Add(-r.cfg.Margin)
		}
		sw := r.takeSweep(since)
		after := ""
		if sw != nil {
			after = sw.after
		}
		var batch []json.RawMessage
		var heads []eventHead
		complete := false
		for run.Pages < r.cfg.MaxPages {
			var page stripeclient.EventsPage
			if err := r.call(ctx, func() (err error) {
				page, err = r.s.stripe.ListEvents(ctx, stripeclient.EventsQuery{Since: since, StartingAfter: after, Types: EventTypes,
					Limit: r.cfg.PageSize})
				return err
			}); err != nil {
				return err
			}
			run.Pages++
			for _, raw := range page.Events {
				var h eventHead
				if err := json.Unmarshal(raw, &h); err != nil || h.ID == "" {
					return fmt.Errorf("reading Stripe's event log: an event without an id: %.200s", raw)
				}
				batch, heads = append(batch, raw), append(heads, h)
			}
			if !page.HasMore || len(page.Events) == 0 {
				complete = true
				break
			}
			after = heads[len(heads)-1].ID
		}
		run.Listed += len(heads)
		if err := r.applyEvents(ctx, batch, heads, run); err != nil {
			return err
		}
		newest := eventHead{} // the newest event of the window: the first a sweep read
		if sw != nil {
			newest = sw.newest
		}
		if len(heads) > 0 && (newest.ID == "" || heads[0].Created > newest.Created) {
			newest = heads[0]
		}
		if !complete {
			run.Partial = true
			r.setSweep(&sweep{after: after, newest: newest, started: since})
			return nil
		}
		r.setSweep(nil)
		params := dbsqlc.AdvanceStripeEventCursorParams{Now: r.now()}
		if newest.ID != "" {
			params.Created = pgtype.Timestamptz{Time: time.Unix(newest.Created, 0), Valid: true}
			params.EventID = pgtype.Text{String: newest.ID, Valid: true}
		}
		return queries.AdvanceStripeEventCursor(ctx, tx, params)
	})
}

// applyEvents applies, oldest first, the events of a window not in the
// inbox yet. heads are newest first, as the log lists them.
func (r *Reconciler) applyEvents(ctx context.Context, batch []json.RawMessage, heads []eventHead, run *ReconcileRun) error {
	if len(heads) == 0 {
		return nil
	}
	ids := make([]string, len(heads))
	for i, h := range heads {
		ids[i] = h.ID
	}
	known, err := queries.KnownStripeEvents(ctx, r.s.pool, ids)
	if err != nil {
		return fmt.Errorf("reading the inbox: %w", err)
	}
	for i := len(batch) - 1; i >= 0; i-- {
		if slices.Contains(known, heads[i].ID) {
			r.events.WithLabelValues("known").Inc()
			continue
		}
		outcome, err := r.cfg.Apply(ctx, batch[i])
		if err != nil {
			return fmt.Errorf("applying event %s: %w", heads[i].ID, err)
		}
		run.Applied++
		if outcome == EventApplied {
			run.Moved++
			r.log.InfoContext(ctx, "reconciler: applied an event the webhook did not bring", slog.String("event_id", heads[i].ID))
		}
		r.events.WithLabelValues(string(outcome)).Inc()
	}
	return nil
}

// takeSweep is the sweep under way, if it is of the window from since.
func (r *Reconciler) takeSweep(since time.Time) *sweep {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sweep != nil && !r.sweep.started.Equal(since) {
		r.sweep = nil // the cursor moved (another instance's pass): start again
	}
	return r.sweep
}

func (r *Reconciler) setSweep(sw *sweep) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweep = sw
}

// checkUnsure checks the payments the service is unsure of whose check is
// due: one the log (or a webhook) moved meanwhile is forgotten without a
// call; one still processing is retrieved and moved as its webhook would
// move it.
func (r *Reconciler) checkUnsure(ctx context.Context, run *ReconcileRun) error {
	rows, err := queries.ClaimAwaitingStripe(ctx, r.s.pool, dbsqlc.ClaimAwaitingStripeParams{
		Now: r.now(), AfterSeconds: r.cfg.After.Seconds(), BackoffCapSeconds: r.cfg.BackoffCap.Seconds(),
		RowLimit: int32(r.cfg.Batch),
	})
	if err != nil {
		return fmt.Errorf("claiming the payments the service is unsure of: %w", err)
	}
	for _, row := range rows {
		run.Unsure++
		settled, err := r.settled(ctx, row.PaymentID)
		if err != nil {
			return err
		}
		if settled {
			r.unsure.WithLabelValues("settled").Inc()
			continue
		}
		var pi *stripe.PaymentIntent
		err = r.call(ctx, func() (err error) { pi, err = r.s.stripe.GetPaymentIntent(ctx, row.StripePaymentIntent); return err })
		switch {
		case errors.Is(err, errRateLimited):
			return err
		case stripeclient.Classify(err) == stripeclient.Terminal:
			r.log.WarnContext(ctx, "reconciler: Stripe refused to show a PaymentIntent", slog.String("payment", row.PaymentID),
				slog.String("payment_intent", row.StripePaymentIntent), slog.String("error", err.Error()))
			continue // the back-off asks again
		case err != nil:
			return fmt.Errorf("retrieving PaymentIntent %s: %w", row.StripePaymentIntent, err)
		}
		run.Retrieve++
		r.unsure.WithLabelValues("retrieved").Inc()
		if err := r.follow(ctx, row.PaymentID, pi); err != nil {
			return err
		}
	}
	return nil
}

// settled forgets an unsure payment that is no longer processing, and
// says whether it was.
func (r *Reconciler) settled(ctx context.Context, paymentID string) (bool, error) {
	status, err := queries.PaymentStatus(ctx, r.s.pool, paymentID)
	if err != nil {
		return false, fmt.Errorf("reading payment %s: %w", paymentID, err)
	}
	if Status(status) == StatusProcessing {
		return false, nil
	}
	return true, queries.ForgetAwaitingStripe(ctx, r.s.pool, paymentID)
}

// follow moves an unsure payment to where Stripe's PaymentIntent is, as
// the webhook for its status would, and forgets it once it moved.
func (r *Reconciler) follow(ctx context.Context, paymentID string, pi *stripe.PaymentIntent) error {
	return db.WithTx(ctx, r.s.pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
		pay, err := lockPayment(ctx, tx, paymentID)
		if err != nil {
			return err
		}
		if t, ok := intentStatusMove(pay, pi); ok {
			if pay, _, err = applyMove(ctx, tx, nil, pay, t); err != nil {
				return err
			}
		}
		if pay.Status == StatusProcessing {
			return nil
		}
		r.unsure.WithLabelValues("moved").Inc()
		r.log.InfoContext(ctx, "reconciler: an unsure payment followed Stripe", slog.String("payment", pay.ID),
			slog.String("status", string(pay.Status)))
		return queries.ForgetAwaitingStripe(ctx, tx, paymentID)
	})
}

// call makes one Stripe call within the rate, and sorts its failure.
func (r *Reconciler) call(ctx context.Context, call func() error) error {
	if err := r.limiter.Wait(ctx); err != nil {
		return err
	}
	err := call()
	var se *stripe.Error
	switch {
	case err == nil:
		r.calls.WithLabelValues("ok").Inc()
	case errors.As(err, &se) && se.HTTPStatusCode == http.StatusTooManyRequests:
		r.calls.WithLabelValues("rate_limited").Inc()
		return errRateLimited
	case stripeclient.Classify(err) == stripeclient.Terminal:
		r.calls.WithLabelValues("refused").Inc()
	default:
		r.calls.WithLabelValues("error").Inc()
	}
	return err
}

func (r *Reconciler) paused() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Now().Before(r.pausedUntil)
}

func (r *Reconciler) pause() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pausedUntil = time.Now().Add(rateLimitPause)
}

// now is the injected clock as a query parameter: NULL for the database's.
func (r *Reconciler) now() pgtype.Timestamptz {
	if r.cfg.Now == nil {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: r.cfg.Now(), Valid: true}
}

// intentStatusMove is the move a PaymentIntent's status reports for pay:
// the move the webhook for that status would make (intentMoves). A status
// the service does not act on (processing, requires_action, say, or an
// authorisation of a payment made with capture=true) is no move.
func intentStatusMove(pay Payment, pi *stripe.PaymentIntent) (transition, bool) {
	var event string
	switch pi.Status {
	case stripe.PaymentIntentStatusSucceeded:
		event = "payment_intent.succeeded"
	case stripe.PaymentIntentStatusRequiresCapture:
		if pay.Capture {
			return transition{}, false
		}
		event = "payment_intent.amount_capturable_updated"
	case stripe.PaymentIntentStatusCanceled:
		event = "payment_intent.canceled"
	case stripe.PaymentIntentStatusRequiresPaymentMethod:
		if pi.LastPaymentError == nil { // not tried yet: nothing happened
			return transition{}, false
		}
		event = "payment_intent.payment_failed"
	default:
		return transition{}, false
	}
	return intentMoves[event](pi), true
}
