package payments

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

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
// made in Stripe's dashboard). So every payment that Stripe could still
// change is asked about Config.After after it was made (or got a new
// refund), and again with back-off, until Stripe can no longer change it
// (then it leaves the queue: RetireUnwatchedPayments):
//
//	claim     one statement takes a batch of due payments FOR UPDATE SKIP
//	          LOCKED and sets each one's next check (ClaimPaymentsToReconcile),
//	          and commits: a second reconciler running at once takes others,
//	          so no payment is read twice in a round
//	read      Stripe's consistent endpoints, never its search: the
//	          PaymentIntent (GET /v1/payment_intents/{id}) of a payment that
//	          is processing or requires_capture; the refunds of a captured
//	          one (GET /v1/refunds?payment_intent=...), at most Config.Rate
//	          calls a second
//	apply     a difference goes through the webhooks' code (applyMove,
//	          applyStripeRefundTx), in a transaction under the payment's row
//	          lock, so its event is staged once whichever of the webhook and
//	          the reconciler applies it first; a refund Stripe lists that no
//	          row of ours is becomes a refund of origin external
//
// Stripe's 429 ends the pass: the payments not yet asked about are due
// again once the pause (rateLimitPause) is over, and no pass calls Stripe
// before then. Any other failure to reach Stripe ends the pass too, with an
// error, and the next pass starts over.
//
// Which payments Stripe could still change, and for how long
// (ClaimPaymentsToReconcile):
//
//	processing with a PaymentIntent   until it moves
//	requires_capture                  until it moves, or authorisationWatch after it was made
//	succeeded with money to refund    refundWatch after it was made (dashboard refunds)
//	with a pending refund             until the refund settles
//	with a succeeded refund           refundWatch after the refund was made (it may still fail)

// authorisationWatch is how long after its creation an authorisation is
// asked about: Stripe cancels an uncaptured card authorisation after 7 days
// (docs.stripe.com/payments/place-a-hold-on-a-payment-method: an online card
// payment's authorisation is valid for 7 days), and a day more leaves
// Stripe time to do so.
const authorisationWatch = 8 * 24 * time.Hour

// refundWatch is how long after a succeeded refund was made the reconciler
// still asks whether it failed, and how long after a payment was made it
// still looks for refunds made outside the service. Stripe says a refund
// to a card can fail when the issuer cannot process it, and then sends
// charge.refund.updated (docs.stripe.com/refunds, "Failed refunds"), but
// publishes no bound on how late. Its support pages give 5 to 10 business
// days for a refund to reach the customer; 30 days is a generous multiple
// of that, chosen here, not Stripe's number. Past it, only a webhook
// tells. The back-off keeps the cost small: about log2(cap/after) checks
// and then one per BackoffCap.
const refundWatch = 30 * 24 * time.Hour

// rateLimitPause is how long the reconciler leaves Stripe alone after a
// 429: Stripe asks clients that hit its limits to back off exponentially
// (docs.stripe.com/rate-limits); one pause of this length per 429, with
// the next interval after it, is that back-off at the rate this job runs.
const rateLimitPause = 10 * time.Second

// ReconcilerConfig configures a Reconciler. Zero values take the defaults.
type ReconcilerConfig struct {
	// After is how long after a payment was made (or got a new refund)
	// it is first asked about, and the first step of its back-off. (Not
	// after its last change: a move must not touch the reconciler's
	// index, see migration 000018, so a webhook that brought word does
	// not postpone the check; the check then finds nothing to correct.) Default 5m.
	After time.Duration
	// BackoffCap bounds the back-off between two checks of one payment.
	// Default 6h.
	BackoffCap time.Duration
	// Rate is how many Stripe calls a second the reconciler makes at most
	// (a burst of one). Default 20: a fifth of Stripe's live-mode limit of
	// 100 read operations a second (docs.stripe.com/rate-limits), leaving
	// the rest to the flows.
	Rate float64
	// Batch is how many payments a pass claims. Default 100.
	Batch int
	// Now is the clock; nil: the database's.
	Now      func() time.Time
	Logger   *slog.Logger
	Registry prometheus.Registerer
}

