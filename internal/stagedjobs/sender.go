package stagedjobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/example/payments/internal/claimloop"
	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/telemetry"
)

// ReceiptSender sends receipts from their own table, as the webhook
// dispatcher (merchanthooks.Dispatcher) delivers webhooks: the drain writes
// a receipt's row, due at once, in the transaction that deletes its staged
// job (Enqueuer.writeInline), and the sender takes it from there. It
// replaced a River job per receipt, which cost as much database work as the
// receipt itself: the job's insert, its fetch and its completion, each
// touching River's indexes, besides the receipt's own reservation and
// record (make bench, scenario G: docs/BENCHMARKS.md).
//
// It works in batches:
//
//  1. claim: one statement (ClaimDueReceipts) takes up to as many due
//     receipts as it has free slots, FOR UPDATE SKIP LOCKED, and reserves
//     each for one attempt (a lease: the send's timeout and the record's),
//     so any number of senders run side by side, and a sender that dies
//     mid-send leaves its receipts due again when their leases lapse. No
//     transaction stays open: the claim commits at once.
//  2. send: each receipt is sent by a goroutine of its own, with nothing
//     held (no transaction, no pool connection), with the send's deadline
//     (SendTimeout: the SMTP mailer's is RFC 5321's timeouts).
//  3. record: the outcomes go to one writer, which records what has
//     gathered in one statement (RecordReceiptOutcomes), on a context of
//     its own: a receipt the mail server accepted is recorded as sent even
//     if Run's context ended meanwhile. Sent is final; a failed send is due
//     again after RetryDelay, or given up after MaxAttempts or at once for
//     a message no attempt can send (ErrBadMessage).
//
// Each receipt keeps its own exactly-once record, its row: a receipt whose
// row says sent is never claimed again. The one gap is SMTP's, as with the
// River worker (ReceiptWorker): a crash, or a record that fails, between the
// server's acceptance and the record sends the receipt again once its lease
// lapses, under the same Message-ID.
//
// Shutdown stops claiming, lets the sends in flight finish for
// ShutdownTimeout, cancels those left (a cancelled send is recorded as
// failed, due again), and records every outcome before Run returns.
type ReceiptSender struct {
	cfg      SenderConfig
	log      *slog.Logger
	lease    time.Duration
	outcomes chan receiptOutcome
	loop     *claimloop.Loop

	mu       sync.Mutex
	inflight int

	sent, failed, givenUp prometheus.Counter
}

// SenderConfig configures a ReceiptSender.
type SenderConfig struct {
	Pool *pgxpool.Pool
	// Mailer sends the receipts. Nil: a LogMailer, which only logs them
	// (as NewMailer without an SMTP URL).
	Mailer Mailer
	// SendTimeout bounds one send. Default: the Mailer's MaxSendTime, or
	// DefaultSendTimeout.
	SendTimeout time.Duration
	// Concurrency is how many receipts are sent at once. Default 20: the
	// mail server's load (20 conversations at once, under the 50 a Postfix
	// server allows a client by default).
	Concurrency int
	// PollInterval is how often the sender looks for due receipts when it
	// found fewer than it could take and nothing woke it (Wake). Default
	// DefaultPollInterval.
	PollInterval time.Duration
	// RetryDelay is the wait after the failed attempt number attempt (1 for
	// the first). Default DefaultReceiptRetryDelay.
	RetryDelay func(attempt int) time.Duration
	// MaxAttempts is how many sends a receipt gets before it is given up.
	// Default DefaultReceiptMaxAttempts.
	MaxAttempts int
	// ShutdownTimeout is how long the sends in flight may finish once Run's
	// context ends. Default 35s, as the worker's.
	ShutdownTimeout time.Duration
	Logger          *slog.Logger
	// Registry, when set, receives the sender's metrics.
	Registry prometheus.Registerer
}

// DefaultReceiptMaxAttempts is River's default MaxAttempts, which the River
// receipt job had.
const DefaultReceiptMaxAttempts = 25

// DefaultReceiptRetryDelay is River's default retry policy, which the River
// receipt job had: attempt⁴ seconds (1 s, 16 s, 81 s, ... about 4.5 days
// after the 25th), without River's jitter: the claim spreads the load.
func DefaultReceiptRetryDelay(attempt int) time.Duration {
	return time.Duration(math.Pow(float64(max(attempt, 1)), 4)) * time.Second
}

