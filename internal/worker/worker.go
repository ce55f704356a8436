// Package worker assembles the background work of the service on River:
// the staged-job enqueuer, the job workers (receipts, merchant events), and
// the completer, the reaper and the reconciler as River periodic
// jobs. River elects one leader among all running workers and only the
// leader inserts periodic jobs, so one run of each happens at a time across
// every instance. Any number of workers may run at once.
//
// Receipts and webhook deliveries are not River jobs: the drain writes
// their rows, and the receipt sender (stagedjobs.ReceiptSender) and the
// webhook dispatcher (merchanthooks.Dispatcher) claim them in batches from
// their own tables, each with slots of its own (and, for deliveries, a
// share per endpoint), so a slow or hung mail server or merchant cannot
// take the workers of the other jobs nor, since neither holds a connection
// while it waits on the network, the connections of anything else. The
// drain wakes both when it wrote something, so neither waits for its poll.
//
// How many jobs a queue runs per second is bounded by its workers and
// River's fetch cooldown: a queue fetches at most as many jobs as it has
// idle workers, then waits FetchCooldown before it fetches again. With
// River's defaults (100 ms) and the 4 receipt and 10 delivery workers this
// package had, receipts could not pass 40 a second nor deliveries 100, far
// below the payments an instance takes (make bench, scenario F, found it:
// docs/BENCHMARKS.md). The cooldown below is what is left of that: the
// River jobs are now the periodic ones and the stragglers of earlier
// versions.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/merchanthooks"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stagedjobs"
)

// Config configures the background work. Zero intervals take the defaults.
type Config struct {
	Pool     *pgxpool.Pool
	Logger   *slog.Logger
	Registry prometheus.Registerer
	Engine   *recovery.Engine
	Flows    []*recovery.Flow
	Mailer   stagedjobs.Mailer
	// Payments is reconciled with Stripe (nil: no reconciler).
	Payments *payments.Service
	// WebhookClient makes the webhook deliveries' attempts: it times out
	// (merchanthooks.AttemptTimeout), follows no redirects and, in
	// production, refuses non-public addresses. Nil: a plain client with
	// that timeout.
	WebhookClient *http.Client
	// WebhookRetrySchedule is the delays between a delivery's attempts.
	// Default merchanthooks.DefaultRetrySchedule.
	WebhookRetrySchedule []time.Duration
	// WebhookWorkers is how many deliveries are attempted at once, by the
	// webhook dispatcher (merchanthooks.Dispatcher), at most
	// merchanthooks.DefaultPerEndpoint of them to one endpoint. Default 50:
	// an attempt holds no connection while the merchant has it, so slow
	// merchants take only the dispatcher's slots (goroutines waiting on
	// sockets).
	WebhookWorkers int

	// CompleterInterval is how often the completer runs. Default 10s.
	CompleterInterval time.Duration
	// CompleterGrace is how long a key sits untouched before the completer takes it. Default 30s.
	CompleterGrace time.Duration
	// ReaperInterval is how often the reaper runs. Default 1m.
	ReaperInterval time.Duration
	// ReconcileInterval is how often the reconciler looks for payments
	// due a check. Default 30s.
	ReconcileInterval time.Duration
	// ReconcileAfter is how long a payment Stripe could still change goes
	// (from when it was made, or got a new refund) before the reconciler asks Stripe about it
	// (its webhook may have been lost), and the first step of the back-off
	// after. Default 5m.
	ReconcileAfter time.Duration
	// ReconcileBackoffCap bounds the back-off between two checks of one
	// payment. Default 6h.
	ReconcileBackoffCap time.Duration
	// ReconcileRate is how many Stripe calls a second the reconciler of
	// this process makes at most. Default 20.
	ReconcileRate float64
	// EnqueuerPollInterval is how often the enqueuer looks for staged
	// jobs. Default stagedjobs.DefaultPollInterval.
	EnqueuerPollInterval time.Duration
	// MaxWorkers is how many jobs of the default queue run at once in this
	// process. Default 50: the jobs are short database writes, each holding
	// a connection only for its statement.
	MaxWorkers int
	// ReceiptWorkers is how many receipts are sent at once, by the receipt
	// sender (stagedjobs.ReceiptSender). Default 20. A receipt holds no
	// connection while the mail server has it, only for its short writes
	// around the send; the cap bounds the mail server's load (20
	// conversations at once, under the 50 a Postfix server allows a client
	// by default).
	ReceiptWorkers int
	// ReceiptSendTimeout bounds one attempt at sending a receipt. Default:
	// the mailer's MaxSendTime (the SMTP mailer's: RFC 5321's timeouts, 35
	// minutes in all), or stagedjobs.DefaultSendTimeout.
	ReceiptSendTimeout time.Duration
	// ReceiptRetryDelay is the wait after a receipt's failed send number
	// attempt. Default stagedjobs.DefaultReceiptRetryDelay; tests make it
	// short.
	ReceiptRetryDelay func(attempt int) time.Duration
	// JobTimeout is how long a job may run before its context ends.
	// Default 30s. The receipt job has its own, longer than its send
	// (stagedjobs.ReceiptWorker.Timeout).
	JobTimeout time.Duration
	// ShutdownTimeout is how long running jobs may take to finish once ctx
	// ends; those still running then are cancelled. Default 35s.
	ShutdownTimeout time.Duration
	// RetryPolicy says when a failed job runs again. Default River's
	// (attempt^4 seconds, with jitter); tests make it short.
	RetryPolicy river.ClientRetryPolicy
}