// Reconciler re-reads from Stripe what Stripe could still change.
type Reconciler struct {
	s       *Service
	cfg     ReconcilerConfig
	limiter *rate.Limiter
	log     *slog.Logger

	mu          sync.Mutex
	pausedUntil time.Time // after a 429

	checked, corrected *prometheus.CounterVec
	calls              *prometheus.CounterVec
}

// NewReconciler returns a Reconciler over the service's pool and Stripe client.
func (s *Service) NewReconciler(cfg ReconcilerConfig) *Reconciler {
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
		checked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payments_reconciler_checked_total",
			Help: "Payments the reconciler asked Stripe about, by what it asked (payment_intent, refunds).",
		}, []string{"read"}),
		corrected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payments_reconciler_corrected_total",
			Help: "Differences the reconciler found and applied, by what (payment, refund, external_refund).",
		}, []string{"what"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payments_reconciler_stripe_calls_total",
			Help: "Stripe calls the reconciler made, by outcome (ok, rate_limited, refused, error).",
		}, []string{"outcome"}),
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(r.checked, r.corrected, r.calls)
	}
	return r
}

// Batch is how many payments a pass claims at most.
func (r *Reconciler) Batch() int { return r.cfg.Batch }

// ReconcileRun is what one pass did.
type ReconcileRun struct {
	Claimed   int  // payments due a check, taken for this pass
	Checked   int  // of those, payments Stripe was asked about
	Corrected int  // differences applied (a payment's move, a refund's move, an external refund)
	Refused   int  // Stripe would not show the object (a 404, say): the back-off retries it
	Paused    bool // Stripe answered 429 (in this pass or one before): nothing more until the pause ends
}

// errRateLimited ends a pass on Stripe's 429.
var errRateLimited = errors.New("stripe rate limit")

// RunOnce makes one pass: it claims up to a batch of due payments and asks
// Stripe about each. A 429 from Stripe ends it with Paused and no error.
func (r *Reconciler) RunOnce(ctx context.Context) (ReconcileRun, error) {
	var run ReconcileRun
	if r.paused() {
		run.Paused = true
		return run, nil
	}
	// Payments Stripe can no longer change leave the reconciler's queue
	// first, a batch at a time, so that they never pile up in it.
	if _, err := queries.RetireUnwatchedPayments(ctx, r.s.pool, dbsqlc.RetireUnwatchedPaymentsParams{
		Now: r.now(), WatchSeconds: refundWatch.Seconds(),
		AuthorisationSeconds: authorisationWatch.Seconds(), RowLimit: int32(10 * r.cfg.Batch),
	}); err != nil {
		return run, fmt.Errorf("retiring payments Stripe can no longer change: %w", err)
	}
	rows, err := queries.ClaimPaymentsToReconcile(ctx, r.s.pool, dbsqlc.ClaimPaymentsToReconcileParams{
		Now: r.now(), AfterSeconds: r.cfg.After.Seconds(), WatchSeconds: refundWatch.Seconds(),
		AuthorisationSeconds: authorisationWatch.Seconds(), BackoffCapSeconds: r.cfg.BackoffCap.Seconds(),
		RowLimit: int32(r.cfg.Batch),
	})
	if err != nil {
		return run, fmt.Errorf("claiming payments to reconcile: %w", err)
	}
	run.Claimed = len(rows)
	for i, row := range rows {
		corrected, err := r.check(ctx, row)
		run.Corrected += corrected
		switch {
		case err == nil:
			run.Checked++
			continue
		case errors.Is(err, errRateLimited):
			run.Paused = true
			r.pause()
			r.log.WarnContext(ctx, "reconciler: Stripe answered 429; pausing", slog.Duration("pause", rateLimitPause),
				slog.Int("left", len(rows)-i))
			return run, r.release(ctx, rows[i:], r.clock().Add(rateLimitPause))
		case stripeclient.Classify(err) == stripeclient.Terminal:
			run.Checked++
			run.Refused++
			r.log.WarnContext(ctx, "reconciler: Stripe refused to show a payment's objects", slog.String("payment", row.ID),
				slog.String("error", err.Error()))
			continue
		default:
			return run, errors.Join(fmt.Errorf("reconciling payment %s: %w", row.ID, err), r.release(ctx, rows[i:], r.clock()))
		}
	}
	return run, nil
}

