package merchanthooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/example/payments/internal/safehttp"
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

// DeliveryWorker completes, without sending, the River webhook_delivery jobs
// queued by a version before the Dispatcher: the Dispatcher sends every
// pending delivery from its row, theirs included. It is registered so that
// such jobs finish instead of waiting for a worker that never comes.
type DeliveryWorker struct {
	river.WorkerDefaults[stagedjobs.DeliveryArgs]
}

// Work completes the job: the delivery's row is the Dispatcher's.
func (*DeliveryWorker) Work(context.Context, *river.Job[stagedjobs.DeliveryArgs]) error { return nil }

// attemptResult is what one POST came to: a status code (when the endpoint
// answered), and an error unless it answered 2xx in time.
type attemptResult struct {
	statusCode pgtype.Int4
	// err is what the endpoint's owner reads (last_error); cause, when
	// set, is the error it words, for the service's log only (it may name
	// the service's resolver and internal addresses: safehttp.Describe).
	err   error
	cause error
}

func (r attemptResult) errorText() pgtype.Text {
	if r.err == nil {
		return pgtype.Text{}
	}
	return pgtype.Text{String: r.err.Error(), Valid: true}
}

// send POSTs the event with client, signed for the attempt's time, and
// reads at most maxErrorBody of a failed answer.
func send(ctx context.Context, client *http.Client, url, secret, eventID string, body []byte, at time.Time) attemptResult {
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
	resp, err := client.Do(req)
	if err != nil {
		return attemptResult{err: errors.New(safehttp.Describe(err, url)), cause: err}
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