// maxReceiptRecordBatch bounds how many outcomes one write records.
const maxReceiptRecordBatch = 200

// NewReceiptSender returns a ReceiptSender.
func NewReceiptSender(cfg SenderConfig) *ReceiptSender {
	if m, ok := cfg.Mailer.(MaxSendTimer); ok && cfg.SendTimeout <= 0 {
		cfg.SendTimeout = m.MaxSendTime()
	}
	if cfg.SendTimeout <= 0 {
		cfg.SendTimeout = DefaultSendTimeout
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 20
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.RetryDelay == nil {
		cfg.RetryDelay = DefaultReceiptRetryDelay
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultReceiptMaxAttempts
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 35 * time.Second
	}
	s := &ReceiptSender{cfg: cfg, log: cfg.Logger,
		// The send, then the wait for the writer and its write.
		lease:    cfg.SendTimeout + 3*recordTimeout,
		outcomes: make(chan receiptOutcome, cfg.Concurrency),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.loop = claimloop.New("receipt sender", s.log, cfg.PollInterval, cfg.ShutdownTimeout)
	if s.cfg.Mailer == nil { // as NewMailer without an SMTP URL
		s.cfg.Mailer = LogMailer{Log: s.log}
	}
	counter := func(outcome string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "payments_receipt_sends_total",
			Help: "Receipt sends by the receipt sender, by outcome.", ConstLabels: prometheus.Labels{"outcome": outcome}})
	}
	s.sent, s.failed, s.givenUp = counter("sent"), counter("retrying"), counter("given_up")
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(s.sent, s.failed, s.givenUp, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "payments_receipts_unsent",
			Help: "Receipts the receipt sender has yet to send.",
		}, s.backlog))
	}
	return s
}

// Wake makes Run claim at once instead of at its next poll (the drain calls
// it after it wrote receipts). It never blocks.
func (s *ReceiptSender) Wake() { s.loop.Wake() }

// receiptOutcome is one send, to record.
type receiptOutcome struct {
	paymentID, kind string
	fence           time.Time // the claim's sending_until
	sent, givenUp   bool
	next            time.Time
	err             string
}

// Run sends until ctx ends, then shuts down as the type's doc says.
func (s *ReceiptSender) Run(ctx context.Context) error {
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		s.record(ctx)
	}()
	claimloop.Run(ctx, s.loop, s.free, s.claim, func(ctx context.Context, c dbsqlc.ClaimDueReceiptsRow) {
		defer s.release()
		s.send(ctx, c)
	})
	close(s.outcomes)
	<-recorded
	return nil
}

func (s *ReceiptSender) free() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.Concurrency - s.inflight
}

func (s *ReceiptSender) claim(ctx context.Context, n int) ([]dbsqlc.ClaimDueReceiptsRow, error) {
	claimed, err := queries.ClaimDueReceipts(ctx, s.cfg.Pool, dbsqlc.ClaimDueReceiptsParams{
		LeaseMs: s.lease.Milliseconds(), BatchSize: int32(n),
	})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.inflight += len(claimed)
	s.mu.Unlock()
	return claimed, nil
}

func (s *ReceiptSender) release() {
	s.mu.Lock()
	s.inflight--
	s.mu.Unlock()
	s.loop.Freed()
}