// check asks Stripe about one claimed payment and applies what differs. It
// returns how many differences it applied.
func (r *Reconciler) check(ctx context.Context, row dbsqlc.Payment) (int, error) {
	pay, err := fromRow(row)
	if err != nil {
		return 0, err
	}
	intent := *pay.StripePaymentIntent // the claim takes only payments with one
	corrected := 0
	if pay.Status == StatusProcessing || pay.Status == StatusRequiresCapture {
		var pi *stripe.PaymentIntent
		if err := r.call(ctx, func() (err error) { pi, err = r.s.stripe.GetPaymentIntent(ctx, intent); return err }); err != nil {
			return 0, err
		}
		r.checked.WithLabelValues("payment_intent").Inc()
		t, ok := intentStatusMove(pay, pi)
		if ok {
			var moved bool
			err := db.WithTx(ctx, r.s.pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
				locked, err := lockPayment(ctx, tx, pay.ID)
				if err != nil {
					return err
				}
				pay, moved, err = applyMove(ctx, tx, nil, locked, t)
				return err
			})
			if err != nil {
				return 0, fmt.Errorf("applying PaymentIntent %s: %w", intent, err)
			}
			if moved {
				corrected++
				r.corrected.WithLabelValues("payment").Inc()
				r.log.InfoContext(ctx, "reconciler: payment corrected", slog.String("payment", pay.ID), slog.String("status", string(pay.Status)))
			}
		}
	}
	if pay.Status != StatusSucceeded || !pay.Captured() {
		return corrected, nil
	}
	var refunds []*stripe.Refund
	if err := r.call(ctx, func() (err error) { refunds, err = r.s.stripe.ListRefunds(ctx, intent); return err }); err != nil {
		return corrected, err
	}
	r.checked.WithLabelValues("refunds").Inc()
	// Oldest first, as they were made: an external refund's events then
	// come in Stripe's order.
	for i := len(refunds) - 1; i >= 0; i-- {
		var change refundChange
		err := db.WithTx(ctx, r.s.pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
			locked, err := lockPayment(ctx, tx, pay.ID)
			if err != nil {
				return err
			}
			change, err = applyStripeRefundTx(ctx, tx, locked, refunds[i])
			return err
		})
		if err != nil {
			return corrected, fmt.Errorf("applying refund %s: %w", refunds[i].ID, err)
		}
		if change != refundUnchanged {
			corrected++
			r.corrected.WithLabelValues(string(change)).Inc()
			r.log.InfoContext(ctx, "reconciler: refund corrected", slog.String("payment", pay.ID),
				slog.String("stripe_refund", refunds[i].ID), slog.String("change", string(change)))
		}
	}
	return corrected, nil
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

// release makes claimed payments the pass did not get to due again at
// at, their back-off as it was: one never checked (reconcile_checks back
// to 0) is due After past its next_check_at, so that is set After earlier.
func (r *Reconciler) release(ctx context.Context, rows []dbsqlc.Payment, at time.Time) error {
	ctx = context.WithoutCancel(ctx)
	for _, row := range rows {
		due := at
		if row.ReconcileChecks <= 1 { // as claimed: the claim counted one more
			due = at.Add(-r.cfg.After)
		}
		if err := queries.ReleaseReconcileClaim(ctx, r.s.pool, dbsqlc.ReleaseReconcileClaimParams{ID: row.ID, NextCheckAt: due}); err != nil {
			return fmt.Errorf("releasing payment %s: %w", row.ID, err)
		}
	}
	return nil
}

// clock is the injected clock, else the wall clock.
func (r *Reconciler) clock() time.Time {
	if r.cfg.Now != nil {
		return r.cfg.Now()
	}
	return time.Now()
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
// the service does not act on (requires_action, say, or an authorisation
// of a payment made with capture=true) is no move.
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
