package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/failpoint"
	"github.com/example/payments/internal/keyfilter"
)

// Config configures an Engine.
type Config struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger // nil discards
	// KeyTTL is how long a finished key is remembered, from the moment its
	// final answer was stored; after it the key is new again. An unfinished
	// key is never forgotten. Default 24h.
	KeyTTL time.Duration
	// LockTimeout is the lifetime this engine gives the locks it takes: a
	// lock it holds lasts that long after its claim, its last move or its
	// last heartbeat (one every third of it). Every process judges a lock
	// by the lifetime its holder gave it (lock_expires_at), never by its
	// own LockTimeout, so processes configured differently never take over
	// each other's live requests. Default 90s.
	LockTimeout time.Duration
	// ExternalWindow is how long the remote side (Stripe) surely remembers a
	// child key. Past it, an external phase is reconciled, never re-sent.
	// Whether a key is past it is judged by the database, on the one clock
	// that wrote the key's created_at, when the key is claimed. Stripe keeps
	// keys at least 24h; the default, 23h, leaves an hour for the time
	// between that claim and the call, and for Stripe's clock.
	ExternalWindow time.Duration
	// SpentKeyGrace is how long after a child key was first found spent
	// (Stripe replays a 500 it stored under it) the engine goes on
	// treating "the reconcile found nothing" as "not yet": the spent key's
	// request may still be executing at Stripe, and make its object after
	// the reconcile looked. Zero means DefaultSpentKeyGrace; a negative
	// value means none, for tests that show why it is needed.
	SpentKeyGrace time.Duration
	// Now, when set, is the clock used instead of the database's now(), for tests.
	Now func() time.Time
	// Failpoints, when set, fire around commits and after external calls.
	Failpoints *failpoint.Set
	// KeyFilter, when set, lets claims of keys it has never seen skip the
	// lookup (see RebuildKeyFilter).
	KeyFilter *keyfilter.Filter
}

// Engine executes requests with idempotency keys, each with one of the
// flows it was built with. It is built once, with every flow it runs
// (New, or a Builder), and refuses there what would otherwise surface at
// request time: a flow declared wrong, two flows of one name, a failpoint
// that no flow fires.
type Engine struct {
	cfg Config
	log *slog.Logger

	flows map[string]*Flow // by name; never changes once built

	// uncertainUnlocks counts the background unlocks of uncertain claims
	// running now (unlockUncertainClaim), at most maxUncertainUnlocks.
	uncertainUnlocks atomic.Int64
}

// New builds an Engine that runs flows. It refuses a flow declared wrong
// (Flow.Validate), a flow named like another, and failpoints in
// cfg.Failpoints that no flow fires (a misspelt name would never fire, and
// a crash test armed with it would prove nothing; the error names it, and
// the name it was likely meant to be). The errors wrap ErrBadFlow and
// failpoint.ErrUnknown.
//
// New is for a program whose flows are declared in one place. Where
// several packages each declare their own flows (the payment flows, the
// webhook flows), a Builder gathers them, and gives each package a handle
// to run its flows with (Builder.Register).
func New(cfg Config, flows ...*Flow) (*Engine, error) {
	b := NewBuilder(cfg)
	for _, f := range flows {
		b.Register(f)
	}
	return b.Build()
}

// Builder gathers the flows of an engine from the packages that declare
// them, and builds it (Build), refusing there what New refuses:
//
//	b := recovery.NewBuilder(cfg)
//	signup := b.Register(signupFlow)  // a *Registered: runs on the engine b builds
//	engine, err := b.Build()          // refused: a flow declared wrong, a name twice, a failpoint misspelt
//	resp, err := signup.Execute(ctx, req)
//
// A flow runs only through the handle its registration gave, on the engine
// its builder built: a request cannot meet an engine that does not know
// its flow, and the completer, which resumes a key by its flow's name,
// knows every flow a request can run.
type Builder struct {
	cfg    Config
	flows  []*Flow
	engine atomic.Pointer[Engine] // set by Build
}

