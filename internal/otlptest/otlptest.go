// Package otlptest is an OpenTelemetry collector for tests: an OTLP trace
// receiver, over HTTP (protobuf) or gRPC, that decodes what the service
// exports (ExportTraceServiceRequest, from go.opentelemetry.io/proto/otlp)
// and keeps the spans for the test to inspect. It is the real wire
// format, read by the protocol's own generated code, not the SDK's
// in-memory exporter, so a test that passes here passes against a
// collector.
//
// Test code only: it must never be imported by the service.
package otlptest

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one exported span, its ids in hex as W3C traceparent writes them.
type Span struct {
	TraceID, SpanID, ParentSpanID string
	Name                          string
	Kind                          tracepb.Span_SpanKind
	// Attributes are the span's attributes, each value as text.
	Attributes map[string]string
	Links      []Link
	// Failed tells that the span's status is an error.
	Failed bool
	// Resource is the resource's attributes (service.name, ...), as text.
	Resource map[string]string
}

// Link is a span's link to another span.
type Link struct{ TraceID, SpanID string }

// Receiver collects the spans exported to it.
type Receiver struct {
	// URL is the endpoint to export to: an http:// base URL
	// (OTEL_EXPORTER_OTLP_ENDPOINT) for NewHTTP, host:port for NewGRPC.
	URL string

	mu       sync.Mutex
	requests int
	spans    []Span
}

// NewHTTP starts an OTLP/HTTP receiver (protobuf, gzip or not), stopped
// when t ends.
func NewHTTP(t testing.TB) *Receiver {
	r := &Receiver{}
	srv := httptest.NewServer(http.HandlerFunc(r.serveHTTP))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var export coltracepb.ExportTraceServiceRequest
	if req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want a POST of application/x-protobuf", http.StatusUnsupportedMediaType)
		return
	}
	if err := proto.Unmarshal(data, &export); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&export)
	answer, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(answer)
}

// NewGRPC starts an OTLP/gRPC receiver, stopped when t ends.
func NewGRPC(t testing.TB) *Receiver {
	r := &Receiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, grpcService{r: r})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	r.URL = ln.Addr().String()
	return r
}

type grpcService struct {
	coltracepb.UnimplementedTraceServiceServer
	r *Receiver
}

func (s grpcService) Export(_ context.Context, export *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.r.add(export)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *Receiver) add(export *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	for _, rs := range export.GetResourceSpans() {
		resource := attributes(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				span := Span{
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()), Name: s.GetName(), Kind: s.GetKind(),
					Attributes: attributes(s.GetAttributes()), Resource: resource,
					Failed: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
				}
				for _, l := range s.GetLinks() {
					span.Links = append(span.Links, Link{TraceID: hex.EncodeToString(l.GetTraceId()), SpanID: hex.EncodeToString(l.GetSpanId())})
				}
				r.spans = append(r.spans, span)
			}
		}
	}
}

func attributes(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = text(kv.GetValue())
	}
	return m
}

func text(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	default:
		return fmt.Sprint(v.GetValue())
	}
}

// Requests is how many exports the receiver has been sent.
func (r *Receiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

// Spans is every span received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Trace is the spans received so far of the trace traceID.
func (r *Receiver) Trace(traceID string) []Span {
	var spans []Span
	for _, s := range r.Spans() {
		if s.TraceID == traceID {
			spans = append(spans, s)
		}
	}
	return spans
}

// Named is the spans among spans called name.
func Named(spans []Span, name string) []Span {
	var named []Span
	for _, s := range spans {
		if s.Name == name {
			named = append(named, s)
		}
	}
	return named
}
