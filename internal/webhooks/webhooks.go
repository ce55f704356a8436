// Package webhooks receives Stripe's webhook events and applies each
// exactly once: the inbox pattern. Stripe delivers an event at least once,
// in any order, signed with the endpoint's secret. A delivery is verified
// (stripe-go's webhook package: HMAC compared in constant time, timestamp
// within a tolerance window), then, in one SERIALIZABLE transaction, its id
// goes into the stripe_events inbox and its effect is applied; a repeat finds
// the id and changes nothing. What an event does to a payment is package
// payments' business (ApplyIntentEventTx, ApplyChargeRefundedTx,
// ApplyRefundEventTx for charge.refund.updated, ApplyDisputeEventTx for
// charge.dispute.*); event
// types it does not apply are acknowledged and recorded.
//
// A signed event that cannot be decoded or applied (another API version's
// shape, an id that is no string, text with NUL, invalid UTF-8) is
// acknowledged too, and kept aside as unprocessable with its reason
// (stripe_events_unprocessable, migration 000019), for an operator: a 5xx
// would have Stripe deliver it again for days, to the same end. Text that
// PostgreSQL cannot hold (NUL, invalid UTF-8) is found before any SQL
// runs; the body itself is kept as bytes.
//
// The secret may be several, separated by commas, so that a secret can be
// rolled without losing events: a delivery signed with any of them is
// taken.
package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"
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
	// OutcomeUnprocessable: signed, but not an event the service can
	// decode or apply: kept aside, with the reason, for an operator.
	OutcomeUnprocessable payments.EventOutcome = "unprocessable"
)

// ErrSignature is returned for a delivery whose signature does not verify:
// wrong secret, tampered payload, or a timestamp outside the tolerance.
var ErrSignature = errors.New("webhook signature does not verify")

// Config configures a Receiver.
type Config struct {
	Pool *pgxpool.Pool
	// Secret is the endpoint's signing secret (whsec_...), or several
	// separated by commas while one is rolled: a delivery signed with any
	// of them is taken. Empty refuses every delivery.
	Secret string
	// Tolerance is how old a signature's timestamp may be. Default 5 minutes,
	// as Stripe recommends: it bounds how long a captured delivery can be replayed.
	Tolerance time.Duration
	Logger    *slog.Logger
	Registry  prometheus.Registerer
}

// Receiver verifies and applies Stripe's webhook deliveries.
type Receiver struct {
	cfg           Config
	secrets       []string
	log           *slog.Logger
	received      *prometheus.CounterVec
	unprocessable prometheus.Counter
}

// NewReceiver returns a Receiver.
func NewReceiver(cfg Config) *Receiver {
	if cfg.Tolerance <= 0 {
		cfg.Tolerance = webhook.DefaultTolerance
	}
	r := &Receiver{cfg: cfg, secrets: splitSecrets(cfg.Secret), log: cfg.Logger,
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payments_stripe_webhooks_total",
			Help: "Stripe webhook deliveries, by outcome (applied, no_change, stale, unmatched, ignored, duplicate, unprocessable, bad_signature).",
		}, []string{"outcome"}),
		unprocessable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "payments_stripe_events_unprocessable_total",
			Help: "Signed Stripe events the service could not decode or apply, kept aside for an operator (`payments stripe-events list --unprocessable`).",
		}),
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(r.received, r.unprocessable)
	}
	return r
}