// NewBuilder starts an engine's build.
func NewBuilder(cfg Config) *Builder { return &Builder{cfg: cfg} }

// Register adds f to the engine being built, and returns the handle that
// runs it there. Register every flow before Build: a flow registered after
// it is not the engine's, and its handle's Execute fails
// (ErrUnregisteredFlow).
func (b *Builder) Register(f *Flow) *Registered {
	b.flows = append(b.flows, f)
	return &Registered{flow: f, builder: b}
}

// Build builds the engine with the registered flows, or says what is
// wrong with them (see New). It builds once.
func (b *Builder) Build() (*Engine, error) {
	if b.engine.Load() != nil {
		return nil, bug("Builder.Build called twice")
	}
	e := newEngine(b.cfg)
	e.flows = make(map[string]*Flow, len(b.flows))
	var failpoints []string
	for _, f := range b.flows {
		if err := f.Validate(); err != nil {
			return nil, err
		}
		if _, dup := e.flows[f.Name]; dup {
			return nil, fmt.Errorf("%w: flow %q is registered twice", ErrBadFlow, f.Name)
		}
		e.flows[f.Name] = f
		failpoints = append(failpoints, f.Failpoints()...)
	}
	if err := e.cfg.Failpoints.CheckNames(failpoints); err != nil {
		return nil, err
	}
	b.engine.Store(e)
	return e, nil
}

// Registered is a flow as a Builder registered it: the handle a package
// runs its flow with, on the engine the builder built. Only Register gives
// one.
type Registered struct {
	flow    *Flow
	builder *Builder
}

// Flow is the flow's declaration.
func (r *Registered) Flow() *Flow { return r.flow }

// Execute runs req with the flow, on the engine its builder built
// (Engine.Execute); req.Flow is set here. Before Build, it fails with
// ErrUnregisteredFlow: nothing runs on an engine that is not built.
func (r *Registered) Execute(ctx context.Context, req Request) (Response, error) {
	e := r.builder.engine.Load()
	if e == nil {
		return Response{}, fmt.Errorf("%w: %q: its engine is not built yet (Builder.Build)", ErrUnregisteredFlow, r.flow.Name)
	}
	req.Flow = r.flow
	return e.Execute(ctx, req)
}

