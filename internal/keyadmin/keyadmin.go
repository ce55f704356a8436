// Package keyadmin is the operator's view of idempotency keys, behind
// `payments keys list | show | retry` (API.md section 9): which requests are
// stuck, what each one committed and sent to Stripe, and re-driving one now.
//
// It reads the key rows, the audit trail and the child-key generations
// directly, and writes nothing itself: a retry is the engine's, through
// recovery.Completer.RetryNow, exactly as the completer would drive the key.
// It must never change a key any other way (no hand-edited recovery points).
package keyadmin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/recovery"
)

// State selects the keys to list.
type State string

const (
	// Unfinished keys have no final answer yet: crashed, abandoned, waiting
	// for the completer, or needing attention.
	Unfinished State = "unfinished"
	// NeedsAttention keys were given up on by the completer: past Stripe's
	// idempotency window with nothing found at Stripe. A person decides.
	NeedsAttention State = "needs_attention"
	// Locked keys are being executed right now (their lock is live).
	Locked State = "locked"
)

// ParseState reads a --state value.
func ParseState(s string) (State, error) {
	switch st := State(s); st {
	case Unfinished, NeedsAttention, Locked:
		return st, nil
	}
	return "", fmt.Errorf("%q is not a state: give unfinished, needs_attention or locked", s)
}

var (
	// ErrUnknownUser: no user has that email address.
	ErrUnknownUser = errors.New("unknown user")
	// ErrUnknownKey: the user has no such idempotency key (never used, or
	// reaped after its TTL).
	ErrUnknownKey = errors.New("unknown idempotency key")
	// ErrAlreadyFinished: a retry of a key that has its final answer.
	ErrAlreadyFinished = errors.New("already finished")
	// ErrInUse: a retry of a key whose lock is live.
	ErrInUse = errors.New("in use")
)

// Admin answers the operator's questions about keys.
type Admin struct {
	// db is a pool, or a transaction (the tests that count what a query
	// reads).
	db    dbsqlc.DBTX
	flows map[string]*recovery.Flow
	// completer drives a retried key; nil for an Admin that only reads.
	completer *recovery.Completer
	// exactCountBytes: Counts.
	exactCountBytes int64
}

// Points are the recovery points the flow named flow declares, in the order
// of its steps, finished last; nil for a flow this build does not declare.
// The console shows a key's place among them.
func (a *Admin) Points(flow string) []string {
	f, ok := a.flows[flow]
	if !ok {
		return nil
	}
	var out []string
	for _, p := range f.Points() {
		out = append(out, string(p))
	}
	return out
}

// New returns an Admin over db, a pool (or a transaction). flows are every
// flow a key may name (for the child keys each derives); completer, when
// set, drives retries.
func New(db dbsqlc.DBTX, flows []*recovery.Flow, completer *recovery.Completer) *Admin {
	a := &Admin{db: db, flows: map[string]*recovery.Flow{}, completer: completer, exactCountBytes: ExactCountBytes}
	for _, f := range flows {
		a.flows[f.Name] = f
	}
	return a
}

// WithExactCountBytes returns a copy of a whose Counts counts the finished
// keys one by one up to a key table of n bytes, not ExactCountBytes.
func (a *Admin) WithExactCountBytes(n int64) *Admin {
	c := *a
	c.exactCountBytes = n
	return &c
}

