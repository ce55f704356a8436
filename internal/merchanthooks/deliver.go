package merchanthooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/events"
	"github.com/example/payments/internal/stagedjobs"
)

// DefaultRetrySchedule is the delays between a delivery's attempts unless
// configured otherwise (PAYMENTS_WEBHOOK_RETRY_SCHEDULE): eight attempts
// over about a day and a half.
var DefaultRetrySchedule = []time.Duration{
	5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour,
}

// AttemptTimeout is how long an endpoint has to answer an attempt (API.md
// section 7); the HTTP client given to the worker carries it.
const AttemptTimeout = 10 * time.Second

// maxErrorBody is how much of an endpoint's answer is kept as last_error.
const maxErrorBody = 4 << 10

// recordTimeout bounds the write of an attempt's outcome.
const recordTimeout = 5 * time.Second

// DeliveryConfig configures the DeliveryWorker.
type DeliveryConfig struct {
	Pool *pgxpool.Pool
	// Client makes the attempts. It must time out (AttemptTimeout), follow
	// no redirects and, in production, refuse non-public addresses when it
	// connects (internal/safehttp).
	Client *http.Client
	// RetrySchedule is the delay before each attempt after the first; its
	// length is the number of retries. Default DefaultRetrySchedule.
	RetrySchedule []time.Duration
	Logger        *slog.Logger
	// Registry, when set, receives the deliveries' metrics.
	Registry prometheus.Registerer
}

// DeliveryWorker makes one attempt at a delivery per run of its job.
type DeliveryWorker struct {
	river.WorkerDefaults[stagedjobs.DeliveryArgs]
	pool     *pgxpool.Pool
	client   *http.Client
	schedule []time.Duration
	log      *slog.Logger
	metrics  deliveryMetrics
}