// newEngine is an engine with cfg's defaults filled in, and no flows yet.
func newEngine(cfg Config) *Engine {
	if cfg.KeyTTL <= 0 {
		cfg.KeyTTL = 24 * time.Hour
	}
	if cfg.LockTimeout <= 0 {
		cfg.LockTimeout = 90 * time.Second
	}
	if cfg.ExternalWindow <= 0 {
		cfg.ExternalWindow = 23 * time.Hour
	}
	switch {
	case cfg.SpentKeyGrace == 0:
		cfg.SpentKeyGrace = DefaultSpentKeyGrace
	case cfg.SpentKeyGrace < 0:
		cfg.SpentKeyGrace = 0
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Engine{cfg: cfg, log: log}
}

// Request is one request with an idempotency key.
type Request struct {
	UserID int64
	Key    string
	Method string
	Path   string
	// Body is the request body as received (valid JSON, or empty); its
	// canonical form goes into the fingerprint.
	Body []byte
	// Params is what the flow needs to run, stored as JSON with the key.
	Params any
	// Flow is the flow that runs the request: one the engine was built
	// with (Registered.Execute sets it).
	Flow *Flow
}

// Flow is the flow named name, among those the engine was built with.
func (e *Engine) Flow(name string) (*Flow, bool) {
	f, ok := e.flows[name]
	return f, ok
}

// Flows are the flows the engine was built with, in name order.
func (e *Engine) Flows() []*Flow {
	out := make([]*Flow, 0, len(e.flows))
	for _, f := range e.flows {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b *Flow) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// checkMove refuses an outcome that step did not declare.
func checkMove(f *Flow, step *Step, out Outcome) error {
	if step.allows(out) {
		return nil
	}
	to := out.next
	if out.response != nil {
		to = Finished
	}
	return fmt.Errorf("%w: flow %s, from %s to %q (declared: %v)", ErrUndeclaredMove, f.Name, step.At, to, step.To)
}

// Execute runs req to its final response, or as far as it can get. It
// reads as the pattern does:
//
//  1. the claim: the key's row is inserted (a new key) or found and
//     locked, and a finished key's stored response is replayed (claim.go);
//  2. the phases, each from one recovery point to the next, until the key
//     is finished (drive);
//  3. the stored answer.
//
// It returns the stored response for a finished key (Replayed set),
// ErrKeyReused, ErrKeyInUse, a *TransientError (nothing final stored; a
// retry resumes), ErrFailed (a phase failed with an error no retry can
// cure: the key waits for an operator), or another error that a retry
// may not meet (the key is left unlocked at its last recovery point; a
// retry resumes).
func (e *Engine) Execute(ctx context.Context, req Request) (Response, error) {
	if f, ok := e.Flow(req.Flow.Name); !ok || f != req.Flow {
		// Not one the engine was built with (a caller that passes flows
		// by hand; a Registered handle never gets here): run, it could be
		// left unfinished where the completer cannot find it.
		return Response{}, fmt.Errorf("%w: %q", ErrUnregisteredFlow, req.Flow.Name)
	}
	a, replay, err := e.traceClaim(ctx, req) // claim, in a span of its own: trace.go
	switch {
	case replay != nil:
		return *replay, nil
	case a == nil:
		return Response{}, transientIfUnavailable(err) // nothing was claimed
	case err != nil:
		e.unlock(ctx, a, err) // claimed and committed: a retry resumes
		return Response{}, transientIfUnavailable(err)
	}
	return e.drive(ctx, a)
}

// attempt is one run of a request by this process: the key it holds
// locked, and the flow it runs.
type attempt struct {
	flow *Flow
	key  *Key
	log  *slog.Logger
}

func (e *Engine) newAttempt(flow *Flow, k *Key) *attempt {
	k.childKeyPrefix = flow.ChildKeyPrefix
	return &attempt{flow: flow, key: k,
		log: e.log.With(slog.String("idempotency_key_id", k.ID.String()), slog.String("flow", k.Flow))}
}

// drive runs phases from the key's recovery point until it is finished,
// and returns the stored answer.
func (e *Engine) drive(ctx context.Context, a *attempt) (Response, error) {
	for a.key.RecoveryPoint != Finished {
		step, ok := a.flow.step(a.key.RecoveryPoint)
		if !ok {
			e.unlock(ctx, a, nil)
			return Response{}, fmt.Errorf("%w: flow %s, point %s", ErrUnknownRecoveryPoint, a.flow.Name, a.key.RecoveryPoint)
		}
		from := a.key.RecoveryPoint
		phaseCtx, endSpan := a.tracePhase(ctx, from, step.Phase) // trace.go
		err := e.runPhase(phaseCtx, a, step)
		endSpan(err)
		if err != nil {
			switch {
			case errors.Is(err, ErrLockLost), errors.Is(err, ErrNeedsAttention):
				// Not this attempt's to release: another holds it, or it is marked.
			case failsTheKey(ctx, err):
				return Response{}, e.fail(ctx, a, from, err)
			default:
				e.unlock(ctx, a, err)
			}
			a.log.WarnContext(ctx, "phase failed; the key stays resumable",
				slog.String("recovery_point", string(from)), slog.String("error", err.Error()))
			return Response{}, transientIfUnavailable(err)
		}
		a.log.DebugContext(ctx, "phase committed", slog.String("from", string(from)), slog.String("to", string(a.key.RecoveryPoint)))
	}
	return Response{Status: a.key.ResponseCode, Body: a.key.responseBody}, nil
}

// runPhase runs one phase: its external call, if it has one, outside any
// transaction, then its transaction, which records the phase's work and
// moves the key on (with the local phases that follow: see commit.go).
func (e *Engine) runPhase(ctx context.Context, a *attempt, step *Step) error {
	phase := step.Phase
	var called any
	switch {
	case phase.call != nil && a.key.pastExternalWindow:
		var err error
		if called, err = e.reconcile(ctx, a.key, phase); err != nil {
			return a.flow.fromRemote(err)
		}
	case phase.call != nil:
		var err error
		if called, err = e.callExternal(ctx, a.key, phase); err != nil {
			return a.flow.fromRemote(err) // its clients are told in the flow's words (Remote)
		}
		if err := e.cfg.Failpoints.Fire(a.flow.afterCall(phase.step)); err != nil {
			return err
		}
	}
	return e.commit(ctx, a, func(ctx context.Context, tx *db.Tx) (Outcome, error) {
		out, err := phase.work(ctx, tx, a.key, called)
		if err == nil {
			err = checkMove(a.flow, step, out)
		}
		return out, err
	})
}

// fail marks a's key, whose phase from recovery point from failed with
// err, an error no retry can cure (failsTheKey), as needing attention with
// the error, and returns ErrFailed with it: the completer leaves the key,
// and every retry with it gets ErrFailed (claimKey) until an operator
// re-drives it. Were it only unlocked, as a transient failure is, the
// completer and every retry would run the phase again, and fail again,
// for ever.
func (e *Engine) fail(ctx context.Context, a *attempt, from RecoveryPoint, err error) error {
	ctx = context.WithoutCancel(ctx) // the record must be written, whatever the caller's context
	a.log.ErrorContext(ctx, "phase failed with an error no retry can cure: the key waits for an operator",
		slog.String("recovery_point", string(from)), slog.String("error", err.Error()))
	n, markErr := queries.MarkKeyFailed(ctx, e.cfg.Pool, dbsqlc.MarkKeyFailedParams{
		ID: a.key.ID, LockToken: a.key.lockToken, AttentionError: attentionError(err), Now: e.queryNow(),
	})
	switch {
	case markErr != nil:
		// Not recorded: the key stays resumable, and the next attempt
		// meets the failure again and records it.
		e.unlock(ctx, a, markErr)
		return transientIfUnavailable(fmt.Errorf("%w (recording it failed: %w)", err, markErr))
	case n == 0:
		return ErrLockLost // another attempt took the key over: it is theirs to finish or fail
	}
	return fmt.Errorf("%w: %w", ErrFailed, err)
}

// attentionError is err as recorded with a failed key (migration 000048),
// for an operator to read: its text, at most maxAttentionError bytes.
func attentionError(err error) pgtype.Text {
	msg := err.Error()
	if len(msg) > maxAttentionError {
		msg = strings.ToValidUTF8(msg[:maxAttentionError], "") + "..."
	}
	return pgtype.Text{String: msg, Valid: true}
}

// maxAttentionError bounds the error recorded with a failed key: an error
// message is a line or two; a longer one is cut, not stored whole in a row
// every list of keys reads.
const maxAttentionError = 2000

// callWithHeartbeat runs call while extending the key's lock every third of
// the lock timeout. If the lock is lost, call's context is cancelled.
func (e *Engine) callWithHeartbeat(ctx context.Context, k *Key, call func(context.Context, *Key) (any, error)) (any, error) {
	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	defer close(done)
	go func() {
		tick := time.NewTicker(e.cfg.LockTimeout / 3)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				n, err := queries.HeartbeatIdempotencyKey(callCtx, e.cfg.Pool, dbsqlc.HeartbeatIdempotencyKeyParams{
					ID: k.ID, LockToken: k.lockToken, Now: e.queryNow(), LockLifetimeSeconds: e.lockLifetime(),
				})
				if err == nil && n == 0 {
					cancel(ErrLockLost)
					return
				}
			}
		}
	}()
	result, err := call(callCtx, k)
	if cause := context.Cause(callCtx); errors.Is(cause, ErrLockLost) {
		return nil, ErrLockLost
	}
	return result, err
}

