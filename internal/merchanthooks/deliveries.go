package merchanthooks

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/events"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stagedjobs"
	"github.com/example/payments/internal/telemetry"
)

// Delivery is one event's delivery to one endpoint.
type Delivery struct {
	Event          string
	Endpoint       string
	Status         string // pending, succeeded or failed
	Attempts       int    // every attempt, over every cycle
	LastStatusCode *int
	LastError      *string
	NextAttempt    *time.Time // while pending
	Created        time.Time
}

// Delivery statuses.
const (
	StatusPending   = "pending"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
)

// MarshalJSON renders the API's WebhookDelivery object.
func (d Delivery) MarshalJSON() ([]byte, error) {
	var next *int64
	if d.NextAttempt != nil {
		n := d.NextAttempt.Unix()
		next = &n
	}
	return json.Marshal(struct {
		Object         string  `json:"object"`
		Event          string  `json:"event"`
		Endpoint       string  `json:"endpoint"`
		Status         string  `json:"status"`
		Attempts       int     `json:"attempts"`
		LastStatusCode *int    `json:"last_status_code"`
		LastError      *string `json:"last_error"`
		NextAttempt    *int64  `json:"next_attempt"`
		Created        int64   `json:"created"`
	}{"webhook_delivery", d.Event, d.Endpoint, d.Status, d.Attempts, d.LastStatusCode, d.LastError, next, d.Created.Unix()})
}

func toDelivery(r dbsqlc.WebhookDelivery) Delivery {
	d := Delivery{Event: r.EventID, Endpoint: r.EndpointID, Status: r.Status, Attempts: int(r.Attempts), Created: r.CreatedAt}
	if r.LastStatusCode.Valid {
		code := int(r.LastStatusCode.Int32)
		d.LastStatusCode = &code
	}
	if r.LastError.Valid {
		d.LastError = &r.LastError.String
	}
	d.NextAttempt = NextAttempt(r.Status, r.NextAttemptAt, r.LeasedUntil)
	return d
}

// NextAttempt is when a delivery's next attempt is due, from its row's
// status, next_attempt_at and leased_until; nil unless it is pending. While
// an attempt is in flight it is when that attempt's lease lapses: the next
// one is made then if the attempt is not recorded by then (migration
// 000027: the claim sets the lease and leaves next_attempt_at as it was).
func NextAttempt(status string, nextAttemptAt, leasedUntil pgtype.Timestamptz) *time.Time {
	if status != StatusPending || !nextAttemptAt.Valid {
		return nil
	}
	next := nextAttemptAt.Time
	if leasedUntil.Valid && leasedUntil.Time.After(next) {
		next = leasedUntil.Time
	}
	return &next
}

// ListDeliveries returns the deliveries of the user's event eventID, one
// per endpoint it is sent to. An event of another user, or none, is
// events.ErrNotFound.
func ListDeliveries(ctx context.Context, conn dbsqlc.DBTX, userID int64, eventID string) ([]Delivery, error) {
	if _, err := events.Get(ctx, conn, userID, eventID); err != nil {
		return nil, err
	}
	rows, err := queries.ListWebhookDeliveries(ctx, conn, dbsqlc.ListWebhookDeliveriesParams{EventID: eventID, UserID: userID})
	if err != nil {
		return nil, err
	}
	out := make([]Delivery, len(rows))
	for i, r := range rows {
		out[i] = toDelivery(r)
	}
	return out, nil
}

// RedeliverParams name the event to deliver again.
type RedeliverParams struct {
	Event string `json:"event"`
}

// The redeliver flow, POST /v1/events/{id}/redeliver: one local phase.
//
//	started
//	  │ tx: every delivery of the event whose endpoint still exists and
//	  │     subscribes to it starts a new cycle, due now; one job staged per
//	  │     delivery; store 200 with the deliveries
//	  ▼
//	finished
//
// Every endpoint of the user that subscribes to the event's type and still
// exists gets it (API.md section 7), also one made after the event: a
// merchant who redelivers asks for it, where the automatic delivery never
// sends an endpoint events older than itself. Such an endpoint gets its
// delivery row here. A delivery still pending is restarted the same way as
// a finished one: its next attempt is due at once, and the job of its
// earlier cycle, when it runs, stops unsent.
func (s *Service) redeliverFlow() *recovery.Flow {
	return recovery.NewFlow("redeliver_event",
		recovery.From(recovery.Started, recovery.LocalPhase(s.restartDeliveries),
			recovery.Finished),
	)
}

// Redeliver runs the redeliver flow for req (whose Params and Flow it
// sets). The caller has checked that the event is the user's.
func (s *Service) Redeliver(ctx context.Context, req recovery.Request, p RedeliverParams) (recovery.Response, error) {
	req.Params = p
	return s.redeliver.Execute(ctx, req)
}

func (s *Service) restartDeliveries(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
	var p RedeliverParams
	if err := k.DecodeParams(&p); err != nil {
		return recovery.Outcome{}, err
	}
	event, err := events.Get(ctx, tx, k.UserID, p.Event)
	if err != nil {
		return recovery.Outcome{}, fmt.Errorf("reading event %s to redeliver: %w", p.Event, err)
	}
	if _, err := queries.InsertWebhookDeliveries(ctx, tx, dbsqlc.InsertWebhookDeliveriesParams{
		EventID: event.ID, UserID: k.UserID, Patterns: stagedjobs.SubscriptionPatterns(event.Type), EventCreated: db.EndOfTime,
	}); err != nil {
		return recovery.Outcome{}, fmt.Errorf("adding the endpoints made since event %s: %w", event.ID, err)
	}
	tp := telemetry.TraceParent(ctx)
	rows, err := queries.RestartWebhookDeliveries(ctx, tx, dbsqlc.RestartWebhookDeliveriesParams{
		EventID: event.ID, UserID: k.UserID, Patterns: stagedjobs.SubscriptionPatterns(event.Type), IdempotencyKeyID: &k.ID,
		TraceParent: pgtype.Text{String: tp, Valid: tp != ""}, // the attempts carry on this request's trace
	})
	if err != nil {
		return recovery.Outcome{}, fmt.Errorf("restarting the deliveries of %s: %w", event.ID, err)
	}
	// Each delivery is due now: the webhook dispatcher (Dispatcher) claims
	// it once this commits. The rows carry the key that restarted them.
	deliveries := make([]Delivery, len(rows))
	for i, r := range rows {
		deliveries[i] = toDelivery(r)
	}
	return recovery.RespondJSON(200, struct {
		Object  string     `json:"object"`
		Data    []Delivery `json:"data"`
		HasMore bool       `json:"has_more"`
	}{"list", deliveries, false})
}
