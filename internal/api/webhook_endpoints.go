package api

import (
	"context"
	"net/http"

	"github.com/example/payments/internal/merchanthooks"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/recovery"
)

// URLCheck decides whether a webhook endpoint's URL may be registered,
// beyond its syntax: in production, that its host resolves only to public
// addresses (internal/safehttp). Its error's text is shown to the client.
type URLCheck func(ctx context.Context, rawURL string) error

// createEndpointRequest is the body of POST /v1/webhook_endpoints.
type createEndpointRequest struct {
	URL           *string  `json:"url"`
	EnabledEvents []string `json:"enabled_events"`
	Description   *string  `json:"description"`
}

// createWebhookEndpoint answers POST /v1/webhook_endpoints: 201 with the
// endpoint and its secret, the only answer (with its replays) that shows it.
func (s *Server) createWebhookEndpoint(w http.ResponseWriter, r *http.Request) error {
	var req createEndpointRequest
	idem, err := readIdempotent(r, &req, false)
	if err != nil {
		return err
	}
	params, err := s.validateEndpoint(r.Context(), req)
	if err != nil {
		return err
	}
	resp, err := s.hooks.CreateEndpoint(r.Context(), engineRequest(idem), params)
	s.writeExecution(w, r, resp, err)
	return nil
}

func (s *Server) validateEndpoint(ctx context.Context, req createEndpointRequest) (merchanthooks.CreateParams, error) {
	if req.URL == nil {
		return merchanthooks.CreateParams{}, validationFailed("url is required: the absolute http or https URL to POST events to.")
	}
	if err := merchanthooks.ValidateURL(*req.URL); err != nil {
		return merchanthooks.CreateParams{}, validationFailed("%s.", err)
	}
	if s.checkURL != nil {
		if err := s.checkURL(ctx, *req.URL); err != nil {
			return merchanthooks.CreateParams{}, validationFailed("url is refused: %s.", err)
		}
	}
	enabled, err := merchanthooks.ValidateEnabledEvents(req.EnabledEvents, s.eventTypes)
	if err != nil {
		return merchanthooks.CreateParams{}, validationFailed("%s.", err)
	}
	if req.Description != nil && len(*req.Description) > maxDescription {
		return merchanthooks.CreateParams{}, validationFailed("description is at most %d bytes.", maxDescription)
	}
	return merchanthooks.CreateParams{URL: *req.URL, EnabledEvents: enabled, Description: req.Description}, nil
}

// getWebhookEndpoint answers GET /v1/webhook_endpoints/{id}, without the secret.
func (s *Server) getWebhookEndpoint(w http.ResponseWriter, r *http.Request) error {
	id, ok := pathParam(r, "id")
	if !ok {
		return merchanthooks.ErrEndpointNotFound
	}
	e, err := merchanthooks.GetEndpoint(r.Context(), s.pool, userFrom(r.Context()).ID, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, e)
	return nil
}

// listWebhookEndpoints answers GET /v1/webhook_endpoints?limit=N&starting_after=ID.
func (s *Server) listWebhookEndpoints(w http.ResponseWriter, r *http.Request) error {
	params, err := listParams(r)
	if err != nil {
		return err
	}
	page, hasMore, err := merchanthooks.ListEndpoints(r.Context(), s.pool, userFrom(r.Context()).ID, params.Limit, params.StartingAfter)
	if err != nil {
		return inQueryParam("starting_after", "webhook endpoint", params.StartingAfter, err)
	}
	writeJSON(w, http.StatusOK, toList(page, hasMore))
	return nil
}

// deleteWebhookEndpoint answers DELETE /v1/webhook_endpoints/{id}.
func (s *Server) deleteWebhookEndpoint(w http.ResponseWriter, r *http.Request) error {
	id, ok := pathParam(r, "id")
	if !ok {
		return merchanthooks.ErrEndpointNotFound
	}
	if err := merchanthooks.DeleteEndpoint(r.Context(), s.pool, userFrom(r.Context()).ID, id); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, deletedEndpoint{id, "webhook_endpoint", true})
	return nil
}

// engineRequest is the engine's request for an idempotent call to a flow
// outside package payments (which takes payments.KeyedRequest itself).
func engineRequest(req payments.KeyedRequest) recovery.Request {
	return recovery.Request{UserID: req.UserID, Key: req.Key, Method: req.Method, Path: req.Path, Body: req.Body}
}
