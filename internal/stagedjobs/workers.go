package stagedjobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/example/payments/internal/currency"
	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
)

// ReceiptQueue is the River queue of the receipt jobs. Receipts wait on a
// mail server the service does not control, so they get a queue of their
// own with a few workers (see internal/worker): however long the mail
// server takes, the other jobs' queue keeps its workers.
const ReceiptQueue = "receipts"

// WebhookQueue is the River queue of the webhook deliveries: like
// receipts, they wait on servers the service does not control (the
// merchants'), so they get a queue of their own with a bounded number of
// workers (see internal/worker).
const WebhookQueue = "webhooks"

// DefaultSendTimeout is how long one attempt at sending a receipt may take,
// from the dial to the mail server's answer, with a Mailer that does not
// say (see MaxSendTimer), unless WorkersConfig says otherwise.
const DefaultSendTimeout = 20 * time.Second

// MaxSendTimer is a Mailer that knows the longest a send can take: the
// SMTP mailer, whose steps have RFC 5321's timeouts (35 minutes in all by
// default, 10 of them for the answer to the end of DATA). The receipt
// worker gives each send that long, so that it never gives up on a mail
// server that is only slow and may still accept the receipt.
type MaxSendTimer interface {
	MaxSendTime() time.Duration
}

// WorkersConfig configures the staged jobs' workers.
type WorkersConfig struct {
	Pool   *pgxpool.Pool
	Mailer Mailer
	// SendTimeout bounds one attempt at sending a receipt. Default: the
	// Mailer's MaxSendTime, or DefaultSendTimeout. The receipt job's
	// timeout is longer (Timeout).
	SendTimeout time.Duration
	Logger      *slog.Logger
}

// AddWorkers registers the workers of the staged jobs with River.
func AddWorkers(workers *river.Workers, cfg WorkersConfig) {
	river.AddWorker(workers, NewEventWorker(cfg.Pool))
	river.AddWorker(workers, NewReceiptWorker(cfg))
}

// EventWorker writes a merchant event that reached River as a job: the
// drain writes events itself (Enqueuer.writeInline), so this runs
// only for a batch of events the drain could not write, and for event jobs
// queued by a version before it did. The event's id was chosen when the
// change was staged, so a job that runs twice still writes one event.
type EventWorker struct {
	river.WorkerDefaults[EventArgs]
	pool *pgxpool.Pool
}

// NewEventWorker returns the event worker (AddWorkers registers it).
func NewEventWorker(pool *pgxpool.Pool) *EventWorker { return &EventWorker{pool: pool} }

// Work writes the event, unless it is already there, and in the same
// transaction, the first time only, its webhook deliveries: one row, due
// at once for the webhook dispatcher, per enabled endpoint of the user that
// subscribes to the event's type, existed when the event was created (the
// change's commit, maybe a while before this job runs) and still exists.
// So a delivery exists if and only if its event does, and an endpoint made
// after the change gets nothing of this event. The lock it takes first
// orders it with the creation of the user's endpoints, as the drain's
// (LockEndpointsOfUser in internal/db/queries/webhooks_out.sql): an
// endpoint created before the event is committed, and seen, by then.
func (w *EventWorker) Work(ctx context.Context, job *river.Job[EventArgs]) error {
	a := job.Args
	// The drain sets Created when it hands an event over; a job staged
	// straight into River without it is stamped with the database's clock
	// once the lock is held, which keeps the same promise.
	created := pgtype.Timestamptz{Time: a.Created, Valid: !a.Created.IsZero()}
	return db.WithTx(ctx, w.pool, db.TxOptions{Isolation: pgx.ReadCommitted}, func(ctx context.Context, tx *db.Tx) error {
		if err := queries.LockEndpointsOfUserShared(ctx, tx.Queued(), a.UserID); err != nil {
			return err
		}
		eventCreated, err := queries.InsertEvent(ctx, tx, dbsqlc.InsertEventParams{
			ID: a.EventID, UserID: a.UserID, Type: a.Type, Data: a.Object, CreatedAt: created,
		})
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // written already, with its deliveries
		}
		if err != nil {
			return err
		}
		if _, err := queries.InsertWebhookDeliveries(ctx, tx, dbsqlc.InsertWebhookDeliveriesParams{
			EventID: a.EventID, UserID: a.UserID, Patterns: SubscriptionPatterns(a.Type), EventCreated: eventCreated,
			TraceParent: traceParentOf(ctx), // the job's span, in its request's trace (TraceJobs)
		}); err != nil {
			return fmt.Errorf("writing the deliveries of event %s: %w", a.EventID, err)
		}
		return nil
	})
}

