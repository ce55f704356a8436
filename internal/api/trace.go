package api

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Tracing of the API (API.md section 9): each request is an HTTP server
// span, the root of the request's trace, or a child of the caller's span
// when the request carries a W3C traceparent header. NewHandler applies
// both only when tracing is on (telemetry.Enabled): off, the router is
// served as it is.

// untracedPaths are the probes and the scrape: polled every few seconds,
// they would bury the traces worth reading.
var untracedPaths = map[string]bool{"/healthz": true, "/readyz": true}

// traceRequests wraps the router in otelhttp's server span. The span is
// named by the method alone until the router has matched a route
// (nameSpanByRoute): never by the raw path, whose ids would make every
// span name unique.
func traceRequests(router http.Handler) http.Handler {
	return otelhttp.NewHandler(router, "payments",
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }),
		otelhttp.WithFilter(func(r *http.Request) bool { return !untracedPaths[r.URL.Path] }))
}

// nameSpanByRoute names the server span after chi's route pattern ("POST
// /v1/payments/{id}/capture") and sets http.route, once the request has
// been routed and served (chi knows the whole pattern only then).
func nameSpanByRoute(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		span := trace.SpanFromContext(r.Context())
		if !span.IsRecording() {
			return
		}
		if pattern := chi.RouteContext(r.Context()).RoutePattern(); pattern != "" {
			span.SetName(r.Method + " " + pattern)
			span.SetAttributes(attribute.String("http.route", pattern))
		}
	})
}
