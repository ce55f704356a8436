package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/example/payments/internal/api"
	"github.com/example/payments/internal/app"
	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/failpoint"
	"github.com/example/payments/internal/keyfilter"
	"github.com/example/payments/internal/merchanthooks"
	"github.com/example/payments/internal/safehttp"
	"github.com/example/payments/internal/stagedjobs"
	"github.com/example/payments/internal/telemetry"
	"github.com/example/payments/internal/worker"
)

// process is what one payments command runs: the service's parts,
// assembled by internal/app, and the configuration they run with. serve,
// worker and dev share it.
type process struct {
	*app.App
	cfg config
}

func newProcess(ctx context.Context, cfg config, log *slog.Logger) (*process, error) {
	failpoints, err := failpoint.Parse(cfg.Failpoints)
	if err != nil {
		return nil, fmt.Errorf("%w: PAYMENTS_FAILPOINTS: %v", errUsage, err)
	}
	if telemetry.Enabled() {
		failpoints.BeforeCrash(flushBeforeCrash) // tracing.go
	}
	stripe, err := newStripeClient(cfg, log)
	if err != nil {
		return nil, err
	}
	a, err := app.New(ctx, app.Config{
		DatabaseURL: cfg.DatabaseURL, Pool: db.PoolConfig{MaxConns: int32(cfg.DBMaxConns), TxTimeout: cfg.DBTxTimeout},
		KeyTTL: cfg.KeyTTL, LockTimeout: cfg.LockTimeout, StripeSpentKeyGrace: cfg.StripeSpentKeyGrace, Failpoints: failpoints,
		KeyFilter: keyfilter.Config{
			ExpectedKeysPerSlice: uint(cfg.KeyFilterExpectedKeys), FalsePositiveRate: cfg.KeyFilterFPRate, Disabled: !cfg.KeyFilter,
		},
		Stripe: stripe, WebhookSecret: cfg.StripeWebhookSecret, Logger: log, WebhookURLCheck: webhookURLCheck(cfg, log),
		ConsoleToken: cfg.ConsoleToken, ConsoleTraceURL: cfg.ConsoleTraceURL,
	})
	if errors.Is(err, app.ErrKeyFilterConfig) {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if errors.Is(err, failpoint.ErrUnknown) { // a name no flow fires: refused as the engine is built
		return nil, fmt.Errorf("%w: PAYMENTS_FAILPOINTS: %v", errUsage, err)
	}
	if err != nil {
		return nil, err
	}
	// A key of a flow this build does not declare waits for a build that
	// does (after a rollback, say): the operator hears it now, not one key
	// at a time from the completer.
	if unknown, err := a.Engine.UnfinishedKeysOfUnknownFlows(ctx); err != nil {
		log.Warn("could not count the unfinished keys of each flow", slog.String("error", err.Error()))
	} else if len(unknown) > 0 {
		log.Error("unfinished keys of flows this build does not declare: a build that declares them must finish them",
			slog.Any("keys_by_flow", unknown))
	}
	if cfg.StripeWebhookSecret == "" {
		log.Warn("STRIPE_WEBHOOK_SECRET is not set: every Stripe webhook delivery will be refused")
	}
	return &process{App: a, cfg: cfg}, nil
}

// serveAPI serves the API on ln until ctx is cancelled, then stops taking new
// connections and gives in-flight requests cfg.ShutdownTimeout to finish.
// The key filter is made ready meanwhile (from its snapshot and the keys
// made since, or from every live key); until it is ready, claims are
// careful. Once ready, its snapshot is stored every
// cfg.KeyFilterSnapshotInterval and at shutdown.
func (p *process) serveAPI(ctx context.Context, ln net.Listener) error {
	start := time.Now()
	var covers time.Time // zero: the full rebuild
	from := "rebuild"
	snapshots := p.cfg.KeyFilter && p.cfg.KeyFilterSnapshotInterval > 0
	if snapshots {
		// Loaded before the API serves: the snapshot's bits were hashed with
		// its own seed, which a claim's add before the load would not use.
		c, err := p.Engine.LoadKeyFilterSnapshot(ctx, p.cfg.KeyFilterSnapshotMaxAge)
		if err != nil {
			p.Log.Info("key filter snapshot not used; reading every live key", slog.String("reason", err.Error()))
		} else {
			covers, from = c, "snapshot"
		}
	}
	filterCtx, stopFilter := context.WithCancel(ctx)
	var filterDone sync.WaitGroup
	filterDone.Go(func() {
		st, err := p.Engine.RebuildKeyFilterSince(filterCtx, covers)
		if err != nil {
			p.Log.Warn("key filter rebuild failed; claims stay careful", slog.String("error", err.Error()))
			return
		}
		// The rebuild read every live key a page at a time: at ten million
		// keys, some hundreds of MB of pages that are garbage now, which the
		// service's GOGC (internal/tuning) would keep mapped until the
		// runtime's scavenger gives them back, minutes later.
		debug.FreeOSMemory()
		p.Log.Info("key filter ready", slog.Int("keys", st.Added), slog.Duration("took", time.Since(start)), slog.String("from", from))
		if snapshots {
			p.writeKeyFilterSnapshots(filterCtx)
		}
	})
	handler, err := p.APIHandler(api.RateLimit{Rate: p.cfg.RateLimit, Burst: p.cfg.RateLimitBurst}, p.cfg.apiAuthCacheTTL())
	if err == nil {
		p.Log.Info("API listening", slog.String("addr", ln.Addr().String()))
		// net/http's own answers (a header over 1 MiB, a request it
		// cannot parse) are problem+json too.
		err = p.serveHTTP(ctx, api.Listener(ln), handler, "API")
	}
	stopFilter()
	filterDone.Wait() // the last snapshot is written before the pool closes
	return err
}

// keyFilterSnapshotTimeout bounds the snapshot written at shutdown.
const keyFilterSnapshotTimeout = 10 * time.Second

// writeKeyFilterSnapshots stores the key filter's snapshot every
// cfg.KeyFilterSnapshotInterval, and once more when ctx is done.
func (p *process) writeKeyFilterSnapshots(ctx context.Context) {
	tick := time.NewTicker(p.cfg.KeyFilterSnapshotInterval)
	defer tick.Stop()
	write := func(ctx context.Context) {
		start := time.Now()
		n, err := p.Engine.SaveKeyFilterSnapshot(ctx)
		if err != nil {
			p.Log.Warn("key filter snapshot not written", slog.String("error", err.Error()))
			return
		}
		p.Log.Info("key filter snapshot written", slog.Int("bytes", n), slog.Duration("took", time.Since(start)))
	}
	for {
		select {
		case <-tick.C:
			write(ctx)
		case <-ctx.Done():
			last, cancel := context.WithTimeout(context.WithoutCancel(ctx), keyFilterSnapshotTimeout)
			write(last)
			cancel()
			return
		}
	}
}

// runWorker does the background work until ctx is cancelled.
func (p *process) runWorker(ctx context.Context) error {
	mailer, err := stagedjobs.NewMailer(p.cfg.SMTPURL, stagedjobs.SMTPTimeouts{
		Command: p.cfg.SMTPCommandTimeout, DataTermination: p.cfg.SMTPDataTimeout,
	}, p.Log.With(slog.String("component", "mailer")))
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	schedule, err := p.cfg.webhookRetrySchedule()
	if err != nil { // validate refused it already
		return fmt.Errorf("%w: PAYMENTS_WEBHOOK_RETRY_SCHEDULE: %v", errUsage, err)
	}
	return worker.Run(ctx, worker.Config{
		Pool: p.Pool, Logger: p.Log, Registry: p.Registry, Engine: p.Engine, Mailer: mailer,
		WebhookRetrySchedule: schedule, WebhookClient: webhookClient(p.cfg, p.Log),
		Payments: p.Payments, CompleterInterval: p.cfg.CompleterInterval, CompleterGrace: p.cfg.CompleterGrace,
		ReaperInterval: p.cfg.ReaperInterval, EnqueuerPollInterval: p.cfg.EnqueuerPollInterval,
		ReconcileInterval: p.cfg.ReconcileInterval, ReconcileAfter: p.cfg.ReconcileAfter,
		ReconcileBackoffCap: p.cfg.ReconcileBackoffCap, ReconcileRate: p.cfg.ReconcileRate,
		ShutdownTimeout: p.cfg.ShutdownTimeout,
	})
}

// webhookClient is the HTTP client of the webhook deliveries
// (internal/safehttp): it times out after merchanthooks.AttemptTimeout,
// follows no redirects (a 3xx is a failed attempt), refuses to connect to
// the service's own addresses, and, unless WebhookAllowPrivate, to a
// non-public address.
func webhookClient(cfg config, log *slog.Logger) *http.Client {
	return safehttp.NewClient(webhookPolicy(cfg, log))
}

func webhookPolicy(cfg config, log *slog.Logger) safehttp.Config {
	return safehttp.Config{AllowPrivate: cfg.WebhookAllowPrivate, Own: cfg.webhookOwn, Timeout: merchanthooks.AttemptTimeout,
		Logger: log.With(slog.String("component", "webhooks"))}
}

// webhookURLCheck refuses, at creation, an endpoint URL the delivery
// client would refuse to connect to. The refusal's text does not say what
// a host name resolved to; this process's debug log does.
func webhookURLCheck(cfg config, log *slog.Logger) func(context.Context, string) error {
	policy := webhookPolicy(cfg, log)
	return func(ctx context.Context, rawURL string) error {
		err := safehttp.CheckURL(ctx, rawURL, policy)
		var refused *safehttp.RefusedError
		if errors.As(err, &refused) {
			log.DebugContext(ctx, "webhook endpoint url refused", slog.String("host", refused.Host),
				slog.String("address", refused.Addr.String()), slog.String("reason", refused.Reason))
		}
		return err
	}
}

// serveMetrics serves /metrics, /healthz (liveness) and /readyz (a commit
// is possible: api.Ready) on ln, for a process without the API.
func (p *process) serveMetrics(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(p.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{\"status\":\"ok\"}\n")) })
	// Readiness as serve's: a worker that cannot commit does no work (its
	// jobs, completer and enqueuer all commit), so an orchestrator can see it.
	mux.Handle("GET /readyz", api.Ready(p.Pool, p.Log))
	p.Log.Info("metrics listening", slog.String("addr", ln.Addr().String()))
	return p.serveHTTP(ctx, ln, mux, "metrics")
}

