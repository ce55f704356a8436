package keyadmin

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/example/payments/internal/db/dbsqlc"
)

// Finished keys have their final answer (the console lists them too; `keys
// list` does not).
const Finished State = "finished"

// ParsePageState reads the console's state filter: a State, Finished, or
// "" for every key.
func ParsePageState(s string) (State, error) {
	if s == "" || s == string(Finished) {
		return State(s), nil
	}
	return ParseState(s)
}

// PageParams selects one page of keys for the console, newest first.
type PageParams struct {
	// State is a State, Finished, or "" for every key.
	State     State
	UserEmail string
	// Flow, when set, lists that flow's keys only.
	Flow string
	// MinAge lists only keys at least this old.
	MinAge time.Duration
	// Before, when not zero, is the cursor: the keys made before the key
	// with this creation time and id (the last of the previous page).
	BeforeCreated time.Time
	BeforeID      uuid.UUID
	Limit         int
}

// Page returns one page of keys, newest first (the console's list; List is
// `keys list`'s, oldest first).
func (a *Admin) Page(ctx context.Context, p PageParams) ([]Summary, error) {
	userID, err := a.userFilter(ctx, p.UserEmail)
	if err != nil {
		return nil, err
	}
	if p.BeforeCreated.IsZero() {
		// After every key: the end of time, and the largest id.
		p.BeforeCreated = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
		p.BeforeID = uuid.Max
	}
	if _, err := ParsePageState(string(p.State)); err != nil {
		return nil, err
	}
	if p.Limit <= 0 {
		return nil, fmt.Errorf("keyadmin: limit %d", p.Limit)
	}
	params := dbsqlc.ListKeysPageForOperatorParams{
		UserID: userID, Flow: pgtype.Text{String: p.Flow, Valid: p.Flow != ""}, MinAgeSeconds: p.MinAge.Seconds(),
		BeforeCreated: p.BeforeCreated, BeforeID: p.BeforeID, State: string(p.State), RowLimit: int32(p.Limit),
	}
	var rows []dbsqlc.ListKeysPageForOperatorRow
	if p.State == Finished || p.State == "" {
		rows, err = queries.ListKeysPageForOperator(ctx, a.db, params)
	} else {
		// The unfinished states: through the table of unfinished keys, so
		// that the dashboard's newest unfinished keys do not walk the
		// finished ones. The two queries take and return the same columns.
		var unfinished []dbsqlc.ListUnfinishedKeysPageForOperatorRow
		unfinished, err = queries.ListUnfinishedKeysPageForOperator(ctx, a.db, dbsqlc.ListUnfinishedKeysPageForOperatorParams(params))
		for _, r := range unfinished {
			rows = append(rows, dbsqlc.ListKeysPageForOperatorRow(r))
		}
	}
	if err != nil {
		return nil, err
	}
	out := make([]Summary, 0, len(rows))
	for _, r := range rows {
		out = append(out, toSummary(r.IdempotencyKey, r.Email, r.AgeSeconds, r.LockLive, r.LockOverdue, r.SpentSteps))
	}
	return out, nil
}

// Count is how many keys of one flow are at one recovery point, and of
// those how many are locked and how many need attention.
type Count struct {
	Flow             string
	RecoveryPoint    string
	Keys             int64
	Locked           int64
	NeedingAttention int64
	// Estimated: Keys is PostgreSQL's estimate, not a count (finished keys
	// in a key table bigger than ExactCountBytes).
	Estimated bool
}

// Finished says whether the keys counted have their final answer.
func (c Count) Finished() bool { return c.RecoveryPoint == "finished" }

// ExactCountBytes is the size of the key table's heap up to which Counts
// counts its finished keys one by one: a sequential scan of 32 MiB, about
// 50,000 keys, takes some tens of milliseconds. Past it the count would
// read the whole table on every refresh of the console's dashboard (every
// two seconds while it is open): 0.4 s on three cores at a million keys,
// measured on 2026-11-27, and ten times that at the ten million the
// service is sized for (docs/BENCHMARKS-scale.md). PostgreSQL's statistics
// answer instead.
const ExactCountBytes = 32 << 20

// Counts counts the keys by flow and recovery point. The unfinished keys
// (and, among them, the locked and those needing attention) are counted
// exactly, through the table of unfinished keys, however big the key table
// is. The finished keys are counted too while the key table's heap is at
// most exactCountBytes (ExactCountBytes for an Admin from New), and else
// estimated from PostgreSQL's statistics (migration 000030), less the
// unfinished keys, and marked Estimated. A table without statistics yet is
// counted.
func (a *Admin) Counts(ctx context.Context) ([]Count, error) {
	unfinished, err := queries.CountUnfinishedKeysByFlowAndPoint(ctx, a.db)
	if err != nil {
		return nil, err
	}
	out := make([]Count, 0, len(unfinished)+4)
	unfinishedByFlow := map[string]int64{}
	for _, r := range unfinished {
		out = append(out, Count{Flow: r.Flow, RecoveryPoint: r.RecoveryPoint, Keys: r.Keys, Locked: r.Locked, NeedingAttention: r.NeedingAttention})
		unfinishedByFlow[r.Flow] += r.Keys
	}
	finished, err := a.finishedByFlow(ctx, unfinishedByFlow)
	if err != nil {
		return nil, err
	}
	out = append(out, finished...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Flow != out[j].Flow {
			return out[i].Flow < out[j].Flow
		}
		return out[i].RecoveryPoint < out[j].RecoveryPoint
	})
	return out, nil
}

// finishedByFlow is Counts' finished keys of each flow: counted, or
// estimated from the statistics of the whole table less the unfinished.
func (a *Admin) finishedByFlow(ctx context.Context, unfinishedByFlow map[string]int64) ([]Count, error) {
	size, err := queries.KeyTableBytes(ctx, a.db)
	if err != nil {
		return nil, err
	}
	if size > a.exactCountBytes {
		estimates, err := queries.EstimateKeysByFlow(ctx, a.db)
		if err != nil {
			return nil, err
		}
		if len(estimates) > 0 {
			out := []Count{}
			for _, e := range estimates {
				if n := e.Keys - unfinishedByFlow[e.Flow]; n > 0 {
					out = append(out, Count{Flow: e.Flow, RecoveryPoint: "finished", Keys: n, Estimated: true})
				}
			}
			return out, nil
		}
	}
	counted, err := queries.CountFinishedKeysByFlow(ctx, a.db)
	if err != nil {
		return nil, err
	}
	out := make([]Count, len(counted))
	for i, c := range counted {
		out[i] = Count{Flow: c.Flow, RecoveryPoint: "finished", Keys: c.Keys}
	}
	return out, nil
}