// SubscriptionPatterns are the entries of an endpoint's enabled_events
// that subscribe it to events of eventType: the type itself, its prefix
// ("refund.*" for "refund.succeeded") and "*".
func SubscriptionPatterns(eventType string) []string {
	patterns := []string{"*", eventType}
	if i := strings.IndexByte(eventType, '.'); i > 0 {
		patterns = append(patterns, eventType[:i]+".*")
	}
	return patterns
}

// ReceiptWorker sends a receipt once, however often its job runs, and
// never holds a transaction, or a pool connection, while the mail server
// has it: a hung mail server must not take the connections the API, the
// completer and the drain need.
type ReceiptWorker struct {
	river.WorkerDefaults[ReceiptArgs]
	pool        *pgxpool.Pool
	mailer      Mailer
	sendTimeout time.Duration
	log         *slog.Logger
}

// NewReceiptWorker returns the receipt worker (AddWorkers registers it).
func NewReceiptWorker(cfg WorkersConfig) *ReceiptWorker {
	w := &ReceiptWorker{pool: cfg.Pool, mailer: cfg.Mailer, sendTimeout: cfg.SendTimeout, log: cfg.Logger}
	if m, ok := cfg.Mailer.(MaxSendTimer); ok && w.sendTimeout <= 0 {
		w.sendTimeout = m.MaxSendTime()
	}
	if w.sendTimeout <= 0 {
		w.sendTimeout = DefaultSendTimeout
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	return w
}

// recordTimeout bounds each write of the receipt's row around the send.
// busySnooze is how long a job waits when another attempt holds its
// receipt, before it looks again.
const (
	recordTimeout = 5 * time.Second
	busySnooze    = time.Second
)

// Timeout is the receipt job's: longer than a send and the writes around
// it, so River never ends the job's context while the send may still
// succeed (35 minutes and 15 seconds with the SMTP mailer's defaults).
// River's timeout for the other jobs is shorter, and a receipt runs on its
// own queue (ReceiptQueue) with workers of its own: however long a send
// waits, no other job waits for it. River's rescuer, too, leaves a running
// job alone for its Timeout, not just RescueStuckJobsAfter.
func (w *ReceiptWorker) Timeout(*river.Job[ReceiptArgs]) time.Duration {
	return w.sendTimeout + 3*recordTimeout
}

// Work sends the receipt unless its row says it was sent, in three steps,
// none of which holds a connection across the network call:
//
//  1. Reserve the receipt's row for this attempt (one short statement;
//     the reservation lapses after a send's timeout and a write's). A row
//     already sent ends the job; one another attempt holds snoozes it.
//  2. Send, with the send's deadline, and no transaction open.
//  3. Record the outcome on a context of its own, detached from the
//     job's: a receipt the mail server accepted is recorded as sent even
//     if the job's context ended meanwhile, so it is never sent again. A
//     failed send gives its reservation back, and River retries it with
//     backoff.
//
// One gap is left, and email cannot close it: if the process dies (or the
// database cannot be reached) between the server's acceptance and the
// record, the next attempt, once the reservation lapses, sends the receipt
// again. Every copy carries the same Message-ID (receiptMessageID), so the
// receiving side can tell it is one receipt.
func (w *ReceiptWorker) Work(ctx context.Context, job *river.Job[ReceiptArgs]) error {
	a := job.Args
	kind := receiptKind(a)
	to, reservedUntil, err := w.reserve(ctx, a, kind)
	switch {
	case errors.Is(err, errReceiptSent):
		return nil
	case errors.Is(err, errReceiptBusy):
		return river.JobSnooze(busySnooze)
	case err != nil:
		return err
	}

	sendCtx, cancelSend := context.WithTimeout(ctx, w.sendTimeout)
	sendErr := w.mailer.Send(sendCtx, receiptMessage(to, a, kind))
	cancelSend()

	recordCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	receipt := dbsqlc.MarkReceiptSentParams{PaymentID: a.Payment, Kind: kind}
	if sendErr != nil {
		if err := queries.ReleaseReceipt(recordCtx, w.pool, dbsqlc.ReleaseReceiptParams{
			PaymentID: a.Payment, Kind: kind, SendingUntil: reservedUntil,
		}); err != nil {
			w.log.WarnContext(ctx, "receipt: giving back the reservation failed; it lapses on its own",
				slog.String("payment", a.Payment), slog.String("kind", kind), slog.String("error", err.Error()))
		}
		if errors.Is(sendErr, ErrBadMessage) {
			return river.JobCancel(sendErr) // no retry can send it
		}
		return fmt.Errorf("sending receipt: %w", sendErr)
	}
	if err := queries.MarkReceiptSent(recordCtx, w.pool, receipt); err != nil {
		return fmt.Errorf("receipt %s %s was accepted by the mail server but not recorded (a retry sends it again): %w",
			a.Payment, kind, err)
	}
	return nil
}

var (
	errReceiptSent = errors.New("receipt already sent")
	errReceiptBusy = errors.New("receipt reserved by another attempt")
)

// reserve creates or reserves the receipt's row and says to whom to send
// it, and until when the reservation holds (its fence for ReleaseReceipt).
func (w *ReceiptWorker) reserve(ctx context.Context, a ReceiptArgs, kind string) (string, pgtype.Timestamptz, error) {
	lease := w.sendTimeout + recordTimeout
	row, err := queries.ReserveReceipt(ctx, w.pool, dbsqlc.ReserveReceiptParams{
		PaymentID: a.Payment, Kind: kind, UserID: a.UserID, LeaseMs: lease.Milliseconds(),
	})
	if err == nil {
		return row.Recipient, row.SendingUntil, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return "", pgtype.Timestamptz{}, fmt.Errorf("reserving the receipt: %w", err)
	}
	receipt, err := queries.GetReceipt(ctx, w.pool, dbsqlc.GetReceiptParams{PaymentID: a.Payment, Kind: kind})
	if err != nil {
		return "", pgtype.Timestamptz{}, fmt.Errorf("reading the receipt: %w", err)
	}
	if receipt.SentAt.Valid {
		return "", pgtype.Timestamptz{}, errReceiptSent
	}
	return "", pgtype.Timestamptz{}, errReceiptBusy
}

// receiptKind is the receipt's kind in its row: "payment", or
// "refund:<refund id>".
func receiptKind(a ReceiptArgs) string {
	if a.Refund != "" {
		return a.Reason + ":" + a.Refund
	}
	return a.Reason
}

// receiptMessageID names one receipt the same way on every attempt (the
// mailer adds its From address's domain).
func receiptMessageID(a ReceiptArgs, kind string) string {
	return "receipt." + strings.ReplaceAll(kind, ":", ".") + "." + a.Payment
}

func receiptMessage(to string, a ReceiptArgs, kind string) Message {
	what := "Payment"
	if a.Reason == "refund" {
		what = "Refund"
	}
	return Message{
		To:        to,
		MessageID: receiptMessageID(a, kind),
		Subject:   fmt.Sprintf("%s receipt for %s", what, a.Payment),
		Body: fmt.Sprintf("%s of %s %s for payment %s.\n\nThank you.\n",
			what, currency.Decimal(a.Currency, a.Amount), strings.ToUpper(a.Currency), a.Payment),
	}
}
