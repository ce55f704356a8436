// Package events reads the merchant's event feed: one event per state
// change a merchant cares about (payment.succeeded, refund.succeeded, ...),
// written by the staged-job workers under ids chosen when the change
// committed. It only reads; package stagedjobs writes.
package events

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
)

// Event is one event of a merchant's feed.
type Event struct {
	ID      string
	Type    string
	Object  json.RawMessage // the object as it was when the change committed
	Created time.Time
}

// MarshalJSON renders the API's Event object.
func (e Event) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		ID     string `json:"id"`
		Object string `json:"object"`
		Type   string `json:"type"`
		Data   struct {
			Object json.RawMessage `json:"object"`
		} `json:"data"`
		Created int64 `json:"created"`
	}{ID: e.ID, Object: "event", Type: e.Type, Data: struct {
		Object json.RawMessage `json:"object"`
	}{e.Object}, Created: e.Created.Unix()})
}

// Types are the event types there are (API.md section 2).
var Types = []string{
	"payment.succeeded", "payment.failed", "payment.captured", "payment.canceled",
	"payment.disputed", "payment.dispute_closed", "payment.duplicate_refunded",
	"refund.succeeded", "refund.failed",
}

// IsType tells whether t is one of Types.
func IsType(t string) bool {
	for _, known := range Types {
		if t == known {
			return true
		}
	}
	return false
}

// ErrNotFound is returned for an event, or a starting_after, that names no
// event of the user.
var ErrNotFound = errors.New("event not found")

var queries = dbsqlc.New()

// Get returns the user's event id.
func Get(ctx context.Context, conn dbsqlc.DBTX, userID int64, id string) (Event, error) {
	row, err := queries.GetEvent(ctx, conn, dbsqlc.GetEventParams{ID: id, UserID: userID})
	if errors.Is(err, pgx.ErrNoRows) {
		return Event{}, ErrNotFound
	}
	if err != nil {
		return Event{}, err
	}
	return fromRow(row), nil
}

func fromRow(r dbsqlc.Event) Event {
	return Event{ID: r.ID, Type: r.Type, Object: r.Data, Created: r.CreatedAt}
}

// ListParams selects a page of a user's events.
type ListParams struct {
	Limit int
	// StartingAfter is the id of the last event of the previous page; ""
	// for the first page.
	StartingAfter string
	// Type, when not "", keeps only the events of that type.
	Type string
}

// List returns a page of the user's events, newest first, and whether more
// follow.
func List(ctx context.Context, conn dbsqlc.DBTX, userID int64, p ListParams) ([]Event, bool, error) {
	limit, startingAfter := p.Limit, p.StartingAfter
	before, beforeID := db.EndOfTime, ""
	if startingAfter != "" {
		cursor, err := queries.GetEvent(ctx, conn, dbsqlc.GetEventParams{ID: startingAfter, UserID: userID})
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, false, ErrNotFound
		}
		if err != nil {
			return nil, false, err
		}
		before, beforeID = cursor.CreatedAt, cursor.ID
	}
	rows, err := queries.ListEvents(ctx, conn, dbsqlc.ListEventsParams{
		UserID: userID, EventType: pgtype.Text{String: p.Type, Valid: p.Type != ""}, BeforeCreated: before, BeforeID: beforeID, RowLimit: int32(limit + 1),
	})
	if err != nil {
		return nil, false, err
	}
	rows, hasMore := db.TrimPage(rows, limit)
	page := make([]Event, len(rows))
	for i, r := range rows {
		page[i] = fromRow(r)
	}
	return page, hasMore, nil
}
