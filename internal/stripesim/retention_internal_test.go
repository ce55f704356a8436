package stripesim

import (
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Idempotency keys and events are not only hidden once Stripe would have
// dropped them (TestKeysAreKeptFor24Hours, TestListEvents_keeps30Days): the
// simulator lets go of them as its clock passes them, so that a month of
// history does not keep every key and event in memory.
func TestRetention_forgetsKeysAfter24HoursAndEventsAfter30Days(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	s := New(Config{Now: func() time.Time { return start }})
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	post := func(key string) (id string, replayed bool) {
		t.Helper()
		form := url.Values{"amount": {"2000"}, "currency": {"usd"}, "payment_method": {"pm_card_visa"}, "confirm": {"true"}}
		req := httptest.NewRequest("POST", srv.URL+"/v1/payment_intents", strings.NewReader(form.Encode()))
		req.RequestURI = ""
		req.Header.Set("Authorization", "Bearer sk_test_retention")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Idempotency-Key", key)
		res, err := srv.Client().Do(req)
		require.NoError(t, err)
		require.Equal(t, 200, res.StatusCode)
		var pi struct {
			ID string `json:"id"`
		}
		require.NoError(t, json.NewDecoder(res.Body).Decode(&pi))
		require.NoError(t, res.Body.Close())
		return pi.ID, res.Header.Get("Idempotent-Replayed") == "true"
	}
	held := func() (keys, events int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		require.Len(t, s.state.keyOrder, len(s.state.keys))
		require.Len(t, s.state.events.order, len(s.state.events.byID))
		return len(s.state.keys), len(s.state.events.order)
	}

	first, _ := post("first")
	again, replayed := post("first")
	require.Equal(t, first, again)
	require.True(t, replayed)
	keys, events := held()
	require.Equal(t, 1, keys)
	require.Equal(t, 3, events, "payment_intent.created, charge.succeeded, payment_intent.succeeded")

	s.Advance(25 * time.Hour)
	anew, replayed := post("first")
	require.NotEqual(t, first, anew, "a 25-hour-old key's request executes anew, as Stripe's does")
	require.False(t, replayed)
	keys, events = held()
	require.Equal(t, 1, keys, "the 25-hour-old claim is gone, its stored answer with it; the new one is held")
	require.Equal(t, 6, events)

	s.Advance(29 * 24 * time.Hour)        // the first events are 30 days and an hour old, the second 29 days
	_, err := s.Objects("payment_intent") // any call moves the state to the clock
	require.NoError(t, err)
	keys, events = held()
	require.Equal(t, 0, keys)
	require.Equal(t, 3, events, "the first payment's events are gone, the second's (29 days old) kept")
	raw, err := s.Objects("event")
	require.NoError(t, err)
	require.Len(t, raw, 3)
}