// unlock releases the lock after a failed attempt (cause, when known, is
// its failure), so that a retry need not wait for the lock to lapse. It
// runs even if ctx was cancelled.
//
// When the database cannot take the write now (cause, or the unlock's own
// failure, is db.IsUnavailable: the primary died and a new one is not yet
// promoted, or its commits hang on a lost synchronous standby), the unlock
// goes on in the background (keepUnlocking) until it succeeds or the lock
// would have lapsed anyway, so that a key in flight at the fault is free for
// a retry moments after the new primary takes writes, not after its whole
// lock lifetime. A late unlock is harmless: it is fenced by the attempt's
// lock token (UnlockIdempotencyKey matches the row only while the token is
// this attempt's), and every later claim takes a new token
// (LockIdempotencyKey: lock_token + 1), so it can never release a lock
// that another attempt has taken since.
func (e *Engine) unlock(ctx context.Context, a *attempt, cause error) {
	ctx = context.WithoutCancel(ctx)
	lapses := time.Now().Add(e.cfg.LockTimeout) // at the latest: the lock was last renewed before now
	if !db.IsUnavailable(cause) {
		_, err := e.unlockOnce(ctx, a, false)
		if err == nil {
			return
		}
		if !db.IsUnavailable(err) {
			a.log.WarnContext(ctx, "could not unlock key; it unlocks by itself when its lock lifetime ends", slog.String("error", err.Error()))
			return
		}
	}
	a.log.InfoContext(ctx, "the database cannot take writes now: unlocking the key in the background")
	go e.keepUnlocking(ctx, a, lapses, false)
}

