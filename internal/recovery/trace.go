package recovery

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/example/payments/internal/telemetry"
)

// Tracing the engine (API.md section 9): the spans follow the pattern, so
// that a trace reads as the engine does.
//
//	POST /v1/payments                      (the API's server span)
//	├── recovery claim                     (claim.go; its transaction holds the local phases after it)
//	│   └── recovery phase started         (a local phase)
//	└── recovery phase payment_created     (an external phase: the Stripe call's client span, then its record)
//	    └── recovery phase payment_intent_created   (the local phase sharing that record's commit)
//
// Each phase's span carries payments.recovery_point (where the phase
// starts), payments.idempotency_key_id and payments.attempt (the key's
// lock token: 1 for the first attempt, one more for every claim since).
// A phase's SQL is under its span, except statements queued (db.Tx) and
// sent with a later phase's round trip or with the COMMIT: they show under
// the span that sent them, which is what happened.
//
// An attempt nobody's request waits on (the completer's, an operator's
// retry) is a trace of its own, "completer resume" or "operator resume",
// with a link to the trace of the request that made the key (its
// traceparent is stored on the key's row): a trace viewer shows the crash
// in one trace and, a click away, the resumption at the recovery point
// where it stopped.
//
// With tracing off (telemetry.Enabled false) none of this starts a span or
// builds an attribute: the helpers hand back their context and noEnd.

// The attributes of the engine's spans.
const (
	AttrRecoveryPoint    = "payments.recovery_point"
	AttrIdempotencyKeyID = "payments.idempotency_key_id"
	AttrAttempt          = "payments.attempt"
	attrFlow             = "payments.flow"
	attrStep             = "payments.step"
	attrResumedBy        = "payments.resumed_by"
	attrReplayed         = "payments.replayed"
)

// endSpan ends a span started by the helpers below, marking it failed
// when err is not nil.
type endSpan func(err error)

func noEnd(error) {}

func ender(span trace.Span) endSpan { return func(err error) { telemetry.End(span, err) } }

// traceClaim is claim in a span of its own, a child of the request's span.
func (e *Engine) traceClaim(ctx context.Context, req Request) (*attempt, *Response, error) {
	if !telemetry.Enabled() {
		return e.claim(ctx, req)
	}
	ctx, span := telemetry.Tracer().Start(ctx, "recovery claim")
	a, replay, err := e.claim(ctx, req)
	if span.IsRecording() {
		span.SetAttributes(attribute.String(attrFlow, req.Flow.Name))
		if a != nil {
			span.SetAttributes(keyAttributes(a.key)...)
		}
		if replay != nil {
			span.SetAttributes(attribute.Bool(attrReplayed, true))
		}
	}
	telemetry.End(span, err)
	return a, replay, err
}

// tracePhase starts the span of the phase at recovery point at.
func (a *attempt) tracePhase(ctx context.Context, at RecoveryPoint, phase Phase) (context.Context, endSpan) {
	if !telemetry.Enabled() {
		return ctx, noEnd
	}
	ctx, span := telemetry.Tracer().Start(ctx, "recovery phase "+string(at))
	if span.IsRecording() {
		span.SetAttributes(keyAttributes(a.key)...)
		span.SetAttributes(attribute.String(AttrRecoveryPoint, string(at)))
		if phase.step != "" {
			span.SetAttributes(attribute.String(attrStep, phase.step))
		}
	}
	return ctx, ender(span)
}

// traceResume starts the trace of an attempt that who (the completer, an
// operator) resumes: a new trace, begun when its claim began, linked to the
// trace of the request that made the key, with the claim as its first
// span.
func traceResume(ctx context.Context, k *Key, who string, claimStarted time.Time) (context.Context, endSpan) {
	if !telemetry.Enabled() {
		return ctx, noEnd
	}
	opts := append([]trace.SpanStartOption{trace.WithNewRoot(), trace.WithTimestamp(claimStarted)}, telemetry.LinkTo(k.traceParent)...)
	ctx, span := telemetry.Tracer().Start(ctx, who+" resume", opts...)
	if span.IsRecording() {
		span.SetAttributes(keyAttributes(k)...)
		span.SetAttributes(attribute.String(AttrRecoveryPoint, string(k.RecoveryPoint)), attribute.String(attrResumedBy, who))
		_, claim := telemetry.Tracer().Start(ctx, "recovery claim", trace.WithTimestamp(claimStarted),
			trace.WithAttributes(keyAttributes(k)...))
		claim.End()
	}
	return ctx, ender(span)
}

func keyAttributes(k *Key) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String(AttrIdempotencyKeyID, k.ID.String()),
		attribute.Int64(AttrAttempt, k.lockToken),
		attribute.String(attrFlow, k.Flow),
	}
}
