package api

import (
	"errors"
	"io"
	"net/http"
)

// maxWebhookBytes bounds a Stripe event delivery (256 KiB, docs/API.md
// section 2): Stripe's events are larger than any client's request, so the
// route has its own limit rather than MaxBodyBytes.
const maxWebhookBytes = 256 << 10

// receiveStripeWebhook answers POST /v1/stripe/webhooks: no API key (Stripe
// signs instead), 400 when the signature does not verify, else 200 with
// what the event did, including for a repeat, an event type we ignore, or
// a signed event we cannot decode or apply (kept aside as unprocessable): a
// non-2xx would make Stripe deliver it again for days.
func (s *Server) receiveStripeWebhook(w http.ResponseWriter, r *http.Request) error {
	if r.ContentLength > maxWebhookBytes {
		return bodyOver(maxWebhookBytes)
	}
	payload, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxWebhookBytes))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return bodyOver(maxWebhookBytes)
	}
	if err != nil {
		return validationFailed("reading the webhook body: %v", err)
	}
	outcome, err := s.webhooks.Receive(r.Context(), payload, r.Header.Get("Stripe-Signature"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"received": true, "outcome": outcome})
	return nil
}