// Summary is one key as `keys list` shows it. The JSON names are stable
// (README, "Operating it").
type Summary struct {
	ID            uuid.UUID `json:"id"`
	User          string    `json:"user"`
	Key           string    `json:"key"`
	Flow          string    `json:"flow"`
	Method        string    `json:"method"`
	Path          string    `json:"path"`
	RecoveryPoint string    `json:"recovery_point"`
	Created       time.Time `json:"created"`
	// AgeSeconds is how long ago the request began, on the database's clock.
	AgeSeconds float64   `json:"age_seconds"`
	LastRun    time.Time `json:"last_run"`
	// Attempts counts every claim of the key: the first request, each retry
	// by the client, each try of the completer, each operator retry (the
	// lock token, which every claim bumps).
	Attempts          int64 `json:"attempts"`
	CompleterAttempts int32 `json:"completer_attempts"`
	// Locked is true while some process executes the request.
	Locked        bool       `json:"locked"`
	LockExpiresAt *time.Time `json:"lock_expires_at"`
	// LockOverdue: the lock is live, but its holder has not renewed it for
	// over half its lifetime (a live holder renews it every third): it may
	// have died, and the lock then holds until LockExpiresAt.
	LockOverdue         bool       `json:"lock_overdue"`
	NeedsAttentionSince *time.Time `json:"needs_attention_since"`
	// SpentStripeSteps are the Stripe steps whose current child key Stripe
	// answers with a stored failure.
	SpentStripeSteps []string `json:"spent_stripe_steps"`
	// LastError is the failure on record, or nil. The engine records why a
	// key needs attention (the error of a phase that failed with one no
	// retry can cure, or the Stripe window) and which child keys are
	// spent; the error of an attempt that merely failed (Stripe down, a
	// crash) is in the logs only.
	LastError *string `json:"last_error"`
}

// ListParams selects keys.
type ListParams struct {
	State State
	// UserEmail, when set, lists that user's keys only.
	UserEmail string
	Limit     int
}

// List returns the keys in p.State, oldest first.
func (a *Admin) List(ctx context.Context, p ListParams) ([]Summary, error) {
	userID, err := a.userFilter(ctx, p.UserEmail)
	if err != nil {
		return nil, err
	}
	rows, err := queries.ListKeysForOperator(ctx, a.db, dbsqlc.ListKeysForOperatorParams{
		UserID: userID, State: string(p.State), RowLimit: int32(p.Limit),
	})
	if err != nil {
		return nil, err
	}
	out := make([]Summary, 0, len(rows))
	for _, r := range rows {
		out = append(out, toSummary(r.IdempotencyKey, r.Email, r.AgeSeconds, r.LockLive, r.LockOverdue, r.SpentSteps))
	}
	return out, nil
}

// Story is one key's whole story, as `keys show` tells it. Every JSON
// document in it (the parameters, the phases' data, the stored answer) has
// its secrets masked (MaskSecrets): a webhook endpoint's answer holds its
// signing secret, which is the merchant's, not the operator's.
type Story struct {
	Summary
	// Params are the request's parameters, as stored for the completer.
	Params json.RawMessage `json:"params"`
	// Phases are what the request committed, from the audit trail, in order.
	Phases []Phase `json:"phases"`
	// StripeKeys are the idempotency keys derived for the flow's Stripe
	// steps; a step the request has not reached has sent nothing yet.
	StripeKeys []StripeKey `json:"stripe_keys"`
	// Response is the stored final answer; nil while unfinished.
	Response *StoredResponse `json:"response"`
	// ExpiresAt is when a finished key is forgotten; nil while unfinished.
	ExpiresAt *time.Time `json:"expires_at"`
	// TraceID is the W3C trace id of the request's trace, when it was
	// traced ("" otherwise): the console links it to a trace UI.
	TraceID string `json:"-"`
}

// Phase is one record of the audit trail: a phase's work, committed at At
// in the same transaction that moved the key.
type Phase struct {
	Action       string          `json:"action"`
	ResourceType string          `json:"resource_type"`
	ResourceID   string          `json:"resource_id"`
	At           time.Time       `json:"at"`
	Data         json.RawMessage `json:"data"`
}

// StripeKey is the idempotency key sent to Stripe for one step.
type StripeKey struct {
	Step       string `json:"step"`
	Generation int32  `json:"generation"`
	Key        string `json:"key"`
	// SpentSince is when Stripe was first found replaying a stored failure
	// for this key; nil when it is not known to.
	SpentSince *time.Time `json:"spent_since"`
}

// StoredResponse is a key's final answer, replayed to every retry. Body is
// the JSON the API sends.
type StoredResponse struct {
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body"`
}