// splitSecrets reads STRIPE_WEBHOOK_SECRET's comma-separated secrets,
// without blanks.
func splitSecrets(secret string) []string {
	var out []string
	for _, s := range strings.Split(secret, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Receive verifies one delivery and applies its event once. A signed
// delivery that is not an event the service can decode or apply is
// OutcomeUnprocessable, kept aside, and not an error: only a failure of
// the service itself (the database) is.
func (r *Receiver) Receive(ctx context.Context, payload []byte, signature string) (payments.EventOutcome, error) {
	if err := r.verify(payload, signature); err != nil {
		r.received.WithLabelValues("bad_signature").Inc()
		return "", err
	}
	return r.Apply(ctx, payload)
}

// Apply applies one event, given as the bytes Stripe sent, once: what
// Receive does after the signature verified. The reconciler's reading of
// Stripe's event log (GET /v1/events) applies each event it lists through
// it, so an event is applied once whichever way it came, webhook or log,
// through one code path and one record of event ids (stripe_events).
func (r *Receiver) Apply(ctx context.Context, payload []byte) (payments.EventOutcome, error) {
	event, err := decodeEvent(payload)
	if err != nil {
		return r.keepAside(ctx, payload, err)
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
	var bad *unprocessableError
	switch {
	case errors.As(err, &bad):
		// Nothing of it was applied (the transaction rolled back), and its
		// id is not in the inbox: a corrected delivery may still be applied.
		return r.keepAside(ctx, payload, err)
	case errors.Is(err, db.ErrUniqueViolation): // the same event, delivered twice at once: the other delivery applied it
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

// verify checks the delivery's Stripe-Signature against each secret: one
// of its v1 signatures must be the HMAC of the payload under one of them,
// made within the tolerance.
func (r *Receiver) verify(payload []byte, signature string) error {
	if len(r.secrets) == 0 {
		return fmt.Errorf("%w: no webhook secret is configured (STRIPE_WEBHOOK_SECRET)", ErrSignature)
	}
	var err error
	for _, secret := range r.secrets {
		if err = webhook.ValidatePayloadWithTolerance(payload, signature, secret, r.cfg.Tolerance); err == nil {
			return nil
		}
	}
	return fmt.Errorf("%w: %v", ErrSignature, err)
}

// unprocessableError is why a signed delivery cannot be decoded or applied.
type unprocessableError struct{ reason string }

func (e *unprocessableError) Error() string { return "unprocessable event: " + e.reason }

func unprocessable(format string, args ...any) error {
	return &unprocessableError{reason: fmt.Sprintf(format, args...)}
}

// decodeEvent decodes a verified delivery, or says why it cannot be: it is
// not valid UTF-8, a string in it holds NUL (which PostgreSQL's text cannot
// hold), or it is not an event of the shape this service reads. It checks
// every string of the body, keys included, before any of it goes near SQL.
func decodeEvent(payload []byte) (stripe.Event, error) {
	if !utf8.Valid(payload) {
		return stripe.Event{}, unprocessable("the body is not valid UTF-8")
	}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return stripe.Event{}, unprocessable("the body is not JSON: %v", err)
	}
	if path, ok := findNUL(doc, "$"); ok {
		return stripe.Event{}, unprocessable("%s holds a NUL character", path)
	}
	if _, ok := doc.(map[string]any); !ok {
		return stripe.Event{}, unprocessable("the body is not a JSON object")
	}
	var event stripe.Event
	if err := json.Unmarshal(payload, &event); err != nil {
		return stripe.Event{}, unprocessable("not an event of the shape this service reads (API version %s): %v", stripe.APIVersion, err)
	}
	switch {
	case event.ID == "":
		return stripe.Event{}, unprocessable("the event has no id")
	case event.Type == "":
		return stripe.Event{}, unprocessable("the event has no type")
	case event.Data == nil || len(event.Data.Raw) == 0:
		return stripe.Event{}, unprocessable("the event has no data.object")
	case len(event.ID) > 255 || len(event.Type) > 255:
		return stripe.Event{}, unprocessable("the event's id or type is over 255 bytes")
	}
	return event, nil
}

// findNUL returns the JSON path of the first string (or key) in v that
// holds U+0000.
func findNUL(v any, path string) (string, bool) {
	switch v := v.(type) {
	case string:
		return path, strings.IndexByte(v, 0) >= 0
	case map[string]any:
		for k, e := range v {
			if strings.IndexByte(k, 0) >= 0 {
				return path + " (a key)", true
			}
			if p, ok := findNUL(e, path+"."+k); ok {
				return p, true
			}
		}
	case []any:
		for i, e := range v {
			if p, ok := findNUL(e, fmt.Sprintf("%s[%d]", path, i)); ok {
				return p, true
			}
		}
	}
	return "", false
}

// keepAside records a signed delivery that cannot be decoded or applied,
// with why, once per body, and acknowledges it.
func (r *Receiver) keepAside(ctx context.Context, payload []byte, why error) (payments.EventOutcome, error) {
	eventID, eventType := peekIDAndType(payload)
	reason := cleanText(strings.TrimPrefix(why.Error(), "unprocessable event: "), 1000)
	if _, err := queries.InsertUnprocessableStripeEvent(ctx, r.cfg.Pool, dbsqlc.InsertUnprocessableStripeEventParams{
		EventID: eventID, EventType: eventType, Reason: reason, Payload: payload,
	}); err != nil {
		return "", err
	}
	r.unprocessable.Inc()
	r.received.WithLabelValues(string(OutcomeUnprocessable)).Inc()
	r.log.WarnContext(ctx, "stripe webhook unprocessable: kept aside for an operator",
		slog.String("event_id", eventID.String), slog.String("type", eventType.String), slog.String("reason", reason))
	return OutcomeUnprocessable, nil
}

// peekIDAndType reads what it can of an unprocessable event's id and type:
// each only when it is clean text (a string, valid UTF-8, no NUL, at most
// 255 bytes); NULL otherwise.
func peekIDAndType(payload []byte) (id, eventType pgtype.Text) {
	var head struct {
		ID   any `json:"id"`
		Type any `json:"type"`
	}
	if json.Unmarshal(payload, &head) != nil {
		return id, eventType
	}
	return cleanField(head.ID), cleanField(head.Type)
}

func cleanField(v any) pgtype.Text {
	s, ok := v.(string)
	if !ok || s == "" || len(s) > 255 || !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
		return pgtype.Text{}
	}
	return pgtype.Text{String: s, Valid: true}
}

// cleanText makes s storable as text: valid UTF-8, NUL written as \x00,
// at most max bytes.
func cleanText(s string, max int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", `\x00`)
	if len(s) > max {
		s = strings.ToValidUTF8(s[:max], "")
	}
	return s
}

// apply hands the event to the payments package, by type.
func apply(ctx context.Context, tx *db.Tx, event stripe.Event, occurred time.Time) (payments.EventOutcome, error) {
	switch {
	case payments.HandlesIntentEvent(string(event.Type)):
		var pi stripe.PaymentIntent
		if err := json.Unmarshal(event.Data.Raw, &pi); err != nil {
			return "", unprocessable("decoding %s's object: %v", event.Type, err)
		}
		return payments.ApplyIntentEventTx(ctx, tx, string(event.Type), &pi, occurred)
	case event.Type == "charge.refunded":
		var ch stripe.Charge
		if err := json.Unmarshal(event.Data.Raw, &ch); err != nil {
			return "", unprocessable("decoding %s's object: %v", event.Type, err)
		}
		return payments.ApplyChargeRefundedTx(ctx, tx, &ch)
	case payments.HandlesRefundEvent(string(event.Type)):
		var re stripe.Refund
		if err := json.Unmarshal(event.Data.Raw, &re); err != nil {
			return "", unprocessable("decoding %s's object: %v", event.Type, err)
		}
		return payments.ApplyRefundEventTx(ctx, tx, &re)
	case payments.HandlesDisputeEvent(string(event.Type)):
		var dp stripe.Dispute
		if err := json.Unmarshal(event.Data.Raw, &dp); err != nil {
			return "", unprocessable("decoding %s's object: %v", event.Type, err)
		}
		return payments.ApplyDisputeEventTx(ctx, tx, &dp, occurred)
	default:
		return OutcomeIgnored, nil
	}
}

var queries = dbsqlc.New()