// Run does the background work until ctx ends, then stops River gracefully.
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	completer := recovery.NewCompleter(recovery.CompleterConfig{
		Engine: cfg.Engine, Grace: cfg.CompleterGrace, Registry: cfg.Registry,
	})
	reaper := recovery.NewReaper(cfg.Engine, 0, cfg.Registry)

	workers := river.NewWorkers()
	stagedjobs.AddWorkers(workers, stagedjobs.WorkersConfig{
		Pool: cfg.Pool, Mailer: cfg.Mailer, SendTimeout: cfg.ReceiptSendTimeout,
		Logger: cfg.Logger.With(slog.String("component", "receipts")),
	})
	// Deliveries are the dispatcher's (below); River keeps a worker only to
	// finish the delivery jobs an earlier version queued.
	river.AddWorker(workers, &merchanthooks.DeliveryWorker{})
	dispatcher := merchanthooks.NewDispatcher(merchanthooks.DispatcherConfig{
		Pool: cfg.Pool, Client: cfg.WebhookClient, RetrySchedule: cfg.WebhookRetrySchedule,
		Concurrency: cfg.WebhookWorkers, ShutdownTimeout: cfg.ShutdownTimeout,
		Logger: cfg.Logger.With(slog.String("component", "webhook_deliveries")), Registry: cfg.Registry,
	})
	// Receipts are the receipt sender's (below); River keeps the receipt
	// worker for the receipt jobs an earlier version queued, and for those
	// the drain hands it when it cannot write a batch itself.
	sender := stagedjobs.NewReceiptSender(stagedjobs.SenderConfig{
		Pool: cfg.Pool, Mailer: cfg.Mailer, SendTimeout: cfg.ReceiptSendTimeout, Concurrency: cfg.ReceiptWorkers,
		RetryDelay: cfg.ReceiptRetryDelay, ShutdownTimeout: cfg.ShutdownTimeout, Logger: cfg.Logger.With(slog.String("component", "receipts")), Registry: cfg.Registry,
	})
	river.AddWorker(workers, &completerWorker{completer: completer, log: cfg.Logger})
	river.AddWorker(workers, &reaperWorker{reaper: reaper, log: cfg.Logger})
	periodicJobs := []*river.PeriodicJob{
		periodic(cfg.CompleterInterval, CompleterArgs{}),
		periodic(cfg.ReaperInterval, ReaperArgs{}),
	}
	if cfg.Payments != nil {
		reconciler := cfg.Payments.NewReconciler(payments.ReconcilerConfig{
			After: cfg.ReconcileAfter, BackoffCap: cfg.ReconcileBackoffCap, Rate: cfg.ReconcileRate,
			Logger: cfg.Logger.With(slog.String("component", "reconciler")), Registry: cfg.Registry,
		})
		river.AddWorker(workers, &reconcilerWorker{reconciler: reconciler, log: cfg.Logger})
		periodicJobs = append(periodicJobs, periodic(cfg.ReconcileInterval, ReconcilerArgs{}))
	}

	client, err := river.NewClient(riverpgxv5.New(cfg.Pool), &river.Config{
		Logger: cfg.Logger.With(slog.String("component", "river")),
		Queues: map[string]river.QueueConfig{
			river.QueueDefault:      {MaxWorkers: cfg.MaxWorkers},
			stagedjobs.ReceiptQueue: {MaxWorkers: riverReceiptWorkers}, // see AddWorker above
			stagedjobs.WebhookQueue: {MaxWorkers: 1},                   // an earlier version's jobs only
		},
		Workers: workers,
		// A job staged by a traced request carries on its trace
		// (stagedjobs/trace.go); with tracing off the middleware only
		// passes the job on.
		Middleware: []rivertype.Middleware{&stagedjobs.TraceJobs{}, &snoozeWhileDatabaseUnavailable{}},
		// See the package doc: a queue fetches at most its idle workers'
		// worth of jobs per cooldown.
		FetchCooldown: fetchCooldown,
		// Every job here is safe to run twice, so a job left "running" by a
		// worker that was killed is taken up again after a minute, not after
		// River's default hour.
		JobTimeout:           cfg.JobTimeout,
		RetryPolicy:          cfg.RetryPolicy,
		RescueStuckJobsAfter: time.Minute,
		PeriodicJobs:         periodicJobs,
	})
	if err != nil {
		return fmt.Errorf("creating the River client: %w", err)
	}
	// River treats the end of Start's context as an abrupt stop that cancels
	// running jobs; it gets one that outlives the signal, and Stop below
	// lets running jobs finish.
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("starting River: %w", err)
	}
	enqueuer := stagedjobs.NewEnqueuer(stagedjobs.EnqueuerConfig{
		Pool: cfg.Pool, River: client, Logger: cfg.Logger.With(slog.String("component", "enqueuer")),
		PollInterval: cfg.EnqueuerPollInterval, Registry: cfg.Registry,
		// What the drain wrote is claimed at once, not at the next poll.
		OnWritten: func() { dispatcher.Wake(); sender.Wake() },
	})
	cfg.Logger.Info("worker started", slog.String("completer_interval", cfg.CompleterInterval.String()),
		slog.String("completer_grace", cfg.CompleterGrace.String()), slog.String("reaper_interval", cfg.ReaperInterval.String()),
		slog.String("reconcile_interval", cfg.ReconcileInterval.String()),
		slog.String("reconcile_after", cfg.ReconcileAfter.String()),
		slog.Int("receipt_workers", cfg.ReceiptWorkers))
	dispatched, sent := make(chan error, 1), make(chan error, 1)
	go func() { dispatched <- dispatcher.Run(ctx) }()
	go func() { sent <- sender.Run(ctx) }()
	runErr := enqueuer.Run(ctx)
	return errors.Join(runErr, stop(ctx, client, cfg.ShutdownTimeout, cfg.Logger), <-dispatched, <-sent)
}