// Show returns the story of the user's key.
func (a *Admin) Show(ctx context.Context, email, key string) (*Story, error) {
	userID, err := a.userID(ctx, email)
	if err != nil {
		return nil, err
	}
	row, err := queries.GetKeyForOperator(ctx, a.db, dbsqlc.GetKeyForOperatorParams{UserID: userID, IdempotencyKey: key})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: no idempotency key %q for %s", ErrUnknownKey, key, email)
	}
	if err != nil {
		return nil, err
	}
	k := row.IdempotencyKey
	children, err := queries.ListChildKeyStates(ctx, a.db, k.ID)
	if err != nil {
		return nil, err
	}
	var spent []string
	for _, c := range children {
		if c.SpentAt.Valid {
			spent = append(spent, c.Step)
		}
	}
	s := &Story{
		Summary: toSummary(k, row.Email, row.AgeSeconds, row.LockLive, row.LockOverdue, spent),
		Params:  masked(k.RequestParams), Phases: []Phase{}, StripeKeys: a.stripeKeys(k, children),
		ExpiresAt: timePtr(k.ExpiresAt), TraceID: traceID(k.TraceParent),
	}
	if k.ResponseCode.Valid {
		s.Response = &StoredResponse{Status: int(k.ResponseCode.Int32), Body: MaskSecrets(k.ResponseBody)}
	}
	records, err := queries.ListAuditRecordsForKey(ctx, a.db, &k.ID)
	if err != nil {
		return nil, err
	}
	for _, r := range records {
		s.Phases = append(s.Phases, Phase{
			Action: r.Action, ResourceType: r.ResourceType, ResourceID: r.ResourceID, At: r.CreatedAt, Data: masked(r.Data),
		})
	}
	return s, nil
}

// stripeKeys derives the child key of every Stripe step of k's flow at its
// recorded generation, as the engine does.
func (a *Admin) stripeKeys(k dbsqlc.IdempotencyKey, children []dbsqlc.ListChildKeyStatesRow) []StripeKey {
	recorded := map[string]dbsqlc.ListChildKeyStatesRow{}
	for _, c := range children {
		recorded[c.Step] = c
	}
	var steps []string
	f, ok := a.flows[k.Flow]
	if ok {
		steps = f.ExternalSteps()
	} else {
		f = &recovery.Flow{Name: k.Flow} // a flow this build does not know: no prefix to show
	}
	for _, c := range children { // a step the flow no longer names, if any
		if !slices.Contains(steps, c.Step) {
			steps = append(steps, c.Step)
		}
	}
	out := make([]StripeKey, 0, len(steps))
	for _, step := range steps {
		c := recorded[step]
		out = append(out, StripeKey{
			Step: step, Generation: c.Generation, Key: f.ChildKeyAt(k.ID, step, c.Generation), SpentSince: timePtr(c.SpentAt),
		})
	}
	return out
}

// Retry drives the user's unfinished key now, as the completer would, and
// returns its final answer, with its secrets masked as Show masks them. A
// key needing attention is driven too: the operator says its cause is
// fixed.
func (a *Admin) Retry(ctx context.Context, email, key string) (recovery.Response, error) {
	s, err := a.Show(ctx, email, key)
	if err != nil {
		return recovery.Response{}, err
	}
	switch {
	case s.Response != nil:
		return recovery.Response{}, fmt.Errorf("%w: key %q of %s has its final answer (%d); nothing to retry",
			ErrAlreadyFinished, key, email, s.Response.Status)
	case s.Locked && s.LockOverdue:
		return recovery.Response{}, fmt.Errorf("%w: key %q of %s is locked until %s by a process that has not renewed its lock for over half its lifetime and may have died; "+
			"nothing can take the key over before: try again after %[4]s", ErrInUse, key, email, s.LockExpiresAt.UTC().Format(time.RFC3339))
	case s.Locked:
		return recovery.Response{}, fmt.Errorf("%w: key %q of %s is being executed right now (locked until %s while its process renews the lock); "+
			"try again once it has finished, or after %[4]s if it dies", ErrInUse, key, email, s.LockExpiresAt.UTC().Format(time.RFC3339))
	}
	resp, err := a.retryKey(ctx, s.ID)
	if errors.Is(err, recovery.ErrNotRetryable) {
		return recovery.Response{}, fmt.Errorf("%w: key %q of %s was taken or finished by another process meanwhile", ErrInUse, key, email)
	}
	if len(resp.Body) > 0 {
		resp.Body = MaskSecrets(resp.Body)
	}
	return resp, err
}

