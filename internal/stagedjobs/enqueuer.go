package stagedjobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
)

// EnqueuerConfig configures an Enqueuer.
type EnqueuerConfig struct {
	Pool   *pgxpool.Pool
	River  *river.Client[pgx.Tx] // an insert-only client is enough
	Logger *slog.Logger
	// BatchSize is how many staged jobs move in one transaction. Default 500.
	BatchSize int
	// PollInterval is how often the enqueuer looks for staged jobs, and so
	// the longest a job waits to be queued. Default 200ms.
	PollInterval time.Duration
	// Registry, when set, receives the enqueuer's metrics.
	Registry prometheus.Registerer
	// BeforeCommit, when set, runs inside each drain transaction after the
	// jobs were inserted into River and before the commit. Tests use it to
	// crash a drain halfway.
	BeforeCommit func(ctx context.Context, tx pgx.Tx) error
	// OnWritten, when set, is called after a drain committed events or
	// receipts it wrote itself: the worker wakes the webhook dispatcher and
	// the receipt sender with it, so that they claim at once rather than at
	// their next poll. It must not block.
	OnWritten func()
}

// Enqueuer moves staged jobs into River, exactly once: each batch is
// claimed with FOR UPDATE SKIP LOCKED, inserted into River and deleted in
// one transaction. River's tables live in the same database, so the insert
// and the delete commit or roll back together; and SKIP LOCKED lets any
// number of enqueuers run side by side, each moving different rows.
type Enqueuer struct {
	cfg     EnqueuerConfig
	log     *slog.Logger
	drained prometheus.Counter
}

// NewEnqueuer returns an Enqueuer.
func NewEnqueuer(cfg EnqueuerConfig) *Enqueuer {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 500
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	e := &Enqueuer{cfg: cfg, log: cfg.Logger}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	e.drained = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "payments_staged_jobs_drained_total",
		Help: "Staged jobs moved into the job queue.",
	})
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(e.drained, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "payments_staged_jobs_backlog",
			Help: "Staged jobs waiting to be moved into the job queue.",
		}, e.backlog))
	}
	return e
}

// DefaultPollInterval is the enqueuer's default PollInterval.
const DefaultPollInterval = 200 * time.Millisecond

// Run drains until ctx ends, every PollInterval.
//
// It polls rather than waiting for a NOTIFY from the staging transactions:
// PostgreSQL serializes the commits of every transaction that notifies (a
// cluster-wide lock held until the commit is flushed), so a NOTIFY in each
// payment's transaction costs new payments about a tenth of their
// throughput (docs/BENCHMARKS.md), while a poll of an empty table five
// times a second costs nothing worth measuring.
func (e *Enqueuer) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := e.DrainAll(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("enqueuer: draining failed; trying again", slog.String("error", err.Error()))
		}
		sleep(ctx, e.cfg.PollInterval)
	}
	return nil
}

// DrainAll moves batches until no staged job is left.
func (e *Enqueuer) DrainAll(ctx context.Context) error {
	for {
		n, err := e.DrainOnce(ctx)
		if err != nil || n < e.cfg.BatchSize {
			return err
		}
	}
}

// DrainOnce moves one batch and says how many jobs it moved.
func (e *Enqueuer) DrainOnce(ctx context.Context) (int, error) {
	var moved int
	var wrote bool
	err := db.WithTx(ctx, e.cfg.Pool, db.TxOptions{Isolation: pgx.ReadCommitted}, func(ctx context.Context, tx *db.Tx) error {
		jobs, err := queries.ClaimStagedJobs(ctx, tx, int32(e.cfg.BatchSize))
		if err != nil || len(jobs) == 0 {
			return err
		}
		queued, err := e.writeInline(ctx, tx, jobs)
		if err != nil {
			return err
		}
		wrote = len(queued) < len(jobs)
		if len(queued) > 0 {
			if _, err := e.cfg.River.InsertManyTx(ctx, tx, queued); err != nil {
				return fmt.Errorf("inserting into River: %w", err)
			}
		}
		if err := queries.DeleteStagedJobs(ctx, tx, jobIDs(jobs)); err != nil {
			return err
		}
		if e.cfg.BeforeCommit != nil {
			if err := e.cfg.BeforeCommit(ctx, tx); err != nil {
				return err
			}
		}
		moved = len(jobs)
		return nil
	})
	if err != nil {
		return 0, err
	}
	e.drained.Add(float64(moved))
	if wrote && e.cfg.OnWritten != nil {
		e.cfg.OnWritten()
	}
	return moved, nil
}