// unlockUncertainClaim unlocks, in the background, the key of a claim
// whose COMMIT failed with the database's unavailability: the commit may
// have landed (it was written, and its answer was lost), or may land yet
// (a commit waiting for a synchronous standby completes when the standby
// is back, though its client is gone). Until it has, the claim's lock is
// not there to release, so an unlock that matches no row is tried again,
// until the lock would have lapsed: a claim that never committed costs a
// few one-row updates a second, meanwhile. The unlock matches only this
// claim's lock: a new key's row by the id this claim chose and token 1,
// which no other attempt holds; an existing key's by its token and the
// time this claim took the lock (UnlockClaimedIdempotencyKey).
//
// Most such claims never land (a failover discards what the old primary
// did not replicate), so their unlocks run until the lock would have
// lapsed, one short update a second each. At most maxUncertainUnlocks run
// at once: past that (a primary whose every commit hangs, under load), a
// claim's lock is left to lapse, and the log says so.
func (e *Engine) unlockUncertainClaim(ctx context.Context, a *attempt) {
	ctx = context.WithoutCancel(ctx)
	if e.uncertainUnlocks.Add(1) > maxUncertainUnlocks {
		e.uncertainUnlocks.Add(-1)
		a.log.WarnContext(ctx, "too many uncertain claims being unlocked: this key's lock lapses by itself",
			slog.Int("max", maxUncertainUnlocks))
		return
	}
	go func() {
		defer e.uncertainUnlocks.Add(-1)
		e.keepUnlocking(ctx, a, time.Now().Add(e.cfg.LockTimeout), true)
	}()
}

// maxUncertainUnlocks bounds the background unlocks of uncertain claims
// running at once in one engine: the claims in flight when a primary dies
// are about as many as the requests in flight (the connection pool's size,
// a few dozen), so this only binds when every commit hangs while requests
// keep coming, and then caps the database's extra load at this many
// one-row updates a second.
const maxUncertainUnlocks = 256

// The background unlock's tries: each has unlockTryTimeout, and they are
// unlockBackoffMin apart, doubling up to unlockBackoffMax. The longest a
// key then stays locked after the database takes writes again is about
// unlockBackoffMax plus a try (the section 11 promise is 5 s). A try is one
// short UPDATE, so 2 s is long for a working primary; a try that reaches it
// (a connection to a dead machine that never answers, a commit that waits
// for a lost standby) is simply made again.
const (
	unlockTryTimeout = 2 * time.Second
	unlockBackoffMin = 100 * time.Millisecond
	unlockBackoffMax = time.Second
)