// retryKey is the one call into the engine: drive key id now.
func (a *Admin) retryKey(ctx context.Context, id uuid.UUID) (recovery.Response, error) {
	if a.completer == nil {
		return recovery.Response{}, errors.New("keyadmin: this Admin cannot retry (no completer)")
	}
	return a.completer.RetryNow(ctx, id)
}

func (a *Admin) userID(ctx context.Context, email string) (int64, error) {
	id, err := queries.GetUserIDByEmail(ctx, a.db, email)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("%w: no user %s", ErrUnknownUser, email)
	}
	return id, err
}

// userFilter is a list's optional filter by user: none for "", else the
// user's id (ErrUnknownUser when there is no such user).
func (a *Admin) userFilter(ctx context.Context, email string) (pgtype.Int8, error) {
	if email == "" {
		return pgtype.Int8{}, nil
	}
	id, err := a.userID(ctx, email)
	return pgtype.Int8{Int64: id, Valid: err == nil}, err
}

func toSummary(k dbsqlc.IdempotencyKey, email string, age float64, locked, overdue bool, spent []string) Summary {
	s := Summary{
		ID: k.ID, User: email, Key: k.IdempotencyKey, Flow: k.Flow, Method: k.RequestMethod, Path: k.RequestPath,
		RecoveryPoint: k.RecoveryPoint, Created: k.CreatedAt, AgeSeconds: age, LastRun: k.LastRunAt,
		Attempts: k.LockToken, CompleterAttempts: k.CompleterAttempts, Locked: locked,
		NeedsAttentionSince: timePtr(k.NeedsAttentionAt), SpentStripeSteps: spent,
	}
	if locked {
		s.LockExpiresAt = timePtr(k.LockExpiresAt)
		s.LockOverdue = overdue
	}
	if s.SpentStripeSteps == nil {
		s.SpentStripeSteps = []string{}
	}
	s.LastError = lastError(s, k.AttentionError)
	return s
}

// lastError says what is on record against the key, if anything: failed,
// the error of the phase that failed it (recovery.ErrFailed).
func lastError(s Summary, failed pgtype.Text) *string {
	var msg string
	switch {
	case s.NeedsAttentionSince != nil && failed.Valid:
		msg = "needs attention: a phase failed with an error no retry can cure: " + failed.String +
			"; nothing runs again until an operator retries it, once the cause is fixed"
	case s.NeedsAttentionSince != nil:
		msg = "needs attention: its Stripe step is past Stripe's idempotency window and Stripe has no trace of the call; " +
			"nothing is re-sent until an operator retries it"
	case len(s.SpentStripeSteps) > 0:
		msg = fmt.Sprintf("Stripe replays a stored failure for the child key of step %v; the engine reconciles, then moves on to a new key",
			s.SpentStripeSteps)
	default:
		return nil
	}
	return &msg
}

// traceID is the trace id of a W3C traceparent (version-traceid-spanid-flags),
// or "".
func traceID(tp pgtype.Text) string {
	parts := strings.Split(tp.String, "-")
	if !tp.Valid || len(parts) != 4 || len(parts[1]) != 32 {
		return ""
	}
	return parts[1]
}

func timePtr(t pgtype.Timestamptz) *time.Time {
	if !t.Valid {
		return nil
	}
	return &t.Time
}

// masked is a stored JSON document (or nothing) as the operator sees it.
func masked(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return MaskSecrets(b)
}

var queries = dbsqlc.New()