// writeInline is where the drain departs from "move each staged job into
// River": MerchantEvent and ReceiptEmail jobs are applied here, in the
// drain's transaction, instead of becoming River jobs of their own.
//
// Writing an event is local (a row in events and one in webhook_deliveries
// per subscribed endpoint) and cannot fail for a reason a retry would fix,
// so a River job bought it nothing but cost: its arguments carry the
// object's whole JSON, which River indexes (GIN) on insert and again on
// every change of the job's state, and the job's deliveries then needed a
// second trip through staged_jobs and the drain. Measured with make bench,
// scenario F at 16 clients: see docs/BENCHMARKS.md and
// docs/architecture.md ("Events are written by the drain"). The deliveries
// get no River job either: a delivery row is due at once, and the webhook
// dispatcher (merchanthooks.Dispatcher) claims it from there.
//
// A receipt, likewise, is written as its row in receipts, due at once for
// the receipt sender (ReceiptSender), which claims receipts in batches: a
// River job per receipt cost its insert, fetch and completion besides the
// receipt's own reservation and record (make bench, scenario G).
//
// The guarantee is the staged job's own: the event and its deliveries, or
// the receipt's row, commit with the staged row's deletion, so an event is
// written once, each of its deliveries exists once, and a receipt has one
// row (its exactly-once record). It returns what to insert into River: the
// batch's other jobs as they were staged.
//
// Should the batch's events and receipts fail to be written (a staged job
// the code cannot apply: a bug, not an outage, which would fail the whole
// transaction), they are handed to River as MerchantEvent and ReceiptEmail
// jobs instead, done by EventWorker and ReceiptWorker with River's retries:
// one bad job then waits in River's retries alone, and never stops the
// drain or the other jobs.
func (e *Enqueuer) writeInline(ctx context.Context, tx *db.Tx, jobs []dbsqlc.StagedJob) ([]river.InsertManyParams, error) {
	var params []river.InsertManyParams
	var inline []dbsqlc.StagedJob
	var eventIDs, receiptIDs []int64
	for _, job := range jobs {
		switch job.Kind {
		case string(MerchantEvent):
			inline, eventIDs = append(inline, job), append(eventIDs, job.ID)
		case string(ReceiptEmail):
			inline, receiptIDs = append(inline, job), append(receiptIDs, job.ID)
		default:
			params = append(params, river.InsertManyParams{Args: stagedArgs{kind: job.Kind, args: job.Args}, InsertOpts: tracedInsertOpts(job.TraceParent)})
		}
	}
	if len(inline) == 0 {
		return params, nil
	}
	traced := tracedEvents(jobs) // trace.go
	endSpans := traceEventWrites(ctx, traced, len(eventIDs))
	err := writeStaged(ctx, tx, eventIDs, receiptIDs)
	endSpans(err)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		e.log.WarnContext(ctx, "enqueuer: could not write the batch's events and receipts; River's jobs will",
			slog.Int("events", len(eventIDs)), slog.Int("receipts", len(receiptIDs)), slog.String("error", err.Error()))
		for _, job := range inline {
			args := json.RawMessage(job.Args)
			if job.Kind == string(MerchantEvent) {
				args = withCreated(job.Args, job.CreatedAt) // EventArgs.Created
			}
			params = append(params, river.InsertManyParams{
				Args: stagedArgs{kind: job.Kind, args: args}, InsertOpts: tracedInsertOpts(job.TraceParent),
			})
		}
		return params, nil
	}
	return params, nil
}

// writeStaged runs WriteStagedEvents and WriteStagedReceipts in a
// savepoint, so that their failure leaves the drain's transaction usable.
// The SAVEPOINT and RELEASE are queued (db.Tx.Queued): they ride with the
// statements and the next round trip, and cost none of their own.
//
// Before the events, it takes the lock that orders them with the creation
// of their users' endpoints (LockEndpointsOfStagedEvents, queued too: it
// runs, and so waits for an endpoint being created, before the statement
// that reads the endpoints takes its snapshot).
func writeStaged(ctx context.Context, tx *db.Tx, eventIDs, receiptIDs []int64) error {
	if _, err := tx.Queued().Exec(ctx, "SAVEPOINT write_staged"); err != nil {
		return err
	}
	err := func() error {
		if len(eventIDs) > 0 {
			if err := queries.LockEndpointsOfStagedEvents(ctx, tx.Queued(), eventIDs); err != nil {
				return err
			}
			if _, err := queries.WriteStagedEvents(ctx, tx, eventIDs); err != nil {
				return err
			}
		}
		if len(receiptIDs) > 0 {
			if _, err := queries.WriteStagedReceipts(ctx, tx, receiptIDs); err != nil {
				return err
			}
		}
		return nil
	}()
	if err != nil {
		if _, rollbackErr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT write_staged"); rollbackErr != nil {
			return errors.Join(err, rollbackErr)
		}
		return err
	}
	_, err = tx.Queued().Exec(ctx, "RELEASE SAVEPOINT write_staged")
	return err
}

// withCreated sets an event's arguments' created to its staged row's
// created_at, the event's created (see EventArgs.Created), for EventWorker.
// Arguments that are not an object are left as they are: EventWorker
// refuses them anyway.
func withCreated(args []byte, created time.Time) json.RawMessage {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(args, &fields); err != nil || fields == nil {
		return args
	}
	at, err := json.Marshal(created)
	if err != nil {
		return args
	}
	fields["created"] = at
	out, err := json.Marshal(fields)
	if err != nil {
		return args
	}
	return out
}

func jobIDs(jobs []dbsqlc.StagedJob) []int64 {
	out := make([]int64, len(jobs))
	for i, job := range jobs {
		out[i] = job.ID
	}
	return out
}

func (e *Enqueuer) backlog() float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, err := queries.CountStagedJobs(ctx, e.cfg.Pool)
	if err != nil {
		return -1
	}
	return float64(n)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
