// Package webhooks receives Stripe's webhook events and applies each
// exactly once: the inbox pattern. Stripe delivers an event at least once,
// in any order, signed with the endpoint's secret. A delivery is verified
// (stripe-go's webhook package: HMAC compared in constant time, timestamp
// within a tolerance window), then, in one SERIALIZABLE transaction, its id
// goes into the stripe_events inbox and its effect is applied; a repeat finds
// the id and changes nothing. What an event does to a payment is package
// payments' business (ApplyIntentEventTx, ApplyChargeRefundedTx,
// ApplyRefundEventTx for charge.refund.updated); event
// types it does not apply are acknowledged and recorded.
package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/payments"
)

// Outcomes besides payments.EventOutcome.
const (
	OutcomeDuplicate payments.EventOutcome = "duplicate" // seen before: nothing done
	OutcomeIgnored   payments.EventOutcome = "ignored"   // a type we do not apply: recorded only
)

// ErrSignature is returned for a delivery whose signature does not verify:
// wrong secret, tampered payload, or a timestamp outside the tolerance.
var ErrSignature = errors.New("webhook signature does not verify")

// Config configures a Receiver.
type Config struct {
	Pool   *pgxpool.Pool
	Secret string // whsec_...; empty refuses every delivery
	// Tolerance is how old a signature's timestamp may be. Default 5 minutes,
	// as Stripe recommends: it bounds how long a captured delivery can be replayed.
	Tolerance time.Duration
	Logger    *slog.Logger
	Registry  prometheus.Registerer
}

// Receiver verifies and applies Stripe's webhook deliveries.
type Receiver struct {
	cfg      Config
	log      *slog.Logger
	received *prometheus.CounterVec
}

// NewReceiver returns a Receiver.
func NewReceiver(cfg Config) *Receiver {
	if cfg.Tolerance <= 0 {
		cfg.Tolerance = webhook.DefaultTolerance
	}
	r := &Receiver{cfg: cfg, log: cfg.Logger, received: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "payments_stripe_webhooks_total",
		Help: "Stripe webhook deliveries, by outcome (applied, no_change, stale, unmatched, ignored, duplicate, bad_signature).",
	}, []string{"outcome"})}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(r.received)
	}
	return r
}

// Receive verifies one delivery and applies its event once.
func (r *Receiver) Receive(ctx context.Context, payload []byte, signature string) (payments.EventOutcome, error) {
	event, err := r.verify(payload, signature)
	if err != nil {
		r.received.WithLabelValues("bad_signature").Inc()
		return "", err
	}
	occurred := time.Unix(event.Created, 0)
	var outcome payments.EventOutcome
	err = db.WithTx(ctx, r.cfg.Pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
		n, err := queries.InsertStripeEvent(ctx, tx, dbsqlc.InsertStripeEventParams{
			ID: event.ID, Type: string(event.Type), OccurredAt: occurred,
		})
		if err != nil || n == 0 {
			outcome = OutcomeDuplicate
			return err
		}
		if outcome, err = apply(ctx, tx, event, occurred); err != nil {
			return err
		}
		return queries.SetStripeEventOutcome(ctx, tx, dbsqlc.SetStripeEventOutcomeParams{ID: event.ID, Outcome: string(outcome)})
	})
	if errors.Is(err, db.ErrUniqueViolation) { // the same event, delivered twice at once: the other delivery applied it
		outcome, err = OutcomeDuplicate, nil
	}
	if err != nil {
		return "", err
	}
	r.received.WithLabelValues(string(outcome)).Inc()
	r.log.InfoContext(ctx, "stripe webhook", slog.String("event_id", event.ID), slog.String("type", string(event.Type)),
		slog.String("outcome", string(outcome)))
	return outcome, nil
}

func (r *Receiver) verify(payload []byte, signature string) (stripe.Event, error) {
	if r.cfg.Secret == "" {
		return stripe.Event{}, fmt.Errorf("%w: no webhook secret is configured (STRIPE_WEBHOOK_SECRET)", ErrSignature)
	}
	event, err := webhook.ConstructEventWithOptions(payload, signature, r.cfg.Secret, webhook.ConstructEventOptions{
		Tolerance: r.cfg.Tolerance,
		// Only the fields we read matter; an account on a newer API version
		// must not have every delivery refused.
		IgnoreAPIVersionMismatch: true,
	})
	if err != nil {
		return stripe.Event{}, fmt.Errorf("%w: %v", ErrSignature, err)
	}
	return event, nil
}

// apply hands the event to the payments package, by type.
func apply(ctx context.Context, tx *db.Tx, event stripe.Event, occurred time.Time) (payments.EventOutcome, error) {
	switch {
	case payments.HandlesIntentEvent(string(event.Type)):
		var pi stripe.PaymentIntent
		if err := json.Unmarshal(event.Data.Raw, &pi); err != nil {
			return "", fmt.Errorf("decoding %s: %w", event.Type, err)
		}
		return payments.ApplyIntentEventTx(ctx, tx, string(event.Type), &pi, occurred)
	case event.Type == "charge.refunded":
		var ch stripe.Charge
		if err := json.Unmarshal(event.Data.Raw, &ch); err != nil {
			return "", fmt.Errorf("decoding %s: %w", event.Type, err)
		}
		return payments.ApplyChargeRefundedTx(ctx, tx, &ch)
	case payments.HandlesRefundEvent(string(event.Type)):
		var re stripe.Refund
		if err := json.Unmarshal(event.Data.Raw, &re); err != nil {
			return "", fmt.Errorf("decoding %s: %w", event.Type, err)
		}
		return payments.ApplyRefundEventTx(ctx, tx, &re)
	default:
		return OutcomeIgnored, nil
	}
}

var queries = dbsqlc.New()