// keepUnlocking tries to unlock a's key until it succeeds (with
// untilARow, for an uncertain claim, until it matches the claim's lock), fails for a reason other
// than the database's unavailability, the pool is closed (the process is
// stopping), or lapses (when the lock would have lapsed anyway) has passed.
func (e *Engine) keepUnlocking(ctx context.Context, a *attempt, lapses time.Time, untilARow bool) {
	began := time.Now()
	wait := unlockBackoffMin
	for tries := 1; ; tries++ {
		n, err := e.unlockOnce(ctx, a, untilARow)
		if err == nil && n == 0 && untilARow {
			err = errNoRowYet
		}
		switch {
		case err == nil:
			a.log.InfoContext(ctx, "key unlocked after the database came back",
				slog.Int("tries", tries), slog.Duration("after", time.Since(began)))
			return
		case !db.IsUnavailable(err) && !errors.Is(err, errNoRowYet), errors.Is(err, puddle.ErrClosedPool):
			a.log.WarnContext(ctx, "could not unlock key; it unlocks by itself when its lock lifetime ends", slog.String("error", err.Error()))
			return
		case time.Now().Add(wait).After(lapses):
			a.log.WarnContext(ctx, "gave up unlocking the key: its lock lapses now anyway",
				slog.Int("tries", tries), slog.String("error", err.Error()))
			return
		}
		time.Sleep(wait)
		wait = min(2*wait, unlockBackoffMax)
	}
}

// errNoRowYet: an uncertain claim's unlock matched no row (yet).
var errNoRowYet = errors.New("the claim's key row is not there (yet)")

// unlockOnce makes one try at unlocking a's key, and says how many rows
// it unlocked (0: the key has another lock token, or no row). An
// uncertain claim of an existing key (unlockUncertainClaim) is unlocked
// only while the row holds that claim's very lock; any other attempt's
// by its token, which its claim committed.
func (e *Engine) unlockOnce(ctx context.Context, a *attempt, uncertainClaim bool) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, unlockTryTimeout)
	defer cancel()
	var n int64
	var err error
	if uncertainClaim && !a.key.insertedByThisClaim {
		n, err = queries.UnlockClaimedIdempotencyKey(ctx, e.cfg.Pool, dbsqlc.UnlockClaimedIdempotencyKeyParams{
			ID: a.key.ID, LockToken: a.key.lockToken, LockedAt: a.key.lockedAt, Now: e.queryNow()})
	} else {
		n, err = queries.UnlockIdempotencyKey(ctx, e.cfg.Pool, dbsqlc.UnlockIdempotencyKeyParams{
			ID: a.key.ID, LockToken: a.key.lockToken, Now: e.queryNow()})
	}
	if err != nil && ctx.Err() != nil {
		// The try's own deadline, not the caller's (WithoutCancel): the
		// database did not answer in time.
		return 0, fmt.Errorf("%w: unlock: no answer within %v: %w", db.ErrUnavailable, unlockTryTimeout, err)
	}
	return n, err
}

// txOptions is how the engine runs a phase's transaction: SERIALIZABLE,
// and retried after a serialization failure for at most a third of the lock
// timeout (and db's 5 s). The key's lock is refreshed only by a commit and
// by the heartbeat during an external call, so an attempt that went on
// retrying for longer could see its lock lapse and be taken over (the
// completer, another request), and then answer 409 for a key that nobody
// else was executing when it began. A third after the last heartbeat's
// third leaves a third of the timeout to spare.
func (e *Engine) txOptions() db.TxOptions {
	return db.TxOptions{RetryFor: min(5*time.Second, e.cfg.LockTimeout/3)}
}

