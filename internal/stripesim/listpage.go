package stripesim

import (
	"net/http"
	"slices"
)

// listPage is one page of a Stripe list, newest first, the same for every
// list the simulator serves. older and newer are the objects on either side
// of the cursor (oldest first); without ending_before (before == "") the
// page walks from the newest of older back, with it from the oldest of newer
// on, and is then turned to newest first, as Stripe's is. matches filters;
// past, when not nil, stops the walk back at the first object it is true for
// (nothing older can match). It returns the page and has_more.
func listPage[T any](older, newer []*T, before string, limit int, matches, past func(*T) bool) ([]*T, bool) {
	var page []*T
	hasMore := false
	if before == "" {
		for i := len(older) - 1; i >= 0 && !hasMore; i-- {
			if past != nil && past(older[i]) {
				break
			}
			if matches(older[i]) {
				hasMore = len(page) == limit
				page = append(page, older[i])
			}
		}
	} else {
		for i := 0; i < len(newer) && !hasMore; i++ {
			if matches(newer[i]) {
				hasMore = len(page) == limit
				page = append(page, newer[i])
			}
		}
	}
	if hasMore {
		page = page[:limit]
	}
	if before != "" {
		slices.Reverse(page)
	}
	return page, hasMore
}

// listAnswer is Stripe's list object for a page.
func listAnswer[T any](c *call, page []*T, hasMore bool) outcome {
	return succeeded(struct {
		Object  string `json:"object"`
		Data    []*T   `json:"data"`
		HasMore bool   `json:"has_more"`
		URL     string `json:"url"`
	}{"list", append([]*T{}, page...), hasMore, c.path})
}

// listQuery is what every list of the simulator reads from its request:
// the page's size, the created range and at most one cursor.
type listQuery struct {
	limit         int
	created       createdRange
	after, before string // starting_after, ending_before
}

// readListQuery reads a list's request, refusing a parameter it does not
// take (allowed, beside limit, created and the cursors) and both cursors
// at once, as Stripe does.
func (c *call) readListQuery(allowed ...string) (listQuery, *apiError) {
	var q listQuery
	if e := c.allowOnly(append([]string{"created", "limit", "starting_after", "ending_before", "expand"}, allowed...)...); e != nil {
		return q, e
	}
	var e *apiError
	if q.limit, _, e = c.searchPage(); e != nil {
		return q, e
	}
	if q.created, e = c.createdRange(); e != nil {
		return q, e
	}
	q.after, q.before = c.str("starting_after"), c.str("ending_before")
	if q.after != "" && q.before != "" {
		return q, invalidRequest(http.StatusBadRequest, "", "ending_before",
			"You may only specify one of these parameters: ending_before, starting_after.")
	}
	return q, nil
}

// cursor is the list's cursor ("" for none) and the parameter that gave it.
func (q listQuery) cursor() (id, param string) {
	if q.before != "" {
		return q.before, "ending_before"
	}
	return q.after, "starting_after"
}