// NewDeliveryWorker returns the delivery worker, to be registered with River.
func NewDeliveryWorker(cfg DeliveryConfig) *DeliveryWorker {
	w := &DeliveryWorker{pool: cfg.Pool, client: cfg.Client, schedule: cfg.RetrySchedule, log: cfg.Logger}
	if w.client == nil {
		w.client = &http.Client{Timeout: AttemptTimeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if len(w.schedule) == 0 {
		w.schedule = DefaultRetrySchedule
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	w.metrics = newDeliveryMetrics(cfg.Registry, cfg.Pool)
	return w
}

// Timeout is the job's: an attempt, and the writes around it. The client's
// own timeout ends the attempt first.
func (w *DeliveryWorker) Timeout(*river.Job[stagedjobs.DeliveryArgs]) time.Duration {
	return AttemptTimeout + 3*recordTimeout
}

// NextRetry is when River runs a failed attempt's job again: after the
// schedule's delay for the attempt that failed (the first failure waits
// schedule[0]).
func (w *DeliveryWorker) NextRetry(job *river.Job[stagedjobs.DeliveryArgs]) time.Time {
	return time.Now().Add(w.delayAfter(job.Attempt))
}

func (w *DeliveryWorker) delayAfter(attempt int) time.Duration {
	return w.schedule[min(max(attempt, 1), len(w.schedule))-1]
}

// Work makes one attempt at the delivery of job.Args: read, send, record,
// with nothing held while the endpoint has the request.
func (w *DeliveryWorker) Work(ctx context.Context, job *river.Job[stagedjobs.DeliveryArgs]) error {
	a := job.Args
	d, err := queries.GetDeliveryToSend(ctx, w.pool, dbsqlc.GetDeliveryToSendParams{EventID: a.EventID, EndpointID: a.EndpointID})
	if errors.Is(err, pgx.ErrNoRows) {
		return river.JobCancel(fmt.Errorf("no delivery of %s to %s", a.EventID, a.EndpointID))
	}
	if err != nil {
		return fmt.Errorf("reading the delivery: %w", err)
	}
	// A redelivery started a later cycle (this job's is over), or the
	// cycle is finished: nothing to send.
	if d.Cycle != a.Cycle || d.Status != StatusPending {
		return nil
	}
	if d.EndpointDeletedAt.Valid {
		recordCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
		defer cancel()
		return queries.FailDeliveryOfDeletedEndpoint(recordCtx, w.pool, dbsqlc.FailDeliveryOfDeletedEndpointParams{
			EventID: a.EventID, EndpointID: a.EndpointID, Cycle: a.Cycle,
		})
	}

	body, err := events.Event{ID: d.EventID, Type: d.EventType, Object: d.EventData, Created: d.EventCreatedAt}.MarshalJSON()
	if err != nil {
		return river.JobCancel(fmt.Errorf("rendering event %s: %w", d.EventID, err))
	}
	started := time.Now()
	result := w.send(ctx, d.Url, d.Secret, d.EventID, body, started)
	elapsed := time.Since(started)
	w.metrics.attemptDuration.Observe(elapsed.Seconds())

	outcome := StatusSucceeded
	var next pgtype.Timestamptz
	if result.err != nil {
		if job.Attempt > len(w.schedule) {
			outcome = StatusFailed
		} else {
			outcome = StatusPending
			next = pgtype.Timestamptz{Time: started.Add(elapsed).Add(w.delayAfter(job.Attempt)), Valid: true}
		}
	}
	recordCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if _, err := queries.RecordWebhookAttempt(recordCtx, w.pool, dbsqlc.RecordWebhookAttemptParams{
		EventID: a.EventID, EndpointID: a.EndpointID, Cycle: a.Cycle, Status: outcome,
		AttemptedAt: started, DurationMs: int32(elapsed.Milliseconds()),
		StatusCode: result.statusCode, Error: result.errorText(), NextAttemptAt: next,
	}); err != nil {
		// The attempt happened but is not recorded: a success is sent again
		// (the merchant deduplicates by webhook-id), a failure retried.
		return fmt.Errorf("recording the attempt at %s to %s: %w", a.EventID, a.EndpointID, err)
	}
	switch outcome {
	case StatusSucceeded:
		w.metrics.deliveries.WithLabelValues("succeeded").Inc()
		return nil
	case StatusFailed:
		w.metrics.deliveries.WithLabelValues("failed").Inc()
		w.log.WarnContext(ctx, "webhook delivery failed for good", slog.String("event", a.EventID),
			slog.String("endpoint", a.EndpointID), slog.Int("attempts", job.Attempt), slog.String("error", result.err.Error()))
		return river.JobCancel(result.err)
	default:
		w.metrics.deliveries.WithLabelValues("retrying").Inc()
		return result.err
	}
}

// attemptResult is what one POST came to: a status code (when the endpoint
// answered), and an error unless it answered 2xx in time.
type attemptResult struct {
	statusCode pgtype.Int4
	err        error
}

func (r attemptResult) errorText() pgtype.Text {
	if r.err == nil {
		return pgtype.Text{}
	}
	return pgtype.Text{String: r.err.Error(), Valid: true}
}

// send POSTs the event, signed for the attempt's time, and reads at most
// maxErrorBody of a failed answer.
func (w *DeliveryWorker) send(ctx context.Context, url, secret, eventID string, body []byte, at time.Time) attemptResult {
	signer, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return attemptResult{err: fmt.Errorf("the endpoint's secret: %w", err)}
	}
	signature, err := signer.Sign(eventID, at, body)
	if err != nil {
		return attemptResult{err: fmt.Errorf("signing: %w", err)}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return attemptResult{err: fmt.Errorf("building the request: %w", err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(standardwebhooks.HeaderWebhookID, eventID)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(at.Unix(), 10))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, signature)
	resp, err := w.client.Do(req)
	if err != nil {
		return attemptResult{err: err}
	}
	defer resp.Body.Close()
	code := pgtype.Int4{Int32: int32(resp.StatusCode), Valid: true}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return attemptResult{statusCode: code}
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	return attemptResult{statusCode: code, err: fmt.Errorf("the endpoint answered %d: %s", resp.StatusCode, validText(answer))}
}

// validText makes an endpoint's answer storable: valid UTF-8 without NUL.
func validText(b []byte) string {
	s := string(bytes.ReplaceAll(b, []byte{0}, nil))
	if !utf8.ValidString(s) {
		s = string([]rune(s)) // replaces invalid bytes with U+FFFD
	}
	return s
}

type deliveryMetrics struct {
	deliveries      *prometheus.CounterVec
	attemptDuration prometheus.Histogram
}

func newDeliveryMetrics(reg prometheus.Registerer, pool *pgxpool.Pool) deliveryMetrics {
	m := deliveryMetrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payments_webhook_deliveries_total",
			Help: "Attempts at webhook deliveries, by outcome: succeeded, retrying (failed, to be tried again), failed (the last attempt failed).",
		}, []string{"outcome"}),
		attemptDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "payments_webhook_attempt_duration_seconds",
			Help:    "How long an attempt at a webhook delivery took, answered or not.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
	}
	if reg != nil {
		reg.MustRegister(m.deliveries, m.attemptDuration, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "payments_webhook_oldest_pending_delivery_age_seconds",
			Help: "Age of the oldest pending webhook delivery (since it was created or redelivered); 0 when none is pending.",
		}, func() float64 { return oldestPendingAge(pool) }))
	}
	return m
}

// oldestPendingAge is computed on scrape, in one indexed read.
func oldestPendingAge(pool *pgxpool.Pool) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	age, err := queries.OldestPendingDeliveryAge(ctx, pool)
	if err != nil {
		return -1
	}
	return age
}