// lockLifetime is how long a lock this engine takes or renews lasts, in
// seconds: its holder's own LockTimeout, written with the lock.
func (e *Engine) lockLifetime() float64 { return e.cfg.LockTimeout.Seconds() }

// wallClock is the injected clock, or the process's. It only stamps a new
// key's Created, for the flow to use (its row's created_at is the
// database's); the engine never compares it with a time the database
// wrote: such comparisons are made in SQL, on the one clock (now).
func (e *Engine) wallClock() time.Time {
	if e.cfg.Now != nil {
		return e.cfg.Now()
	}
	return time.Now()
}

// reconcile finds the result of the phase's earlier call, or marks the key
// as needing attention when there is none to find.
func (e *Engine) reconcile(ctx context.Context, k *Key, phase Phase) (any, error) {
	if phase.reconcile != nil {
		result, found, err := e.findEarlierCall(ctx, k, phase)
		if err != nil || found {
			return result, err
		}
	}
	e.log.WarnContext(ctx, "key needs attention: too old to repeat its external call, and nothing found to reconcile",
		slog.String("idempotency_key_id", k.ID.String()), slog.String("step", phase.step))
	if _, err := queries.MarkNeedsAttention(ctx, e.cfg.Pool, dbsqlc.MarkNeedsAttentionParams{
		ID: k.ID, LockToken: k.lockToken, Now: e.queryNow(),
	}); err != nil {
		return nil, err
	}
	return nil, ErrNeedsAttention
}

// queryNow is the injected clock as a query parameter, or NULL for the database's now().
func (e *Engine) queryNow() pgtype.Timestamptz {
	if e.cfg.Now == nil {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: e.cfg.Now(), Valid: true}
}

var queries = dbsqlc.New()

func toKey(row dbsqlc.IdempotencyKey) *Key {
	return &Key{
		ID: row.ID, UserID: row.UserID, Key: row.IdempotencyKey, Flow: row.Flow,
		Method: row.RequestMethod, Path: row.RequestPath, Params: json.RawMessage(row.RequestParams),
		RecoveryPoint: RecoveryPoint(row.RecoveryPoint), Locked: row.LockedAt.Valid,
		ResponseCode: int(row.ResponseCode.Int32), Created: row.CreatedAt, Expires: row.ExpiresAt.Time,
		lockToken: row.LockToken, lockedAt: row.LockedAt, responseBody: row.ResponseBody, traceParent: row.TraceParent.String,
	}
}

// ErrKeyNotFound is returned by Lookup for a key the user never used, or
// one past its TTL.
var ErrKeyNotFound = errors.New("idempotency key not found")

// Lookup returns the state of one of the user's keys. Key.Locked is true
// only while the lock is live.
func (e *Engine) Lookup(ctx context.Context, userID int64, key string) (*Key, error) {
	row, err := queries.GetIdempotencyKeyState(ctx, e.cfg.Pool, dbsqlc.GetIdempotencyKeyStateParams{
		UserID: userID, IdempotencyKey: key, Now: e.queryNow(),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrKeyNotFound
	}
	if err != nil {
		return nil, err
	}
	k := toKey(row.IdempotencyKey)
	k.Locked = row.LockLive
	return k, nil
}

// UnfinishedKeysOfUnknownFlows counts, by flow name, the unfinished keys
// whose flow e was not built with: a build that does not declare a flow
// (an older one, after a rollback) cannot finish its keys, and the
// completer leaves them for a build that does. A process calls it at
// start-up to say so at once, rather than one key at a time in the
// completer's log.
func (e *Engine) UnfinishedKeysOfUnknownFlows(ctx context.Context) (map[string]int64, error) {
	rows, err := queries.CountUnfinishedKeysByFlow(ctx, e.cfg.Pool)
	if err != nil {
		return nil, err
	}
	unknown := map[string]int64{}
	for _, r := range rows {
		if _, ok := e.Flow(r.Flow); !ok {
			unknown[r.Flow] = r.Keys
		}
	}
	return unknown, nil
}
