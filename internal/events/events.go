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

// ErrNotFound is returned for a starting_after that names no event of the user.
var ErrNotFound = errors.New("event not found")

var queries = dbsqlc.New()

// List returns up to limit of the user's events, newest first, after the
// event startingAfter ("" for the first page), and whether more follow.
func List(ctx context.Context, conn dbsqlc.DBTX, userID int64, limit int, startingAfter string) ([]Event, bool, error) {
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
		UserID: userID, BeforeCreated: before, BeforeID: beforeID, RowLimit: int32(limit + 1),
	})
	if err != nil {
		return nil, false, err
	}
	rows, hasMore := db.TrimPage(rows, limit)
	page := make([]Event, len(rows))
	for i, r := range rows {
		page[i] = Event{ID: r.ID, Type: r.Type, Object: r.Data, Created: r.CreatedAt}
	}
	return page, hasMore, nil
}