// send sends the claimed receipt c and hands its outcome to the writer.
func (s *ReceiptSender) send(ctx context.Context, c dbsqlc.ClaimDueReceiptsRow) {
	a := receiptArgsOf(c)
	var span trace.Span
	if c.TraceParent.Valid && telemetry.Enabled() { // in its request's trace, as a River job's (TraceJobs)
		ctx, span = telemetry.Tracer().Start(telemetry.ParentFrom(ctx, c.TraceParent.String), "receipt send",
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attribute.String("payments.payment_id", c.PaymentID), attribute.String("payments.receipt_kind", c.Kind),
				attribute.Int("payments.receipt_attempt", int(c.Attempts))))
	}
	sendCtx, cancel := context.WithTimeout(ctx, s.cfg.SendTimeout)
	err := s.cfg.Mailer.Send(sendCtx, receiptMessage(c.Recipient, a, c.Kind))
	cancel()
	if span != nil {
		telemetry.End(span, err)
	}
	o := receiptOutcome{paymentID: c.PaymentID, kind: c.Kind, fence: c.SendingUntil.Time, sent: err == nil}
	switch {
	case err == nil:
		s.sent.Inc()
	case errors.Is(err, ErrBadMessage) || int(c.Attempts) >= s.cfg.MaxAttempts:
		o.givenUp, o.err = true, err.Error()
		s.givenUp.Inc()
		s.log.Warn("receipt: given up", slog.String("payment", c.PaymentID), slog.String("kind", c.Kind),
			slog.Int("attempts", int(c.Attempts)), slog.String("error", err.Error()))
	default:
		o.err, o.next = err.Error(), time.Now().Add(s.cfg.RetryDelay(int(c.Attempts)))
		s.failed.Inc()
	}
	s.outcomes <- o
}

// receiptArgsOf is what the message says of a claimed receipt: its kind is
// receiptKind's ("payment", or "refund:<refund id>").
func receiptArgsOf(c dbsqlc.ClaimDueReceiptsRow) ReceiptArgs {
	a := ReceiptArgs{Payment: c.PaymentID, Amount: c.Amount, Currency: c.Currency, Reason: c.Kind}
	for i := range len(c.Kind) {
		if c.Kind[i] == ':' {
			a.Reason, a.Refund = c.Kind[:i], c.Kind[i+1:]
			break
		}
	}
	return a
}

// record writes the outcomes as they come, as many at once as have
// gathered, until the channel is closed and drained. A write the database
// cannot take now (its primary died, a failover is under way) is tried
// again, 100 ms doubling to 1 s apart, while Run's ctx lives and until the
// batch's first lease lapses (after that the record is refused anyway, and
// the receipt is due again): a receipt the mail server accepted during an
// outage is recorded once the database is back, not sent again some six
// minutes later, and the chaos suite's failovers found 40 receipts held
// that long.
func (s *ReceiptSender) record(ctx context.Context) {
	claimloop.Batches(s.outcomes, maxReceiptRecordBatch, func(batch []receiptOutcome) {
		err := s.write(batch)
		leaseEnd := batch[0].fence
		for _, o := range batch {
			if o.fence.Before(leaseEnd) {
				leaseEnd = o.fence
			}
		}
		for wait := 100 * time.Millisecond; err != nil && (db.IsUnavailable(err) || db.ConnectionLost(err)) &&
			ctx.Err() == nil && time.Now().Add(wait).Before(leaseEnd); wait = min(2*wait, time.Second) {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			err = s.write(batch)
		}
		if err != nil {
			// The sends happened but are not recorded: their leases lapse
			// and they are sent again, under the same Message-ID.
			for _, o := range batch {
				if o.sent {
					s.log.Warn("receipt was accepted by the mail server but not recorded (it is sent again when its lease lapses)",
						slog.String("payment", o.paymentID), slog.String("kind", o.kind), slog.String("error", err.Error()))
				}
			}
		}
	})
}

func (s *ReceiptSender) write(batch []receiptOutcome) error {
	p := dbsqlc.RecordReceiptOutcomesParams{}
	for _, o := range batch {
		p.PaymentIds = append(p.PaymentIds, o.paymentID)
		p.Kinds = append(p.Kinds, o.kind)
		p.Fences = append(p.Fences, o.fence)
		p.Sent = append(p.Sent, o.sent)
		p.GivenUp = append(p.GivenUp, o.givenUp)
		p.NextAttempts = append(p.NextAttempts, o.next)
		p.Errors = append(p.Errors, strings.ReplaceAll(strings.ToValidUTF8(o.err, "\uFFFD"), "\x00", ""))
	}
	ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
	defer cancel()
	if _, err := queries.RecordReceiptOutcomes(ctx, s.cfg.Pool, p); err != nil {
		return fmt.Errorf("recording %d receipts: %w", len(batch), err)
	}
	return nil
}

func (s *ReceiptSender) backlog() float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, err := queries.CountUnsentReceipts(ctx, s.cfg.Pool)
	if err != nil {
		return -1
	}
	return float64(n)
}
