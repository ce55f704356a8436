package api

import (
	"errors"
	"io"
	"net/http"

	"github.com/example/payments/internal/problem"
	"github.com/example/payments/internal/webhooks"
)

// maxWebhookBytes bounds a Stripe event delivery; events are a few KiB.
const maxWebhookBytes = 256 << 10

// receiveStripeWebhook answers POST /v1/stripe/webhooks: no API key (Stripe
// signs instead), 400 when the signature does not verify, else 200 with
// what the event did, including for a repeat or an event type we ignore (a
// non-2xx would make Stripe deliver it again for days).
func (s *Server) receiveStripeWebhook(w http.ResponseWriter, r *http.Request) error {
	payload, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxWebhookBytes))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return bodyTooLarge()
	}
	if err != nil {
		return validationFailed("reading the webhook body: %v", err)
	}
	outcome, err := s.webhooks.Receive(r.Context(), payload, r.Header.Get("Stripe-Signature"))
	if errors.Is(err, webhooks.ErrSignature) {
		return problem.New(http.StatusBadRequest, problem.WebhookSignatureInvalid, "The Stripe-Signature header does not verify.")
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"received": true, "outcome": outcome})
	return nil
}
