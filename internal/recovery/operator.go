package recovery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/example/payments/internal/db/dbsqlc"
)

// What an operator may ask of the engine (payments keys, package keyadmin):
// drive one key now, and name the child keys a key's flow derives.

// ErrNotRetryable is returned by RetryNow for a key that is finished, or
// whose lock is live: someone is executing it right now.
var ErrNotRetryable = errors.New("idempotency key is finished or in use")

// RetryNow drives the unfinished key id from its recovery point at once, as
// the completer drives an abandoned key, without waiting for the
// completer's grace or the key's backoff. A key that needs attention is
// driven too, its mark cleared: the operator says its cause is fixed. If it
// is still past the remote side's window with nothing to reconcile, it is
// marked again (ErrNeedsAttention).
func (c *Completer) RetryNow(ctx context.Context, id uuid.UUID) (Response, error) {
	e := c.cfg.Engine
	claimStarted := time.Now()
	row, err := queries.ClaimKeyNow(ctx, e.cfg.Pool, dbsqlc.ClaimKeyNowParams{
		ID: id, Now: e.queryNow(), LockLifetimeSeconds: e.lockLifetime(), ExternalWindowSeconds: e.cfg.ExternalWindow.Seconds(),
		CallWindowTailSeconds: e.callWindowTail(),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Response{}, ErrNotRetryable
	}
	if err != nil {
		return Response{}, err
	}
	k := toKey(row.IdempotencyKey)
	k.pastExternalWindow = row.PastExternalWindow
	return c.resume(ctx, k, "operator", claimStarted)
}

// ExternalSteps names the flow's external calls, in name order: each has a
// child key (Key.ChildKey).
func (f *Flow) ExternalSteps() []string {
	var steps []string
	for _, s := range f.Steps {
		if p := s.Phase; p.step != "" && !slices.Contains(steps, p.step) {
			steps = append(steps, p.step)
		}
	}
	slices.Sort(steps)
	return steps
}

// ChildKeyAt is the child key that key id of the flow sends for step at a
// recorded generation (child_key_generations; 0 when none is recorded),
// exactly as Key.ChildKey derives it.
func (f *Flow) ChildKeyAt(id uuid.UUID, step string, generation int32) string {
	k := &Key{ID: id, childKeyPrefix: f.ChildKeyPrefix}
	k.setGeneration(step, generation)
	return k.ChildKey(step)
}

// Points are the flow's recovery points, in the order of its steps, Finished last.
func (f *Flow) Points() []RecoveryPoint {
	points := make([]RecoveryPoint, 0, len(f.Steps)+1)
	for _, s := range f.Steps {
		points = append(points, s.At)
	}
	return append(points, Finished)
}

// FlowTable is the Markdown table of flows' recovery points, external
// steps and failpoints, one row per flow, as their declarations say (the
// README's "Recovery points and failpoints of each flow" is this table).
func FlowTable(flows []*Flow) string {
	var b strings.Builder
	b.WriteString("| flow | recovery points, in order | external call (child key suffix): from, to | failpoints |\n|---|---|---|---|\n")
	code := func(p RecoveryPoint) string { return "`" + string(p) + "`" }
	for _, f := range flows {
		var points, calls, failpoints []string
		for _, p := range f.Points() {
			points = append(points, code(p))
		}
		for _, s := range f.Steps {
			if s.Phase.step == "" {
				continue
			}
			var to []string
			for _, p := range s.To {
				to = append(to, code(p))
			}
			calls = append(calls, fmt.Sprintf("`%s`: from %s, to %s", s.Phase.step, code(s.At), strings.Join(to, " or ")))
		}
		if len(calls) == 0 {
			calls = []string{"none"}
		}
		for _, name := range f.Failpoints() {
			failpoints = append(failpoints, "`"+name+"`")
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.Name, strings.Join(points, ", "), strings.Join(calls, "; "), strings.Join(failpoints, ", "))
	}
	return b.String()
}
