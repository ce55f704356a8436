package db

import "time"

// Lists are paged by keyset, newest first: a page is the rows created
// before a cursor (created_at, id), fetched with one row more than the page
// holds, to tell whether another page follows.

// EndOfTime sorts after every row: the cursor of a first page.
var EndOfTime = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// TrimPage cuts rows, fetched with a limit of limit+1, to limit, and tells
// whether there were more.
func TrimPage[T any](rows []T, limit int) (page []T, hasMore bool) {
	if len(rows) > limit {
		return rows[:limit], true
	}
	return rows, false
}