// serveHTTP serves handler on ln until ctx is cancelled, then shuts down
// in two steps. First it stops taking connections and gives the requests in
// flight cfg.ShutdownTimeout to finish. Then it cancels the context of those
// still running (a Stripe call, a transaction): the engine unlocks each
// one's key and the client gets 503 with Retry-After, so a retry sent to any
// instance resumes the request at once, where a process that just exited
// would leave an empty reply and a key locked for the lock timeout.
func (p *process) serveHTTP(ctx context.Context, ln net.Listener, handler http.Handler, name string) error {
	srv := app.NewServer(handler, p.Log)
	requests, cancelRequests := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelRequests(nil)
	srv.BaseContext = func(net.Listener) context.Context { return requests }
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	p.Log.Info("shutting down "+name+": draining in-flight requests", slog.String("timeout", p.cfg.ShutdownTimeout.String()))
	drainCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(drainCtx); errors.Is(err, context.DeadlineExceeded) {
		p.Log.Warn("shutdown timeout reached: cancelling the requests still in flight; their keys are unlocked and their clients told to retry")
		cancelRequests(errShuttingDown)
		// Shutdown again waits for the cancelled handlers to write their
		// answers; cancelling is quick, so a few seconds are plenty.
		answerCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelledAnswerTimeout)
		defer cancel()
		if err := srv.Shutdown(answerCtx); err != nil {
			return fmt.Errorf("answering cancelled %s requests: %w", name, err)
		}
	} else if err != nil {
		return fmt.Errorf("draining %s requests: %w", name, err)
	}
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	p.Log.Info(name + " stopped")
	return nil
}

// errShuttingDown is why the requests still running at the shutdown
// timeout were cancelled.
var errShuttingDown = errors.New("the process is shutting down")

// cancelledAnswerTimeout bounds how long cancelled requests take to unlock
// their keys and answer.
const cancelledAnswerTimeout = 10 * time.Second

// runAll runs each function until ctx ends or one fails; a failure stops
// the others. It returns the first error.
func runAll(ctx context.Context, fns ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(fns))
	for _, fn := range fns {
		go func() {
			err := fn(ctx)
			cancel()
			errs <- err
		}()
	}
	var first error
	for range fns {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
