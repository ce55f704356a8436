package merchanthooks

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/example/payments/internal/claimloop"
	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/events"
	"github.com/example/payments/internal/telemetry"
)

// Dispatcher delivers webhooks from their own table: a pending delivery is
// its own job, due at its next_attempt_at (at once when it is written; after
// the retry schedule's delay when an attempt failed; at once again when it
// is redelivered). It replaced a River job per delivery, which cost about as
// much database work as the delivery itself: the job's insert (with its
// uniqueness), its fetch, its completion and its clean-up, each touching
// River's indexes, and a read and a write of the delivery of its own (make
// bench, scenario G: docs/BENCHMARKS.md).
//
// It works in batches, with one HTTP client for every attempt:
//
//  1. claim: one statement (ClaimDueDeliveries) takes up to as many due
//     deliveries as it has free slots, with their endpoints and events,
//     FOR UPDATE SKIP LOCKED, and leases them (leased_until is set Lease
//     ahead; next_attempt_at, which the due index names, stays, so the
//     claim is a HOT update), so any number of dispatchers run side by
//     side and a dispatcher that dies mid-attempt leaves its deliveries
//     due again when their leases lapse. No transaction stays open: the
//     claim commits at once.
//  2. attempt: each delivery is POSTed by a goroutine of its own, with
//     nothing held, as DeliveryWorker did, and at most PerEndpoint
//     attempts in flight to one endpoint (the claim leaves out what would
//     pass it), so a slow endpoint takes its own share of the slots and no
//     more.
//  3. record: the outcomes go to one writer, which records what it has
//     gathered in one statement (RecordWebhookAttempts), on a context of
//     its own: an attempt made is recorded even if Run's context ended
//     meanwhile. A success is final; a failure is due again after the
//     schedule's delay for its attempt (the claim counted it, in
//     cycle_attempts), or failed after the last.
//
// The guarantees of API.md section 7 are the outbox's: a delivery is due
// until an attempt at it is recorded as succeeded or failed, so an attempt
// cut short by a crash (before, during or after the POST, before the
// record) is made again when its lease lapses: at least once per endpoint,
// under the event's id (webhook-id). Shutdown stops claiming, lets the
// attempts in flight finish for ShutdownTimeout, cancels those left (a
// cancelled attempt is recorded as failed, and retried), and records every
// outcome before Run returns.
type Dispatcher struct {
	cfg      DispatcherConfig
	log      *slog.Logger
	metrics  deliveryMetrics
	outcomes chan attemptOutcome

	mu       sync.Mutex
	inflight map[string]int // endpoint id -> attempts in flight
	total    int
	loop     *claimloop.Loop
}

// DispatcherConfig configures a Dispatcher.
type DispatcherConfig struct {
	Pool *pgxpool.Pool
	// Client makes the attempts. It must time out (AttemptTimeout), follow
	// no redirects and, in production, refuse non-public addresses when it
	// connects (internal/safehttp).
	Client *http.Client
	// RetrySchedule is the delay before each attempt after the first; its
	// length is the number of retries. Default DefaultRetrySchedule.
	RetrySchedule []time.Duration
	// Concurrency is how many attempts are in flight at once. Default 50.
	Concurrency int
	// PerEndpoint is how many attempts are in flight at once to one
	// endpoint. Default DefaultPerEndpoint.
	PerEndpoint int
	// PollInterval is how often the dispatcher looks for due deliveries
	// when it found fewer than it could take. Default DefaultPollInterval.
	PollInterval time.Duration
	// Lease is how long a claimed delivery is left to its attempt before
	// another claim may take it (its dispatcher died). Default
	// DefaultLease.
	Lease time.Duration
	// ShutdownTimeout is how long the attempts in flight may finish once
	// Run's context ends. Default AttemptTimeout.
	ShutdownTimeout time.Duration
	Logger          *slog.Logger
	// Registry, when set, receives the deliveries' metrics.
	Registry prometheus.Registerer
}

// The dispatcher's defaults.
const (
	// DefaultPerEndpoint bounds one endpoint's share of the attempts.
	DefaultPerEndpoint = 10
	// DefaultPollInterval bounds how long a new delivery waits for its
	// claim (the drain that writes it polls every 200 ms too).
	DefaultPollInterval = 100 * time.Millisecond
	// DefaultLease is longer than a claim's attempt can take: the attempt
	// (AttemptTimeout), the wait for the writer, and its write
	// (recordTimeout), with room to spare.
	DefaultLease = 3 * AttemptTimeout
)

