package recovery

import (
	"context"
	"iter"

	"github.com/google/uuid"

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
	return e.cfg.KeyFilter.Rebuild(ctx, e.liveKeys(ctx))
}

// rebuildPage is how many keys one query of the rebuild reads.
const rebuildPage = 5000

// liveKeys streams every live key, page by page, so a rebuild never holds
// more than one page in memory.
func (e *Engine) liveKeys(ctx context.Context) iter.Seq2[keyfilter.Row, error] {
	return func(yield func(keyfilter.Row, error) bool) {
		after := uuid.Nil
		for {
			page, err := queries.ListLiveKeys(ctx, e.cfg.Pool, dbsqlc.ListLiveKeysParams{
				Now: e.now(), TtlSeconds: e.cfg.KeyTTL.Seconds(), AfterID: after, PageSize: rebuildPage,
			})
			if err != nil {
				yield(keyfilter.Row{}, err)
				return
			}
			for _, k := range page {
				if !yield(keyfilter.Row{UserID: k.UserID, Key: k.IdempotencyKey, LiveFrom: k.LiveFrom}, nil) {
					return
				}
			}
			if len(page) < rebuildPage {
				return
			}
			after = page[len(page)-1].ID
		}
	}
}