// stop lets River's running jobs finish for timeout, then cancels those
// still running: a completer attempt stuck at Stripe unlocks its key, a
// receipt gives back its reservation, so nothing stays locked by a process
// that is gone (a job left running when the process exits would hold its
// key for the lock timeout, with nobody heartbeating it). A receipt whose
// send is cancelled while it waits for the answer to the end of its DATA
// (up to 10 minutes) may be sent again by its retry, if the server accepts
// it all the same: docs/failure-scenarios.md gives that window.
func stop(ctx context.Context, client *river.Client[pgx.Tx], timeout time.Duration, log *slog.Logger) error {
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	err := client.Stop(stopCtx)
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	log.Warn(CancelledJobsMessage)
	cancelCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelledJobsTimeout)
	defer cancel()
	return client.StopAndCancel(cancelCtx)
}

// riverReceiptWorkers run the River receipt jobs left: an earlier
// version's, and the batches the drain could not write (the receipt sender
// sends the rest).
const riverReceiptWorkers = 2

// fetchCooldown is the least time between two fetches of one queue
// (River's default: 100 ms).
const fetchCooldown = 25 * time.Millisecond

// CancelledJobsMessage is logged when the shutdown timeout cuts the jobs
// still running (a receipt cut there after the mail server accepted it is
// sent again; the chaos suite reads the line to know that it happened).
const CancelledJobsMessage = "shutdown timeout reached: cancelling the jobs still running"

// cancelledJobsTimeout bounds how long cancelled jobs take to return.
const cancelledJobsTimeout = 10 * time.Second

func (cfg *Config) defaults() {
	if cfg.CompleterInterval <= 0 {
		cfg.CompleterInterval = 10 * time.Second
	}
	if cfg.CompleterGrace <= 0 {
		cfg.CompleterGrace = 30 * time.Second
	}
	if cfg.ReaperInterval <= 0 {
		cfg.ReaperInterval = time.Minute
	}
	if cfg.ReconcileInterval <= 0 {
		cfg.ReconcileInterval = 30 * time.Second
	}
	if cfg.EnqueuerPollInterval <= 0 {
		cfg.EnqueuerPollInterval = stagedjobs.DefaultPollInterval
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 35 * time.Second
	}
	if cfg.MaxWorkers <= 0 {
		cfg.MaxWorkers = 50
	}
	if cfg.ReceiptWorkers <= 0 {
		cfg.ReceiptWorkers = 20
	}
	if cfg.WebhookWorkers <= 0 {
		cfg.WebhookWorkers = 50
	}
	if cfg.JobTimeout <= 0 {
		cfg.JobTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
}

// periodic is a job River's leader inserts every interval, and once at start.
// One attempt is enough: the next period runs it again anyway.
func periodic(interval time.Duration, args river.JobArgs) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) { return args, &river.InsertOpts{MaxAttempts: 1} },
		&river.PeriodicJobOpts{RunOnStart: true})
}

