package telemetry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName names the service's own spans (the engine's phases, the jobs)
// as their instrumentation scope.
const ScopeName = "github.com/example/payments"

// ErrSettings wraps an OpenTelemetry setting this service cannot honour
// (an OTLP protocol it has no exporter for); the process stops at start-up.
var ErrSettings = errors.New("tracing settings")

// enabled is whether Setup installed an exporting provider.
var enabled atomic.Bool

// Enabled tells whether spans are exported. Instrumentation is built, and
// spans are started, only when it is true.
func Enabled() bool { return enabled.Load() }

// Setup installs the W3C TraceContext propagator and, when an OTLP endpoint
// is configured, a tracer provider that exports to it (see the package
// comment). service is the service.name of its spans unless
// OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES) names one. It returns the
// function that flushes the spans still buffered and stops exporting,
// which every process calls as it exits; with no endpoint it does nothing.
func Setup(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	nothing := func(context.Context) error { return nil }
	endpoint := cmp.Or(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	if endpoint == "" || strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return nothing, nil
	}
	exporter, err := newExporter(ctx)
	if err != nil {
		return nil, err
	}
	// The SDK's resource detectors: service.name from OTEL_SERVICE_NAME,
	// the attributes of OTEL_RESOURCE_ATTRIBUTES, the SDK's name and
	// version; ours is only the default name, which the variables override.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID())
	if err != nil {
		return nil, fmt.Errorf("%w: resource: %v", ErrSettings, err)
	}
	// No sampler is given: the SDK reads OTEL_TRACES_SAMPLER and
	// OTEL_TRACES_SAMPLER_ARG (default: parentbased_always_on, so an
	// incoming traceparent's sampled flag decides).
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	provider.Store(tp)
	enabled.Store(true)
	return func(ctx context.Context) error {
		enabled.Store(false)
		provider.Store(nil)
		return tp.Shutdown(ctx)
	}, nil
}

// provider is the exporting provider Setup installed, for Flush.
var provider atomic.Pointer[sdktrace.TracerProvider]

// Flush exports the spans that have ended and wait in the batch, at most
// until ctx ends; with tracing off it does nothing.
func Flush(ctx context.Context) error {
	if p := provider.Load(); p != nil {
		return p.ForceFlush(ctx)
	}
	return nil
}

// newExporter is the OTLP exporter of the protocol the variables name. The
// exporters read the endpoint, headers, timeout and TLS settings
// themselves.
func newExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	variable, protocol := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		variable, protocol = "OTEL_EXPORTER_OTLP_PROTOCOL", os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch protocol {
	case "", "http/protobuf":
		return otlptracehttp.New(ctx)
	case "grpc":
		return otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("%w: %s is %q: this service exports over http/protobuf or grpc", ErrSettings, variable, protocol)
	}
}

// Tracer is the tracer of the service's own spans, from the global
// provider. Call it only when Enabled.
func Tracer() trace.Tracer { return otel.Tracer(ScopeName) }

// TraceParent is the W3C traceparent of the span in ctx
// ("00-<trace id>-<span id>-<flags>"), to be stored with work that
// outlives the request; "" when ctx carries no span (tracing off).
func TraceParent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// spanContextOf parses a stored traceparent; the span context is invalid
// when traceParent is empty or malformed.
func spanContextOf(traceParent string) trace.SpanContext {
	if traceParent == "" {
		return trace.SpanContext{}
	}
	carrier := propagation.MapCarrier{"traceparent": traceParent}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
}

// ParentFrom returns ctx with the stored traceParent as its remote parent,
// so that the next span started on it carries on that trace: a job's span
// joins the trace of the request that staged the job. ctx is returned as it
// is when traceParent is empty or malformed.
func ParentFrom(ctx context.Context, traceParent string) context.Context {
	sc := spanContextOf(traceParent)
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// LinkTo is the option that links a new span to the stored traceParent's
// span (a span of another trace: the completer's attempt, linked to the
// request it resumes); no option when traceParent is empty or malformed.
func LinkTo(traceParent string) []trace.SpanStartOption {
	sc := spanContextOf(traceParent)
	if !sc.IsValid() {
		return nil
	}
	return []trace.SpanStartOption{trace.WithLinks(trace.Link{SpanContext: sc})}
}

// End ends span, marking it failed when err is not nil.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
