package main_test

// API.md section 9, tracing, through the real binary and a real OTLP
// receiver (internal/otlptest decodes the protobufs a collector would get).

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/otlptest"
)

// tracingEnv turns tracing on, exporting to receiver, and has the batch
// processor export every 50 ms so that the test need not wait 5 s.
func tracingEnv(receiver *otlptest.Receiver) []string {
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + receiver.URL, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=",
		"OTEL_EXPORTER_OTLP_PROTOCOL=", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=", "OTEL_SDK_DISABLED=", "OTEL_TRACES_SAMPLER=",
		"OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_SERVICE_NAME=payments-under-test"}
}

// newTraceParent is a sampled W3C traceparent of a new trace, as a
// client's tracer would send it, and its trace and span ids.
func newTraceParent() (header, traceID, spanID string) {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	traceID, spanID = hex.EncodeToString(b[:16]), hex.EncodeToString(b[16:])
	return "00-" + traceID + "-" + spanID + "-01", traceID, spanID
}

// postTraced is createPayment with a traceparent header
// (postWithTraceHeaders, tracing_hostile_test.go).
func postTraced(t *testing.T, base, key, traceParent string) (int, []byte, error) {
	return postWithTraceHeaders(t, base, key, traceParent, "")
}

// merchant is a webhook endpoint that acknowledges every delivery and
// remembers whether one came with a traceparent.
type merchant struct {
	*httptest.Server
	deliveries, withTraceParent atomic.Int32
}

func newMerchant(t *testing.T) *merchant {
	m := &merchant{}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.deliveries.Add(1)
		if r.Header.Get("traceparent") != "" {
			m.withTraceParent.Add(1)
		}
	}))
	t.Cleanup(m.Close)
	return m
}

func requireSpan(t *testing.T, spans []otlptest.Span, name string) otlptest.Span {
	t.Helper()
	named := otlptest.Named(spans, name)
	require.NotEmpty(t, named, "a span %q in %s", name, spanNames(spans))
	return named[0]
}