// maxRecordBatch bounds how many outcomes one write records.
const maxRecordBatch = 200

// NewDispatcher returns a Dispatcher.
func NewDispatcher(cfg DispatcherConfig) *Dispatcher {
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: AttemptTimeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if len(cfg.RetrySchedule) == 0 {
		cfg.RetrySchedule = DefaultRetrySchedule
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 50
	}
	if cfg.PerEndpoint <= 0 {
		cfg.PerEndpoint = DefaultPerEndpoint
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = AttemptTimeout
	}
	d := &Dispatcher{cfg: cfg, log: cfg.Logger, inflight: map[string]int{}, outcomes: make(chan attemptOutcome, cfg.Concurrency)}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	d.loop = claimloop.New("webhook dispatcher", d.log, cfg.PollInterval, cfg.ShutdownTimeout)
	d.metrics = newDeliveryMetrics(cfg.Registry, cfg.Pool)
	return d
}

// attemptOutcome is one attempt, to record.
type attemptOutcome struct {
	eventID, endpointID string
	cycle               int32
	status              string
	attemptedAt         time.Time
	duration            time.Duration
	statusCode          int32 // 0: no answer
	err                 string
	next                time.Time // when status is pending
}

// Run dispatches until ctx ends, then shuts down as the type's doc says.
func (d *Dispatcher) Run(ctx context.Context) error {
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		d.record()
	}()
	claimloop.Run(ctx, d.loop, d.free, d.claim, func(ctx context.Context, c dbsqlc.ClaimDueDeliveriesRow) {
		defer d.release(c.EndpointID)
		d.attempt(ctx, c)
	})
	close(d.outcomes)
	<-recorded
	return nil
}

// Wake makes Run claim at once instead of at its next poll: the drain calls
// it after it wrote deliveries (stagedjobs.EnqueuerConfig.OnWritten), so a
// new delivery waits for no poll. It never blocks.
func (d *Dispatcher) Wake() { d.loop.Wake() }

// free is how many more attempts may start now.
func (d *Dispatcher) free() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg.Concurrency - d.total
}

// claim takes up to n due deliveries, within each endpoint's share, and
// counts them in flight.
func (d *Dispatcher) claim(ctx context.Context, n int) ([]dbsqlc.ClaimDueDeliveriesRow, error) {
	d.mu.Lock()
	busy := []string{}
	inflightEndpoints, inflightCounts := []string{}, []int32{}
	for endpoint, k := range d.inflight {
		if k >= d.cfg.PerEndpoint {
			busy = append(busy, endpoint)
		} else {
			inflightEndpoints, inflightCounts = append(inflightEndpoints, endpoint), append(inflightCounts, int32(k))
		}
	}
	d.mu.Unlock()
	claimed, err := queries.ClaimDueDeliveries(ctx, d.cfg.Pool, dbsqlc.ClaimDueDeliveriesParams{
		LeaseSeconds: d.cfg.Lease.Seconds(), Busy: busy, ScanSize: int32(4 * n),
		InflightEndpoints: inflightEndpoints, InflightCounts: inflightCounts,
		PerEndpoint: int32(d.cfg.PerEndpoint), BatchSize: int32(n),
	})
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	for _, c := range claimed {
		d.inflight[c.EndpointID]++
		d.total++
	}
	d.mu.Unlock()
	return claimed, nil
}

// release frees an attempt's slot.
func (d *Dispatcher) release(endpointID string) {
	d.mu.Lock()
	if d.inflight[endpointID]--; d.inflight[endpointID] <= 0 {
		delete(d.inflight, endpointID)
	}
	d.total--
	d.mu.Unlock()
	d.loop.Freed()
}

// InFlight is how many attempts are in flight to endpointID (tests).
func (d *Dispatcher) InFlight(endpointID string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.inflight[endpointID]
}

