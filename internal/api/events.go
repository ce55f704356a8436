package api

import (
	"net/http"
	"slices"

	"github.com/example/payments/internal/events"
	"github.com/example/payments/internal/merchanthooks"
)

// listEvents answers GET /v1/events?limit=N&starting_after=ID&type=T: the
// caller's events, newest first, only those of type T when it is given.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) error {
	params, err := listParams(r)
	if err != nil {
		return err
	}
	eventType := r.URL.Query().Get("type")
	if r.URL.Query().Has("type") && !slices.Contains(s.eventTypes, eventType) {
		return validationFailed("type must be an event type (payment.succeeded, refund.failed, ...), not %q.", eventType)
	}
	page, hasMore, err := events.List(r.Context(), s.pool, userFrom(r.Context()).ID, events.ListParams{
		Limit: params.Limit, StartingAfter: params.StartingAfter, Type: eventType,
	})
	if err != nil {
		return inQueryParam("starting_after", "event", params.StartingAfter, err)
	}
	writeJSON(w, http.StatusOK, toList(page, hasMore))
	return nil
}

// getEvent answers GET /v1/events/{id}.
func (s *Server) getEvent(w http.ResponseWriter, r *http.Request) error {
	id, ok := pathParam(r, "id")
	if !ok {
		return events.ErrNotFound
	}
	e, err := events.Get(r.Context(), s.pool, userFrom(r.Context()).ID, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, e)
	return nil
}

// listDeliveries answers GET /v1/events/{id}/deliveries: one delivery per
// endpoint the event is sent to.
func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request) error {
	id, ok := pathParam(r, "id")
	if !ok {
		return events.ErrNotFound
	}
	deliveries, err := merchanthooks.ListDeliveries(r.Context(), s.pool, userFrom(r.Context()).ID, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toList(deliveries, false))
	return nil
}

// redeliverEvent answers POST /v1/events/{id}/redeliver. The event's owner
// is checked here, before the flow (another user's event is 404, and not
// stored); the redelivery itself is the flow's.
func (s *Server) redeliverEvent(w http.ResponseWriter, r *http.Request) error {
	var req struct{}
	idem, err := readIdempotent(r, &req, true)
	if err != nil {
		return err
	}
	id, ok := pathParam(r, "id")
	if !ok {
		return events.ErrNotFound
	}
	if _, err := events.Get(r.Context(), s.pool, idem.UserID, id); err != nil {
		return err
	}
	resp, err := s.hooks.Redeliver(r.Context(), engineRequest(idem), merchanthooks.RedeliverParams{Event: id})
	s.writeExecution(w, r, resp, err)
	return nil
}
