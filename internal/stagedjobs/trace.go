package stagedjobs

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/telemetry"
)

// Tracing the staged jobs (API.md section 9: "the staged jobs it caused,
// and the webhook deliveries they made, carry on the same trace").
//
// A trace's context travels with the work, as a W3C traceparent:
//
//  1. StageTx stores the traceparent of the span staging the jobs (the
//     request's phase, a Stripe webhook's request, a completer's attempt)
//     in staged_jobs.trace_parent: NULL when it is not traced.
//  2. The drain copies it into the River job's metadata (not its
//     arguments, which River may index and compare), and gives each
//     delivery of an event the traceparent of the event's staged job
//     (webhook_deliveries.trace_parent). The events it writes itself get a
//     span each in their request's trace ("stagedjobs write event").
//  3. TraceJobs, River middleware, starts each job's span ("job
//     receipt_email", ...) as a child of that traceparent, and the webhook
//     dispatcher each attempt's ("webhook delivery", with its HTTP client
//     span), so the receipt and every attempt at a delivery are in the
//     trace of the request that caused them.
//
// Child, not link: the job is the request's work, done later, and a reader
// of the request's trace wants to see that its receipt went out and its
// webhook was delivered (and every failed attempt) without leaving it. The
// price is a trace that lasts as long as its last delivery attempt; the
// completer's attempts, which a person reads as a second chapter, link
// instead (internal/recovery).
//
// Jobs staged by nothing traced (the periodic jobs, work staged with
// tracing off) carry no traceparent and make no span.

// traceParentOf is the traceparent to store with jobs staged in ctx.
func traceParentOf(ctx context.Context) pgtype.Text {
	tp := telemetry.TraceParent(ctx)
	return pgtype.Text{String: tp, Valid: tp != ""}
}

// traceMetadata is the part of a River job's metadata that carries its
// trace.
type traceMetadata struct {
	TraceParent string `json:"traceparent"`
}

// tracedInsertOpts are the insert options that carry traceParent into a
// River job's metadata; nil (the job's own options) when there is none.
func tracedInsertOpts(traceParent pgtype.Text) *river.InsertOpts {
	if !traceParent.Valid {
		return nil
	}
	metadata, _ := json.Marshal(traceMetadata{TraceParent: traceParent.String}) // a struct of one string: cannot fail
	return &river.InsertOpts{Metadata: metadata}
}

// tracedEvent is a traced staged event, as the drain's trace needs it.
type tracedEvent struct {
	EventID     string `json:"event_id"`
	Type        string `json:"type"`
	traceParent pgtype.Text
}

// tracedEvents are the traced events among jobs, by event id. Only a
// traced job's arguments are read, so with tracing off it costs nothing.
func tracedEvents(jobs []dbsqlc.StagedJob) map[string]tracedEvent {
	var traced map[string]tracedEvent
	for _, job := range jobs {
		if job.Kind != string(MerchantEvent) || !job.TraceParent.Valid {
			continue
		}
		ev := tracedEvent{traceParent: job.TraceParent}
		if json.Unmarshal(job.Args, &ev) != nil {
			continue
		}
		if traced == nil {
			traced = map[string]tracedEvent{}
		}
		traced[ev.EventID] = ev
	}
	return traced
}

// traceEventWrites starts a span for each traced event the drain writes,
// in its request's trace, and returns what ends them all.
func traceEventWrites(ctx context.Context, traced map[string]tracedEvent, batch int) func(error) {
	if len(traced) == 0 || !telemetry.Enabled() {
		return func(error) {}
	}
	spans := make([]trace.Span, 0, len(traced))
	for _, ev := range traced {
		_, span := telemetry.Tracer().Start(telemetry.ParentFrom(ctx, ev.traceParent.String), "stagedjobs write event",
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attribute.String("payments.event_id", ev.EventID), attribute.String("payments.event_type", ev.Type),
				attribute.Int("payments.drain_batch_size", batch)))
		spans = append(spans, span)
	}
	return func(err error) {
		for _, span := range spans {
			telemetry.End(span, err)
		}
	}
}

// TraceJobs is River middleware that starts a span for each job that
// carries a trace in its metadata, as a child of the span that staged it.
// Install it on the River client (internal/worker).
type TraceJobs struct {
	river.MiddlewareDefaults
}

var _ rivertype.WorkerMiddleware = (*TraceJobs)(nil)

// Work runs the job inside its span.
func (*TraceJobs) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	if !telemetry.Enabled() {
		return doInner(ctx)
	}
	var md traceMetadata
	if json.Unmarshal(job.Metadata, &md) != nil || md.TraceParent == "" {
		return doInner(ctx)
	}
	ctx, span := telemetry.Tracer().Start(telemetry.ParentFrom(ctx, md.TraceParent), "job "+job.Kind,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.Int64("river.job.id", job.ID), attribute.String("river.job.kind", job.Kind),
			attribute.String("river.queue", job.Queue), attribute.Int("river.job.attempt", job.Attempt)))
	err := doInner(ctx)
	telemetry.End(span, err)
	return err
}
