package telemetry_test

// These tests change the process's environment and OpenTelemetry's global
// provider, so none of them runs in parallel.

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/example/payments/internal/otlptest"
	"github.com/example/payments/internal/telemetry"
)

// clearEnv unsets every variable that could turn tracing on from the
// environment the tests run in.
func clearEnv(t *testing.T) {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SDK_DISABLED", "OTEL_TRACES_SAMPLER", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"} {
		t.Setenv(v, "")
	}
}

func setup(t *testing.T) func(context.Context) error {
	t.Helper()
	shutdown, err := telemetry.Setup(context.Background(), "payments-test")
	require.NoError(t, err)
	t.Cleanup(func() { _ = shutdown(context.Background()) })
	return shutdown
}

func TestSetup_withoutAnEndpointTracingIsOffAndCostsNoSpan(t *testing.T) {
	clearEnv(t)
	setup(t)

	require.False(t, telemetry.Enabled())
	_, isSDK := otel.GetTracerProvider().(*sdktrace.TracerProvider)
	require.False(t, isSDK, "the global provider stays OpenTelemetry's no-op")
	ctx, span := telemetry.Tracer().Start(context.Background(), "nothing")
	require.False(t, span.IsRecording())
	require.Empty(t, telemetry.TraceParent(ctx), "no span context to store with work")
	span.End()

	// The instrumented parts ask Enabled when they are built: off, an HTTP
	// client's transport is the one given, unwrapped.
	base := http.DefaultTransport
	require.Same(t, base.(*http.Transport), telemetry.ClientTransport(base, func(*http.Request) string { return "x" }).(*http.Transport))
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = telemetry.TraceParent(context.Background()) }))
}

func TestSetup_disabledBySDKVariableExportsNothingEvenWithAnEndpoint(t *testing.T) {
	clearEnv(t)
	receiver := otlptest.NewHTTP(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.URL)
	t.Setenv("OTEL_SDK_DISABLED", "true")
	shutdown := setup(t)

	require.False(t, telemetry.Enabled())
	_, span := telemetry.Tracer().Start(context.Background(), "nothing")
	span.End()
	require.NoError(t, shutdown(context.Background()))
	require.Zero(t, receiver.Requests(), "nothing is exported")
}

func TestSetup_withAnEndpointExportsOverHTTPProtobufWithTheResourceFromTheEnvironment(t *testing.T) {
	clearEnv(t)
	receiver := otlptest.NewHTTP(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.URL)
	t.Setenv("OTEL_SERVICE_NAME", "from-the-environment")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")
	shutdown := setup(t)
	require.True(t, telemetry.Enabled())

	ctx, span := telemetry.Tracer().Start(context.Background(), "work")
	traceParent := telemetry.TraceParent(ctx)
	require.Regexp(t, `^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`, traceParent)
	span.End()
	require.NoError(t, shutdown(context.Background()), "shutdown flushes")

	spans := receiver.Spans()
	require.Len(t, spans, 1)
	require.Equal(t, "work", spans[0].Name)
	require.Equal(t, "00-"+spans[0].TraceID+"-"+spans[0].SpanID+"-01", traceParent)
	require.Equal(t, "from-the-environment", spans[0].Resource["service.name"], "OTEL_SERVICE_NAME over the default")
	require.Equal(t, "test", spans[0].Resource["deployment.environment.name"])
}

func TestSetup_theServiceNameDefaultsToTheProcesssOwn(t *testing.T) {
	clearEnv(t)
	receiver := otlptest.NewHTTP(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.URL+"/custom/path")
	shutdown := setup(t)
	_, span := telemetry.Tracer().Start(context.Background(), "work")
	span.End()
	require.NoError(t, shutdown(context.Background()))
	spans := receiver.Spans()
	require.Len(t, spans, 1, "the traces endpoint is used as it is, path included")
	require.Equal(t, "payments-test", spans[0].Resource["service.name"], "the process's own name")
}

func TestSetup_theSDKReadsTheSampler(t *testing.T) {
	clearEnv(t)
	receiver := otlptest.NewHTTP(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.URL)
	t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
	shutdown := setup(t)
	_, span := telemetry.Tracer().Start(context.Background(), "work")
	require.False(t, span.IsRecording())
	span.End()
	require.NoError(t, shutdown(context.Background()))
	require.Empty(t, receiver.Spans())
}

func TestSetup_exportsOverGRPCWhenTheProtocolSaysSo(t *testing.T) {
	clearEnv(t)
	receiver := otlptest.NewGRPC(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+receiver.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	shutdown := setup(t)
	_, span := telemetry.Tracer().Start(context.Background(), "over grpc")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, shutdown(ctx))
	spans := receiver.Spans()
	require.Len(t, spans, 1)
	require.Equal(t, "over grpc", spans[0].Name)
}

func TestSetup_refusesAProtocolItCannotExport(t *testing.T) {
	clearEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
	_, err := telemetry.Setup(context.Background(), "payments-test")
	require.ErrorIs(t, err, telemetry.ErrSettings)
	require.ErrorContains(t, err, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	require.False(t, telemetry.Enabled())
}

func TestTraceParent_roundTripsThroughParentFromAndLinkTo(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	defer span.End()
	stored := telemetry.TraceParent(ctx)

	_, child := tp.Tracer("test").Start(telemetry.ParentFrom(context.Background(), stored), "job")
	defer child.End()
	require.Equal(t, span.SpanContext().TraceID(), child.SpanContext().TraceID(), "a job carries on the request's trace")
	require.Equal(t, span.SpanContext().SpanID(), child.(sdktrace.ReadOnlySpan).Parent().SpanID())

	_, linked := tp.Tracer("test").Start(context.Background(), "resume", telemetry.LinkTo(stored)...)
	defer linked.End()
	links := linked.(sdktrace.ReadOnlySpan).Links()
	require.Len(t, links, 1)
	require.Equal(t, span.SpanContext().SpanID(), links[0].SpanContext.SpanID())
	require.NotEqual(t, span.SpanContext().TraceID(), linked.SpanContext().TraceID(), "a resumption is a trace of its own")

	require.Empty(t, telemetry.LinkTo(""))
	require.Empty(t, telemetry.LinkTo("not a traceparent"))
	require.Equal(t, context.Background(), telemetry.ParentFrom(context.Background(), "00-garbage"))
}

func TestLogHandler_namesTheTraceAndSpanOfATracedContextOnly(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(telemetry.LogHandler(slog.NewJSONHandler(&out, nil))).With(slog.String("request_id", "r1"))
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	defer span.End()

	log.InfoContext(ctx, "traced")
	log.InfoContext(context.Background(), "untraced")
	log.InfoContext(trace.ContextWithSpanContext(context.Background(), trace.SpanContext{}), "invalid span context")

	lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
	require.Len(t, lines, 3)
	var traced, untraced, invalid map[string]any
	require.NoError(t, json.Unmarshal(lines[0], &traced))
	require.NoError(t, json.Unmarshal(lines[1], &untraced))
	require.NoError(t, json.Unmarshal(lines[2], &invalid))
	require.Equal(t, span.SpanContext().TraceID().String(), traced["trace_id"])
	require.Equal(t, span.SpanContext().SpanID().String(), traced["span_id"])
	require.Equal(t, "r1", traced["request_id"], "the wrapped handler's attributes stay")
	require.NotContains(t, untraced, "trace_id")
	require.NotContains(t, invalid, "trace_id")
}
