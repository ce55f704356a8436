// Package webhook verifies the deliveries of this service's webhooks to
// merchants (docs/API.md section 7), on the receiving end: each is an
// Event POSTed with the Standard Webhooks headers (standardwebhooks.com).
//
//	func (h *hooks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
//		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
//		if err != nil {
//			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
//			return
//		}
//		event, err := webhook.ParseEvent(h.secret, r.Header, body, 0)
//		if err != nil {
//			http.Error(w, "not signed by the payments service", http.StatusBadRequest)
//			return
//		}
//		// event.ID is the same on every redelivery: process each id once.
//		w.WriteHeader(http.StatusNoContent)
//	}
//
// It uses the standard library only, and never logs, stores or answers
// anything: what to do with a delivery that does not verify is the
// caller's to decide (refuse it).
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/example/payments/client"
)

// DefaultTolerance is how far a delivery's webhook-timestamp may be from
// the receiver's clock, either way, unless the caller says otherwise. The
// Standard Webhooks specification ("Verifying signatures") requires the
// timestamp to be "within some allowable tolerance of the current
// timestamp to prevent replay attacks"; its reference libraries use five
// minutes (libraries/go/webhook.go: tolerance = 5 * time.Minute), and so
// does this one.
const DefaultTolerance = 5 * time.Minute

// The headers of a delivery (Standard Webhooks, "Webhook headers").
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// secretPrefix starts an endpoint's secret, before the base64 of its key
// (Standard Webhooks, "Signature scheme": whsec_ for symmetric secrets).
const secretPrefix = "whsec_"

// The reasons a delivery does not verify (errors.Is).
var (
	ErrMissingHeaders = errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature")
	ErrTimestamp      = errors.New("webhook: webhook-timestamp is not a Unix time within the tolerance")
	ErrSignature      = errors.New("webhook: no signature in webhook-signature matches")
	ErrSecret         = errors.New("webhook: the secret is not whsec_ followed by base64")
)

// Verify checks that body, with its headers, is a delivery signed with the
// endpoint's secret ("whsec_..."), sent no further than tolerance from now
// (0: DefaultTolerance). As the Standard Webhooks specification says: the
// signed content is "{webhook-id}.{webhook-timestamp}.{body}", the key is
// the base64-decoded part of the secret after "whsec_", and
// webhook-signature is a space-separated list of "v1,<base64 of the
// HMAC-SHA256>" entries (several during a key rotation; others, such as
// "v1a," asymmetric ones, are skipped), one of which must match. body must
// be the bytes as received: JSON decoded and encoded again will not match.
func Verify(secret string, header http.Header, body []byte, tolerance time.Duration) error {
	return verifyAt(secret, header, body, tolerance, time.Now())
}

// ParseEvent verifies the delivery as Verify does, and decodes its Event.
// It also checks that the event is the one the webhook-id names (the
// service sends the event's id there, the same on every redelivery).
func ParseEvent(secret string, header http.Header, body []byte, tolerance time.Duration) (*client.Event, error) {
	if err := Verify(secret, header, body, tolerance); err != nil {
		return nil, err
	}
	var e client.Event
	if err := json.Unmarshal(body, &e); err != nil {
		return nil, fmt.Errorf("webhook: the body is not an event: %w", err)
	}
	if e.ID != header.Get(HeaderID) {
		return nil, fmt.Errorf("webhook: webhook-id %q is not the event's id %q", header.Get(HeaderID), e.ID)
	}
	return &e, nil
}

func verifyAt(secret string, header http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	id, ts, signatures := header.Get(HeaderID), header.Get(HeaderTimestamp), header.Get(HeaderSignature)
	if id == "" || ts == "" || signatures == "" {
		return ErrMissingHeaders
	}
	seconds, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || strconv.FormatInt(seconds, 10) != ts {
		return ErrTimestamp
	}
	if at := time.Unix(seconds, 0); at.Before(now.Add(-tolerance)) || at.After(now.Add(tolerance)) {
		return ErrTimestamp
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, secretPrefix))
	if err != nil || len(key) == 0 {
		return ErrSecret
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, entry := range strings.Fields(signatures) {
		version, signature, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(signature)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrSignature
}