func spanNames(spans []otlptest.Span) string {
	names := make([]string, len(spans))
	for i, s := range spans {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

// A request sent with a traceparent is one trace at the collector: the
// server span (a child of the caller's), the claim, a span per recovery
// phase with its three attributes, the Stripe call as a client span with
// the derived key, the SQL; then the receipt's send, the event the drain
// wrote and the webhook delivery with its HTTP attempt, in the same trace.
// The log lines of the request name the trace.
func TestTracing_aRequestIsOneTraceFromTheServerSpanToItsWebhookDelivery(t *testing.T) {
	t.Parallel()
	receiver := otlptest.NewHTTP(t)
	simURL := startSimulator(t)
	dbURL := dbtest.NewURL(t)
	env := append(tracingEnv(receiver), "DATABASE_URL="+dbURL, "STRIPE_API_BASE="+simURL, "STRIPE_SECRET_KEY=",
		"PAYMENTS_FAILPOINTS=", "PAYMENTS_ENQUEUER_POLL_INTERVAL=50ms", "SMTP_URL=")
	dev := startProc(t, env, "dev", "--addr", "127.0.0.1:0")
	base := dev.waitFor(t, &dev.stdout, devURL)

	shop := newMerchant(t)
	status, data, err := postIdempotent(t, base, "/v1/webhook_endpoints", "endpoint-1", `{"url":"`+shop.URL+`"}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(data))

	traceParent, traceID, callerSpan := newTraceParent()
	status, data, err = postTraced(t, base, "traced-1", traceParent)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(data))

	wanted := []string{"POST /v1/payments", "recovery claim", "recovery phase started", "recovery phase payment_created",
		"recovery phase payment_intent_created", "POST /v1/payment_intents", "InsertIdempotencyKey", "InsertPayment",
		"receipt send", "stagedjobs write event", "webhook delivery", "POST webhook endpoint"}
	require.Eventually(t, func() bool {
		spans := receiver.Trace(traceID)
		for _, name := range wanted {
			if len(otlptest.Named(spans, name)) == 0 {
				return false
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond, "every span of the request, its jobs and its delivery, in the caller's trace")
	spans := receiver.Trace(traceID)

	server := requireSpan(t, spans, "POST /v1/payments")
	require.Equal(t, callerSpan, server.ParentSpanID, "the incoming traceparent is honoured")
	require.Equal(t, "/v1/payments", server.Attributes["http.route"])
	require.Equal(t, "payments-under-test", server.Resource["service.name"])

	claim := requireSpan(t, spans, "recovery claim")
	require.Equal(t, server.SpanID, claim.ParentSpanID)
	keyID := claim.Attributes["payments.idempotency_key_id"]
	require.NotEmpty(t, keyID)
	for point, parent := range map[string]string{
		"started":                claim.SpanID, // in the claim's transaction (shared commit)
		"payment_created":        server.SpanID,
		"payment_intent_created": requireSpan(t, spans, "recovery phase payment_created").SpanID, // shares the record's commit
	} {
		phase := requireSpan(t, spans, "recovery phase "+point)
		assert.Equal(t, point, phase.Attributes["payments.recovery_point"])
		assert.Equal(t, keyID, phase.Attributes["payments.idempotency_key_id"])
		assert.Equal(t, "1", phase.Attributes["payments.attempt"], "the first claim of the key")
		assert.Equal(t, parent, phase.ParentSpanID, "phase %s", point)
	}

	stripeCall := requireSpan(t, spans, "POST /v1/payment_intents")
	require.Equal(t, "payments-"+keyID+"-payment_intent", stripeCall.Attributes["payments.stripe_idempotency_key"])
	require.Equal(t, requireSpan(t, spans, "recovery phase payment_created").SpanID, stripeCall.ParentSpanID)
	require.Contains(t, requireSpan(t, spans, "InsertIdempotencyKey").Attributes["db.query.text"], "INSERT INTO idempotency_keys")

	require.Positive(t, shop.deliveries.Load())
	require.Zero(t, shop.withTraceParent.Load(), "no traceparent goes to a merchant")

	// Every log line of the request names its trace.
	var requestLine map[string]any
	scanner := bufio.NewScanner(strings.NewReader(dev.output(&dev.stderr)))
	for scanner.Scan() {
		var line map[string]any
		if json.Unmarshal(scanner.Bytes(), &line) == nil && line["msg"] == "request" && line["path"] == "/v1/payments" &&
			line["method"] == "POST" {
			requestLine = line
		}
	}
	require.NotNil(t, requestLine, "the request's log line")
	require.Equal(t, traceID, requestLine["trace_id"])
	require.Equal(t, server.SpanID, requestLine["span_id"])
}

// crashedTrace is what the trace of a request crashed at
// after_stripe:payment_intent shows at the collector.
type crashedTrace struct {
	traceID   string
	claim     otlptest.Span // the span that claimed the key
	keyID     string
	stripeKey string // the derived key of the Stripe call whose answer was never recorded
}

// crashTracedRequest sends a traced payment to a serve that crashes after
// Stripe answered (failpoint after_stripe:payment_intent) and returns what
// its trace shows: what the request did before it died was exported (the
// failpoint flushes the spans that had ended), its claim and its Stripe call.
func crashTracedRequest(t *testing.T, receiver *otlptest.Receiver, dbURL, simURL, key string) crashedTrace {
	t.Helper()
	doomed, base := startServe(t, dbURL, simURL, append(tracingEnv(receiver), "PAYMENTS_FAILPOINTS=after_stripe:payment_intent=crash")...)
	traceParent, traceID, _ := newTraceParent()
	_, _, err := postTraced(t, base, key, traceParent)
	require.Error(t, err, "the process dies before it can answer")
	select {
	case <-doomed.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the service did not crash")
	}
	crashed := receiver.Trace(traceID)
	c := crashedTrace{traceID: traceID, claim: requireSpan(t, crashed, "recovery claim")}
	c.keyID = c.claim.Attributes["payments.idempotency_key_id"]
	c.stripeKey = requireSpan(t, crashed, "POST /v1/payment_intents").Attributes["payments.stripe_idempotency_key"]
	require.Equal(t, "payments-"+c.keyID+"-payment_intent", c.stripeKey)
	return c
}

// A request crashed at a failpoint is finished by the completer in a trace
// of its own that links to the crashed request's trace, resuming at the
// recovery point where the crash left it, with the next attempt.
func TestTracing_theCompletersAttemptAtACrashedRequestLinksToItsTrace(t *testing.T) {
	t.Parallel()
	receiver := otlptest.NewHTTP(t)
	simURL := startSimulator(t)
	dbURL := dbtest.NewURL(t)
	seedDemoUsers(t, dbURL)

	crashed := crashTracedRequest(t, receiver, dbURL, simURL, "crashed-1")
	traceID, claim, keyID := crashed.traceID, crashed.claim, crashed.keyID

	startProc(t, append(tracingEnv(receiver), "DATABASE_URL="+dbURL, "STRIPE_API_BASE="+simURL, "STRIPE_SECRET_KEY=",
		"PAYMENTS_FAILPOINTS=", "PAYMENTS_METRICS_ADDR=127.0.0.1:0", "PAYMENTS_LOCK_TIMEOUT=1s",
		"PAYMENTS_COMPLETER_INTERVAL=200ms", "PAYMENTS_COMPLETER_GRACE=100ms"), "worker")

	var resume otlptest.Span
	require.Eventually(t, func() bool {
		for _, s := range otlptest.Named(receiver.Spans(), "completer resume") {
			if s.Attributes["payments.idempotency_key_id"] == keyID {
				resume = s
				return true
			}
		}
		return false
	}, 60*time.Second, 50*time.Millisecond, "the completer's attempt is traced")
	require.NotEqual(t, traceID, resume.TraceID, "a trace of its own")
	require.Equal(t, []otlptest.Link{{TraceID: traceID, SpanID: claim.SpanID}}, resume.Links,
		"linked to the request it resumes (the span that claimed the key)")
	require.Equal(t, "payment_created", resume.Attributes["payments.recovery_point"], "where the crash left the key")

	var resumed []otlptest.Span
	require.Eventually(t, func() bool {
		resumed = receiver.Trace(resume.TraceID)
		return len(otlptest.Named(resumed, "recovery phase payment_intent_created")) > 0
	}, 30*time.Second, 50*time.Millisecond)
	phase := requireSpan(t, resumed, "recovery phase payment_created")
	require.Equal(t, resume.SpanID, phase.ParentSpanID)
	require.Equal(t, keyID, phase.Attributes["payments.idempotency_key_id"])
	require.Equal(t, "2", phase.Attributes["payments.attempt"], "the completer's claim is the key's second")
	again := requireSpan(t, resumed, "POST /v1/payment_intents")
	require.Equal(t, crashed.stripeKey, again.Attributes["payments.stripe_idempotency_key"],
		"the same child key as the crashed attempt's: Stripe replays instead of charging again")
	requireSpan(t, resumed, "recovery claim")
}

// `payments keys retry` finishes a crashed request in a trace of its own,
// "operator resume", linked to the crashed request's trace like the
// completer's attempt, with the next attempt and the same key to Stripe.
func TestTracing_anOperatorsRetryOfACrashedRequestLinksToItsTrace(t *testing.T) {
	t.Parallel()
	receiver := otlptest.NewHTTP(t)
	simURL := startSimulator(t)
	dbURL := dbtest.NewURL(t)
	seedDemoUsers(t, dbURL)

	crashed := crashTracedRequest(t, receiver, dbURL, simURL, "crashed-for-operator")
	traceID, claim, keyID, stripeKey := crashed.traceID, crashed.claim, crashed.keyID, crashed.stripeKey

	keysEnv := append(tracingEnv(receiver), "DATABASE_URL="+dbURL, "STRIPE_SECRET_KEY=", "STRIPE_API_BASE="+simURL,
		"PAYMENTS_LOCK_TIMEOUT=1s")
	var retry keysRun
	require.Eventually(t, func() bool { // until the crashed attempt's 1 s lock has lapsed
		retry = runKeys(t, keysEnv, "retry", "--user", "alice@example.com", "crashed-for-operator")
		return retry.code == 0
	}, 60*time.Second, 200*time.Millisecond, "retry never succeeded: %s", retry.stderr)

	// The command flushed its spans as it exited: they are there now.
	resumes := otlptest.Named(receiver.Spans(), "operator resume")
	require.Len(t, resumes, 1, "one resumed attempt: a retry refused while the lock lived claims nothing")
	resume := resumes[0]
	require.NotEqual(t, traceID, resume.TraceID, "a trace of its own")
	require.Equal(t, []otlptest.Link{{TraceID: traceID, SpanID: claim.SpanID}}, resume.Links)
	require.Equal(t, keyID, resume.Attributes["payments.idempotency_key_id"])
	require.Equal(t, "payment_created", resume.Attributes["payments.recovery_point"])
	resumed := receiver.Trace(resume.TraceID)
	require.Equal(t, "2", requireSpan(t, resumed, "recovery phase payment_created").Attributes["payments.attempt"])
	require.Equal(t, stripeKey, requireSpan(t, resumed, "POST /v1/payment_intents").Attributes["payments.stripe_idempotency_key"])
}