// CompleterArgs is the completer's periodic job.
type CompleterArgs struct{}

// Kind names the job for River.
func (CompleterArgs) Kind() string { return "completer" }

type completerWorker struct {
	river.WorkerDefaults[CompleterArgs]
	completer *recovery.Completer
	log       *slog.Logger
}

// Work runs the completer once: a run goes on until nothing is left to
// claim or its budget (15 s, inside the job's 30 s) is spent; the next
// periodic job takes what is left.
func (w *completerWorker) Work(ctx context.Context, _ *river.Job[CompleterArgs]) error {
	run, err := w.completer.RunOnce(ctx)
	if run.Claimed > 0 {
		w.log.InfoContext(ctx, "completer run", slog.Int("claimed", run.Claimed), slog.Int("finished", run.Finished),
			slog.Int("failed", run.Failed), slog.Int("needs_attention", run.NeedsAttention))
	}
	return err
}

// ReaperArgs is the reaper's periodic job.
type ReaperArgs struct{}

// Kind names the job for River.
func (ReaperArgs) Kind() string { return "reaper" }

type reaperWorker struct {
	river.WorkerDefaults[ReaperArgs]
	reaper *recovery.Reaper
	log    *slog.Logger
}

// Work deletes expired finished keys.
func (w *reaperWorker) Work(ctx context.Context, _ *river.Job[ReaperArgs]) error {
	n, err := w.reaper.RunOnce(ctx)
	if n > 0 {
		w.log.InfoContext(ctx, "reaper run", slog.Int64("deleted", n))
	}
	return err
}

// ReconcilerArgs is the reconciler's periodic job.
type ReconcilerArgs struct{}

// Kind names the job for River.
func (ReconcilerArgs) Kind() string { return "reconciler" }

// reconcileBudget is how long a run starts passes: like the completer's, a
// run fits inside its job's 30 s and leaves the rest to the next one.
const reconcileBudget = 15 * time.Second

type reconcilerWorker struct {
	river.WorkerDefaults[ReconcilerArgs]
	reconciler *payments.Reconciler
	log        *slog.Logger
}

// Work makes passes until one finds less than a full batch due, Stripe
// answers 429 (the reconciler pauses), or the run's budget is spent. Each
// pass claims its payments, so another worker's run at the same time takes
// others.
func (w *reconcilerWorker) Work(ctx context.Context, _ *river.Job[ReconcilerArgs]) error {
	var total payments.ReconcileRun
	defer func() {
		if total.Claimed > 0 {
			w.log.InfoContext(ctx, "reconciler run", slog.Int("claimed", total.Claimed), slog.Int("checked", total.Checked),
				slog.Int("corrected", total.Corrected), slog.Int("refused", total.Refused), slog.Bool("paused", total.Paused))
		}
	}()
	for stop := time.Now().Add(reconcileBudget); time.Now().Before(stop); {
		run, err := w.reconciler.RunOnce(ctx)
		total.Claimed += run.Claimed
		total.Checked += run.Checked
		total.Corrected += run.Corrected
		total.Refused += run.Refused
		total.Paused = total.Paused || run.Paused
		if err != nil || run.Paused || run.Claimed < w.reconciler.Batch() {
			return err
		}
	}
	return nil
}

// unavailableSnooze is how long a job that met the database's
// unavailability waits before it runs again: a failover of the formation of
// docs/API.md section 11 takes writes again within 15 s, so a few tries
// span it.
const unavailableSnooze = 5 * time.Second

// snoozeWhileDatabaseUnavailable is River middleware: a job that failed
// because the database could not commit (db.IsUnavailable: its machine
// died, a failover is under way, a commit outlived PAYMENTS_DB_TX_TIMEOUT)
// is snoozed, which River does not count as an attempt, instead of failed:
// the failure is transient and the job's, whose work is safe to run again
// (every job here is), so a long outage does not spend the job's attempts
// and discard it. A job's own snooze or cancel passes through.
type snoozeWhileDatabaseUnavailable struct {
	river.MiddlewareDefaults
}

var _ rivertype.WorkerMiddleware = (*snoozeWhileDatabaseUnavailable)(nil)

// Work runs the job, and snoozes it when it failed for want of a database.
func (*snoozeWhileDatabaseUnavailable) Work(ctx context.Context, _ *rivertype.JobRow, doInner func(context.Context) error) error {
	err := doInner(ctx)
	var snooze *rivertype.JobSnoozeError
	var cancel *rivertype.JobCancelError
	if err == nil || errors.As(err, &snooze) || errors.As(err, &cancel) || !db.IsUnavailable(err) {
		return err
	}
	return river.JobSnooze(unavailableSnooze)
}
