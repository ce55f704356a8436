package keyadmin

import (
	"context"
	"fmt"
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
	rows, err := queries.ListKeysPageForOperator(ctx, a.pool, dbsqlc.ListKeysPageForOperatorParams{
		UserID: userID, Flow: pgtype.Text{String: p.Flow, Valid: p.Flow != ""}, MinAgeSeconds: p.MinAge.Seconds(),
		BeforeCreated: p.BeforeCreated, BeforeID: p.BeforeID, State: string(p.State), RowLimit: int32(p.Limit),
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

// Count is how many keys of one flow are at one recovery point, and of
// those how many are locked and how many need attention.
type Count struct {
	Flow             string
	RecoveryPoint    string
	Keys             int64
	Locked           int64
	NeedingAttention int64
}

// Finished says whether the keys counted have their final answer.
func (c Count) Finished() bool { return c.RecoveryPoint == "finished" }

// Counts counts every key by flow and recovery point.
func (a *Admin) Counts(ctx context.Context) ([]Count, error) {
	rows, err := queries.CountKeysByFlowAndPoint(ctx, a.pool)
	if err != nil {
		return nil, err
	}
	out := make([]Count, len(rows))
	for i, r := range rows {
		out[i] = Count(r)
	}
	return out, nil
}
