package recovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
)

// CompleterConfig configures a Completer.
type CompleterConfig struct {
	// Engine runs the keys, each with the flow of its name among those
	// the engine was built with (New, Builder).
	Engine *Engine
	// Grace is how long a key must sit unfinished and untouched before the
	// completer takes it (the client may still be retrying). A key the
	// completer already tried n times waits Grace*2^n. Default 30s.
	Grace time.Duration
	// MaxBackoff caps the wait between two tries of one key. Default 1h.
	MaxBackoff time.Duration
	// RunBudget is how long one run goes on claiming keys: past it, the run
	// finishes the keys it holds and claims no more, so that it ends within
	// the time its caller gives it (the worker's job has 30 s). Default 15s.
	RunBudget time.Duration
	// SweepBudget is how long one run's sweep of the table of unfinished
	// keys goes on at most: past it, the sweep stops after its page, and
	// the next run's sweep starts where this one stopped. A run claims keys
	// until RunBudget after it began, so a sweep that takes the whole
	// budget leaves it none: while the table holds many rows of finished
	// keys, each claim, which joins the table's rows to their keys, would
	// read them all (0.6 s a claim with a million such rows, measured on
	// 2026-11-27). Default RunBudget.
	SweepBudget time.Duration
	// Concurrency is how many keys one run works on at once. Default 4.
	Concurrency int
	// Registry, when set, receives the completer's metrics.
	Registry prometheus.Registerer
}

// Completer finishes requests that nobody retries: keys left unfinished by
// a crash, a client that gave up, or a transient failure. It claims them one
// at a time, as it is about to work on each (FOR UPDATE SKIP LOCKED, so
// several completers can run), and drives each from its recovery point with
// its stored parameters, exactly as a retry from the client would. A key is
// never claimed ahead of the work: a claim bumps the key's attempts (and so
// its backoff) and holds its lock, and a key that waited in a batch for time
// the run did not have would pay for a try it never got, while its client
// was answered 409.
type Completer struct {
	cfg     CompleterConfig
	metrics completerMetrics

	// sweepMu guards sweepFrom: where the next sweep starts, after the
	// last id a sweep that ran out of its budget reached (uuid.Nil: at
	// the start of the table).
	sweepMu   sync.Mutex
	sweepFrom uuid.UUID
}

// CompleterRun is what one run did.
type CompleterRun struct {
	Claimed, Finished, Failed, NeedsAttention int
}

