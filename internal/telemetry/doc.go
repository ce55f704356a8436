// Package telemetry sets up OpenTelemetry tracing for the service's
// processes, from OpenTelemetry's own environment variables, and holds the
// few helpers that the packages which trace share.
//
// Tracing is on when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (and OTEL_SDK_DISABLED is not
// true): Setup then installs the SDK's tracer provider, exporting over OTLP,
// http/protobuf unless OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL says grpc. Everything else (the endpoint's
// path, headers, timeouts, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER, the batch processor's OTEL_BSP_* settings) is read by
// the SDK itself, as its documentation says; this package decides only
// whether to export and over which protocol.
//
// Tracing off must cost nothing measurable (API.md section 9). So the
// global provider stays OpenTelemetry's no-op, and every instrumented part
// asks Enabled once, when it is built (the HTTP server and clients, the SQL
// tracer), or before it starts a span of its own (the engine's phases, the
// jobs): with tracing off no span is started, no attribute is built and no
// instrumentation wraps anything.
//
// A trace's context outlives a request in two places, as a W3C
// traceparent string (TraceParent, ParentFrom, LinkTo): on an idempotency
// key's row, for the completer's attempt to link to the request it
// resumes, and on a staged job, for the job and the webhook deliveries it
// makes to carry on the request's trace.
//
// This package must never read configuration of its own beyond
// OpenTelemetry's variables, nor make a span when tracing is off.
package telemetry