// attempt makes one attempt at the claimed delivery c and hands its outcome
// to the writer.
func (d *Dispatcher) attempt(ctx context.Context, c dbsqlc.ClaimDueDeliveriesRow) {
	if c.EndpointDeletedAt.Valid {
		recordCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
		defer cancel()
		if err := queries.FailDeliveryOfDeletedEndpoint(recordCtx, d.cfg.Pool, dbsqlc.FailDeliveryOfDeletedEndpointParams{
			EventID: c.EventID, EndpointID: c.EndpointID, Cycle: c.Cycle,
		}); err != nil {
			d.log.Warn("webhook dispatcher: recording a deleted endpoint's delivery failed (its lease lapses)",
				slog.String("event", c.EventID), slog.String("endpoint", c.EndpointID), slog.String("error", err.Error()))
		}
		return
	}
	var span trace.Span
	if c.TraceParent.Valid && telemetry.Enabled() {
		ctx, span = telemetry.Tracer().Start(telemetry.ParentFrom(ctx, c.TraceParent.String), "webhook delivery",
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attribute.String("payments.event_id", c.EventID), attribute.String("payments.endpoint_id", c.EndpointID),
				attribute.Int("payments.delivery_cycle", int(c.Cycle)), attribute.Int("payments.delivery_attempt", int(c.CycleAttempts))))
	}
	body, err := events.Event{ID: c.EventID, Type: c.EventType, Object: c.EventData, Created: c.EventCreatedAt}.MarshalJSON()
	started := time.Now()
	result := attemptResult{err: err}
	if err == nil {
		result = send(ctx, d.cfg.Client, c.Url, c.Secret, c.EventID, body, started)
	}
	elapsed := time.Since(started)
	if span != nil {
		telemetry.End(span, result.err)
	}
	d.metrics.attemptDuration.Observe(elapsed.Seconds())

	o := attemptOutcome{eventID: c.EventID, endpointID: c.EndpointID, cycle: c.Cycle, status: StatusSucceeded,
		attemptedAt: started, duration: elapsed, statusCode: result.statusCode.Int32}
	switch {
	case result.err == nil:
		d.metrics.deliveries.WithLabelValues("succeeded").Inc()
	case int(c.CycleAttempts) > len(d.cfg.RetrySchedule):
		o.status, o.err = StatusFailed, result.err.Error()
		d.metrics.deliveries.WithLabelValues("failed").Inc()
		d.log.WarnContext(ctx, "webhook delivery failed for good", slog.String("event", c.EventID),
			slog.String("endpoint", c.EndpointID), slog.Int("attempts", int(c.CycleAttempts)), slog.String("error", result.err.Error()),
			slog.Any("cause", result.cause))
	default:
		if result.cause != nil {
			d.log.DebugContext(ctx, "webhook delivery attempt failed", slog.String("event", c.EventID),
				slog.String("endpoint", c.EndpointID), slog.String("error", result.err.Error()), slog.String("cause", result.cause.Error()))
		}
		o.status, o.err = StatusPending, result.err.Error()
		o.next = started.Add(elapsed).Add(delayAfter(d.cfg.RetrySchedule, int(c.CycleAttempts)))
		d.metrics.deliveries.WithLabelValues("retrying").Inc()
	}
	d.outcomes <- o
}

// record writes the outcomes as they come, as many at once as have
// gathered, until the channel is closed and drained.
func (d *Dispatcher) record() {
	claimloop.Batches(d.outcomes, maxRecordBatch, func(batch []attemptOutcome) {
		if err := d.write(batch); err != nil {
			// The attempts happened but are not recorded: their leases
			// lapse and they are made again (a success is sent twice; the
			// merchant deduplicates by webhook-id).
			d.log.Warn("webhook dispatcher: recording attempts failed; they are made again when their leases lapse",
				slog.Int("attempts", len(batch)), slog.String("error", err.Error()))
		}
	})
}

func (d *Dispatcher) write(batch []attemptOutcome) error {
	p := dbsqlc.RecordWebhookAttemptsParams{}
	for _, o := range batch {
		p.EventIds = append(p.EventIds, o.eventID)
		p.EndpointIds = append(p.EndpointIds, o.endpointID)
		p.Cycles = append(p.Cycles, o.cycle)
		p.Statuses = append(p.Statuses, o.status)
		p.AttemptTimes = append(p.AttemptTimes, o.attemptedAt)
		p.DurationMs = append(p.DurationMs, int32(o.duration.Milliseconds()))
		p.StatusCodes = append(p.StatusCodes, o.statusCode)
		p.Errors = append(p.Errors, validText([]byte(o.err)))
		p.NextAttempts = append(p.NextAttempts, o.next)
	}
	ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
	defer cancel()
	if _, err := queries.RecordWebhookAttempts(ctx, d.cfg.Pool, p); err != nil {
		return fmt.Errorf("recording %d attempts: %w", len(batch), err)
	}
	return nil
}

// delayAfter is the schedule's delay after the failed attempt number
// attempt (1 for the first) of a cycle.
func delayAfter(schedule []time.Duration, attempt int) time.Duration {
	return schedule[min(max(attempt, 1), len(schedule))-1]
}