// NewCompleter returns a Completer.
func NewCompleter(cfg CompleterConfig) *Completer {
	if cfg.Grace <= 0 {
		cfg.Grace = 30 * time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = time.Hour
	}
	if cfg.RunBudget <= 0 {
		cfg.RunBudget = 15 * time.Second
	}
	if cfg.SweepBudget <= 0 {
		cfg.SweepBudget = cfg.RunBudget
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	return &Completer{cfg: cfg, metrics: newCompleterMetrics(cfg.Registry)}
}

// RunOnce drives abandoned keys, Concurrency at a time, each to its end or
// as far as it gets, claiming the next one only while RunBudget lasts,
// until none is left to claim.
func (c *Completer) RunOnce(ctx context.Context) (CompleterRun, error) {
	c.metrics.runs.Inc()
	started := time.Now()
	if err := c.sweepUnfinished(ctx, started.Add(c.cfg.SweepBudget)); err != nil {
		// The keys' rows are still there to be claimed: a sweep that fails
		// leaves the table bigger, never a key unfound, so the run goes on
		// to its real work.
		c.cfg.Engine.log.WarnContext(ctx, "completer: the sweep of the table of unfinished keys failed", slog.Any("error", err))
	}
	stopClaiming := started.Add(c.cfg.RunBudget)
	var (
		mu       sync.Mutex
		run      CompleterRun
		claimErr error
		wg       sync.WaitGroup
	)
	for range c.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stopClaiming) && ctx.Err() == nil {
				claimStarted := time.Now()
				k, err := c.claimOne(ctx)
				if err != nil || k == nil {
					mu.Lock()
					claimErr = cmp.Or(claimErr, err)
					mu.Unlock()
					return
				}
				err = c.complete(ctx, k, claimStarted)
				mu.Lock()
				run.Claimed++
				switch {
				case err == nil:
					run.Finished++
				case errors.Is(err, ErrNeedsAttention), errors.Is(err, ErrFailed):
					run.NeedsAttention++
				default:
					run.Failed++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	c.metrics.finished.Add(float64(run.Finished))
	c.metrics.failed.Add(float64(run.Failed))
	c.metrics.attention.Add(float64(run.NeedsAttention))
	return run, cmp.Or(claimErr, ctx.Err())
}

// sweepPage is how many rows of the table of unfinished keys one sweep
// statement reads: a run's sweep takes one statement per sweepPage rows.
const sweepPage = 5000

// sweepUnfinished takes the rows of keys that finished since the last run
// out of the table of unfinished keys, through which claimOne finds its
// keys: a key's finish leaves its row there, since taking it out in the
// request's transaction cost more than the rest of the finish (migration
// 000029). A run starts with it, so the table holds the keys in flight,
// those waiting for the completer, and the keys finished since (at most a
// completer interval of them). It runs in READ COMMITTED: it sees only
// committed keys, and takes no predicate lock for a request's SERIALIZABLE
// transaction to conflict with.
//
// It stops after the page that ends past deadline, and the next run's
// sweep goes on from there. After a long outage of the worker the table
// holds every key made since: a page of 5,000 rows of time-ordered ids took
// 65 ms (measured on 2026-11-27, at a million keys; 0.15 to 0.2 s with
// random ids), so ten million rows take about two minutes, more than the
// worker gives a run (30 s). Without the deadline the job's context ended
// the sweep in the middle of a page, and every run started again at the
// head of the table, over the dead rows of the pages already swept.
func (c *Completer) sweepUnfinished(ctx context.Context, deadline time.Time) error {
	c.sweepMu.Lock()
	defer c.sweepMu.Unlock()
	page := dbsqlc.SweepUnfinishedKeysParams{PageSize: sweepPage, AfterID: c.sweepFrom}
	for {
		var swept dbsqlc.SweepUnfinishedKeysRow
		err := db.WithTx(ctx, c.cfg.Engine.cfg.Pool, db.TxOptions{Isolation: pgx.ReadCommitted},
			func(ctx context.Context, tx *db.Tx) (err error) {
				swept, err = queries.SweepUnfinishedKeys(ctx, tx, page)
				return err
			})
		if err != nil {
			// The pages before this one are swept: the next run goes on
			// from here (a job's context that ends mid-page, say).
			c.sweepFrom = page.AfterID
			return fmt.Errorf("sweeping the table of unfinished keys: %w", err)
		}
		c.metrics.swept.Add(float64(swept.Swept))
		if swept.PageRows < sweepPage {
			c.sweepFrom = uuid.Nil // the end of the table: the next sweep starts over
			return nil
		}
		page.AfterID = swept.LastID
		if time.Now().After(deadline) {
			c.sweepFrom = page.AfterID
			return nil
		}
	}
}

// claimOne claims the abandoned key that waited longest, or returns nil
// when there is none.
func (c *Completer) claimOne(ctx context.Context) (*Key, error) {
	e := c.cfg.Engine
	rows, err := queries.ClaimAbandonedKeys(ctx, e.cfg.Pool, dbsqlc.ClaimAbandonedKeysParams{
		Now: e.queryNow(), LockLifetimeSeconds: e.lockLifetime(), GraceSeconds: c.cfg.Grace.Seconds(),
		MaxBackoffSeconds: c.cfg.MaxBackoff.Seconds(), BatchSize: 1, ExternalWindowSeconds: e.cfg.ExternalWindow.Seconds(),
		CallWindowTailSeconds: e.callWindowTail(),
	})
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	k := toKey(rows[0].IdempotencyKey)
	k.pastExternalWindow = rows[0].PastExternalWindow
	return k, nil
}

func (c *Completer) complete(ctx context.Context, k *Key, claimStarted time.Time) error {
	resp, err := c.resume(ctx, k, "completer", claimStarted)
	if err != nil {
		return err
	}
	c.cfg.Engine.log.InfoContext(ctx, "completer: request finished", slog.String("idempotency_key_id", k.ID.String()),
		slog.Int("status", resp.Status))
	return nil
}

// resume drives k, which who (the completer, or an operator's retry) has
// just claimed (the claim began at claimStarted), from its recovery point
// to its answer.
func (c *Completer) resume(ctx context.Context, k *Key, who string, claimStarted time.Time) (resp Response, err error) {
	ctx, endSpan := traceResume(ctx, k, who, claimStarted) // a trace of its own, linked to the request's: trace.go
	defer func() { endSpan(err) }()
	e := c.cfg.Engine
	flow, ok := e.Flow(k.Flow)
	if !ok {
		flow = &Flow{Name: k.Flow}
	}
	a := e.newAttempt(flow, k)
	a.log = a.log.With(slog.String("component", who))
	if !ok {
		e.unlock(ctx, a, nil)
		a.log.ErrorContext(ctx, who+": no such flow in this build; a build that declares it must finish the key")
		return Response{}, bug("%s: unknown flow %q", who, k.Flow)
	}
	a.log.InfoContext(ctx, who+": resuming a request", slog.String("recovery_point", string(k.RecoveryPoint)))
	return e.drive(ctx, a)
}

type completerMetrics struct {
	runs, finished, failed, attention, swept prometheus.Counter
}

func newCompleterMetrics(reg prometheus.Registerer) completerMetrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := completerMetrics{
		runs:      counter("payments_completer_runs_total", "Completer runs."),
		finished:  counter("payments_completer_keys_finished_total", "Abandoned requests the completer finished."),
		failed:    counter("payments_completer_keys_failed_total", "Completer attempts that failed; the key is tried again after a backoff."),
		attention: counter("payments_completer_keys_needing_attention_total", "Keys the completer gave up on: past Stripe's idempotency window with no trace at Stripe, or failed with an error no retry can cure."),
		swept:     counter("payments_completer_unfinished_rows_swept_total", "Rows of finished or deleted keys the completer took out of the table of unfinished keys."),
	}
	if reg != nil {
		reg.MustRegister(m.runs, m.finished, m.failed, m.attention, m.swept)
	}
	return m
}
