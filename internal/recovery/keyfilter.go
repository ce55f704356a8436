package recovery

import (
	"context"
	"iter"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/keyfilter"
)

// The key filter (package keyfilter) is the claim's shortcut: for a key it
// has definitely never seen, the claim skips the lookup and inserts at
// once. It is never the authority: a key another instance saw first is a
// false "new" that the unique index catches (the insert fails, and the
// claim takes the careful path). Without a filter (Config.KeyFilter nil),
// every claim takes the careful path.

// RebuildKeyFilter fills the engine's key filter with the keys a claim can
// still find (unfinished, or finished less than a TTL ago), a page at a
// time, and makes it ready. Claims may run meanwhile:
// until it is ready the filter answers "maybe" and every claim is careful.
func (e *Engine) RebuildKeyFilter(ctx context.Context) (keyfilter.RebuildStats, error) {
	if e.cfg.KeyFilter == nil {
		return keyfilter.RebuildStats{}, nil
	}
	return e.RebuildKeyFilterSince(ctx, time.Time{})
}

// rebuildPage is how many keys one query of the rebuild reads.
const rebuildPage = 5000

// A livePage is one query's worth of live keys, or the error that ended the
// reading.
type livePage struct {
	rows []keyfilter.Row
	err  error
}

// liveKeys streams every live key (of those finished, only the ones
// created from since on, unless it is zero), page by page: the unfinished
// keys, then the finished ones in the order they were created
// (ListUnfinishedKeys, ListLiveFinishedKeys). A key that finishes while the
// rebuild runs is in one list or the other: it leaves the first only when
// it finishes, and the second reads the newest keys last. A key another
// instance creates during the rebuild and that is still unfinished when
// the second list reaches it is left out: a false "new" for that key, which
// the unique index catches (this instance's own claims add their keys
// themselves).
//
// With since set (a snapshot's covered time, less SnapshotMargin), a key
// created before since and finished after it is not read: it was
// unfinished when the snapshot was taken, and so in it, read by the first
// list of the snapshot's own refresh (SaveKeyFilterSnapshot), live from
// then. Its bits lapse a TTL after that refresh rather than a TTL after its
// finish: for at most the snapshot interval at the end of its life such a
// key (one that took longer than the interval to finish) is a false "new"
// too. No index of the key table names its finish time, so that a key's
// finish is a HOT update (migration 000026).
//
// The next page is read while the filter takes in the last one, so that
// PostgreSQL and the filter work at once (on different cores), and at most
// two pages are held in memory.
func (e *Engine) liveKeys(ctx context.Context, since time.Time) iter.Seq2[keyfilter.Row, error] {
	return func(yield func(keyfilter.Row, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		pages := make(chan livePage, 1)
		go e.readLivePages(ctx, pages, since)
		for page := range pages {
			if page.err != nil {
				yield(keyfilter.Row{}, page.err)
				return
			}
			for _, row := range page.rows {
				if !yield(row, nil) {
					return
				}
			}
		}
	}
}

// readLivePages sends the pages of liveKeys to pages, and closes it after
// the last one or an error, or when ctx is done.
func (e *Engine) readLivePages(ctx context.Context, pages chan<- livePage, since time.Time) {
	defer close(pages)
	send := func(p livePage) bool {
		select {
		case pages <- p:
			return p.err == nil
		case <-ctx.Done():
			return false
		}
	}
	unfinished := dbsqlc.ListUnfinishedKeysParams{Now: e.queryNow(), PageSize: rebuildPage}
	for {
		keys, err := queries.ListUnfinishedKeys(ctx, e.cfg.Pool, unfinished)
		page := livePage{err: err, rows: make([]keyfilter.Row, len(keys))}
		for i, k := range keys {
			page.rows[i] = keyfilter.Row{UserID: k.UserID, Key: k.IdempotencyKey, LiveFrom: k.LiveFrom}
		}
		if !send(page) {
			return
		}
		if len(keys) < rebuildPage {
			break
		}
		unfinished.AfterID = keys[len(keys)-1].ID
	}
	finished := dbsqlc.ListLiveFinishedKeysParams{Now: e.queryNow(), TtlSeconds: e.cfg.KeyTTL.Seconds(), PageSize: rebuildPage}
	if !since.IsZero() {
		finished.CreatedFrom = pgtype.Timestamptz{Time: since, Valid: true}
	}
	for {
		keys, err := queries.ListLiveFinishedKeys(ctx, e.cfg.Pool, finished)
		page := livePage{err: err, rows: make([]keyfilter.Row, len(keys))}
		for i, k := range keys {
			page.rows[i] = keyfilter.Row{UserID: k.UserID, Key: k.IdempotencyKey, LiveFrom: k.LiveFrom}
		}
		if !send(page) || len(keys) < rebuildPage {
			return
		}
		last := keys[len(keys)-1]
		finished.CreatedFrom, finished.AfterID = pgtype.Timestamptz{Time: last.CreatedAt, Valid: true}, last.ID
	}
}
