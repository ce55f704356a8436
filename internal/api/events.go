package api

import (
	"errors"
	"net/http"

	"github.com/example/payments/internal/events"
)

// listEvents answers GET /v1/events?limit=N&starting_after=ID: the caller's
// events, newest first.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) error {
	params, err := listParams(r)
	if err != nil {
		return err
	}
	page, hasMore, err := events.List(r.Context(), s.pool, userFrom(r.Context()).ID, params.Limit, params.StartingAfter)
	if errors.Is(err, events.ErrNotFound) {
		return validationFailed("starting_after: no such event %q", params.StartingAfter)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toList(page, hasMore))
	return nil
}
