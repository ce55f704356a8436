package recovery

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/example/payments/internal/db/dbsqlc"
)

// CompleterConfig configures a Completer.
type CompleterConfig struct {
	Engine *Engine
	// Flows are every flow a key may name.
	Flows []*Flow
	// Grace is how long a key must sit unfinished and untouched before the
	// completer takes it (the client may still be retrying). A key the
	// completer already tried n times waits Grace*2^n. Default 30s.
	Grace time.Duration
	// MaxBackoff caps the wait between two tries of one key. Default 1h.
	MaxBackoff time.Duration
	// BatchSize is how many keys one run claims. Default 100.
	BatchSize int
	// Registry, when set, receives the completer's metrics.
	Registry prometheus.Registerer
}

// Completer finishes requests that nobody retries: keys left unfinished by
// a crash, a client that gave up, or a transient failure. It claims them in
// batches (FOR UPDATE SKIP LOCKED, so several completers can run) and drives
// each from its recovery point with its stored parameters, exactly as a
// retry from the client would.
type Completer struct {
	cfg     CompleterConfig
	flows   map[string]*Flow
	metrics completerMetrics
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
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 100
	}
	c := &Completer{cfg: cfg, flows: map[string]*Flow{}, metrics: newCompleterMetrics(cfg.Registry)}
	for _, f := range cfg.Flows {
		c.flows[f.Name] = f
	}
	return c
}

// RunOnce claims one batch of abandoned keys and drives each to its end or
// as far as it gets.
func (c *Completer) RunOnce(ctx context.Context) (CompleterRun, error) {
	e := c.cfg.Engine
	c.metrics.runs.Inc()
	rows, err := queries.ClaimAbandonedKeys(ctx, e.cfg.Pool, dbsqlc.ClaimAbandonedKeysParams{
		Now: e.now(), LockTimeoutSeconds: e.cfg.LockTimeout.Seconds(), GraceSeconds: c.cfg.Grace.Seconds(),
		MaxBackoffSeconds: c.cfg.MaxBackoff.Seconds(), BatchSize: int32(c.cfg.BatchSize),
	})
	if err != nil {
		return CompleterRun{}, err
	}
	run := CompleterRun{Claimed: len(rows)}
	for _, row := range rows {
		switch err := c.complete(ctx, toKey(row)); {
		case err == nil:
			run.Finished++
		case errors.Is(err, ErrNeedsAttention):
			run.NeedsAttention++
		default:
			run.Failed++
		}
	}
	c.metrics.finished.Add(float64(run.Finished))
	c.metrics.failed.Add(float64(run.Failed))
	c.metrics.attention.Add(float64(run.NeedsAttention))
	return run, ctx.Err()
}

func (c *Completer) complete(ctx context.Context, k *Key) error {
	e := c.cfg.Engine
	log := e.log.With(slog.String("idempotency_key_id", k.ID.String()), slog.String("flow", k.Flow),
		slog.String("component", "completer"))
	flow, ok := c.flows[k.Flow]
	if !ok {
		e.unlock(ctx, log, k)
		log.ErrorContext(ctx, "completer: no such flow")
		return bug("completer: unknown flow %q", k.Flow)
	}
	log.InfoContext(ctx, "completer: resuming an abandoned request", slog.String("recovery_point", string(k.RecoveryPoint)))
	resp, err := e.drive(ctx, log, flow, k)
	if err != nil {
		return err
	}
	log.InfoContext(ctx, "completer: request finished", slog.Int("status", resp.Status))
	return nil
}

type completerMetrics struct {
	runs, finished, failed, attention prometheus.Counter
}

func newCompleterMetrics(reg prometheus.Registerer) completerMetrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := completerMetrics{
		runs:      counter("payments_completer_runs_total", "Completer runs."),
		finished:  counter("payments_completer_keys_finished_total", "Abandoned requests the completer finished."),
		failed:    counter("payments_completer_keys_failed_total", "Completer attempts that failed; the key is tried again after a backoff."),
		attention: counter("payments_completer_keys_needing_attention_total", "Keys the completer gave up on: past Stripe's idempotency window with no trace at Stripe."),
	}
	if reg != nil {
		reg.MustRegister(m.runs, m.finished, m.failed, m.attention)
	}
	return m
}
