package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/keyfilter"
	"github.com/example/payments/internal/recovery"
)

// Rule 5 in a same-key storm: many identical requests with one brand-new
// key, all at once. Exactly one of them runs (201); every other one gets
// 409 idempotency_key_in_use or the replay of that 201; none gets a 5xx.
// The losers of the race to insert the key's row (found nothing, inserted,
// hit the unique index) once answered 500 unique constraint violated.
//
// It runs on a young database (indexes of a page or two, where
// SERIALIZABLE's predicate locks conflict most) and on one preloaded with
// some thousands of keys, with the key filter on (the first claim inserts
// at once, the others look up first) and off (every claim looks up first).
//
// Not parallel with the package's other tests: its 64 concurrent clients
// take every core for their rounds, and a parallel test with a deadline of
// its own (the 5 s serialization-retry budget of the young-database test)
// starved of CPU by them failed under -race. Its four cases run in parallel
// with each other, alone.
func TestIdempotency_sameKeyStormAnswersOne201AndNo5xx(t *testing.T) {
	const clients, rounds, preloaded = 64, 100, 5000
	for _, tc := range []struct {
		name      string
		preloaded int
		filter    bool
	}{
		{"young/keyfilter=on", 0, true},
		{"young/keyfilter=off", 0, false},
		{"preloaded/keyfilter=on", preloaded, true},
		{"preloaded/keyfilter=off", preloaded, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var cfg recovery.Config
			if tc.filter {
				f, err := keyfilter.New(keyfilter.Config{TTL: 24 * time.Hour, ExpectedKeysPerSlice: 10000})
				require.NoError(t, err)
				_, err = f.Rebuild(t.Context(), func(func(keyfilter.Row, error) bool) {})
				require.NoError(t, err)
				cfg.KeyFilter = f
			}
			b := setup(t, setupOpts{engine: cfg})
			if tc.preloaded > 0 {
				b.preloadFinishedKeys(t, "alice@example.com", tc.preloaded)
			}
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
			t.Cleanup(client.CloseIdleConnections)

			start := time.Now()
			for round := range rounds {
				answers := make([]stormAnswer, clients)
				var ready, done sync.WaitGroup
				gate := make(chan struct{})
				for i := range clients {
					ready.Add(1)
					done.Add(1)
					go func() {
						defer done.Done()
						ready.Done()
						<-gate
						answers[i] = b.stormRequest(client, fmt.Sprintf("storm-%d", round))
					}()
				}
				ready.Wait()
				close(gate)
				done.Wait()
				requireOneRunAndTheRestInUseOrReplayed(t, round, answers)
			}
			t.Logf("%d rounds of %d identical requests in %s", rounds, clients, time.Since(start).Round(time.Millisecond))
			require.Equal(t, rounds, b.count(t, "SELECT count(*) FROM payments"), "one payment per round")
		})
	}
}

// stormAnswer is one answer of a storm: its status, code, whether it was a
// replay, and its body.
type stormAnswer struct {
	status   int
	code     string
	replayed bool
	body     string
	err      error
}

func (b *testBundle) stormRequest(client *http.Client, idemKey string) stormAnswer {
	r, err := http.NewRequest(http.MethodPost, b.server.URL+pathPayments, strings.NewReader(visaBody))
	if err != nil {
		return stormAnswer{err: err}
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+aliceKey)
	r.Header.Set("Idempotency-Key", idemKey)
	resp, err := client.Do(r)
	if err != nil {
		return stormAnswer{err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	a := stormAnswer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true", body: string(data), err: err}
	if resp.StatusCode >= 400 {
		var p struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(data, &p)
		a.code = p.Code
	}
	return a
}

func requireOneRunAndTheRestInUseOrReplayed(t *testing.T, round int, answers []stormAnswer) {
	t.Helper()
	var ran []stormAnswer
	for _, a := range answers {
		require.NoError(t, a.err, "round %d", round)
		switch {
		case a.status == http.StatusCreated && !a.replayed:
			ran = append(ran, a)
		case a.status == http.StatusCreated && a.replayed:
		case a.status == http.StatusConflict && a.code == "idempotency_key_in_use":
		default:
			require.Failf(t, "an answer that is not the run, its replay, nor 409 in use", "round %d: %d %s", round, a.status, a.body)
		}
	}
	require.Len(t, ran, 1, "round %d: exactly one request runs", round)
	for _, a := range answers {
		if a.status == http.StatusCreated && a.replayed {
			require.Equal(t, ran[0].body, a.body, "round %d: a replay is the first answer", round)
		}
	}
}

// preloadFinishedKeys gives the user n finished keys, written directly, so
// that the key indexes are those of a database that has run for a while.
func (b *testBundle) preloadFinishedKeys(t *testing.T, email string, n int) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), `
		INSERT INTO idempotency_keys (user_id, idempotency_key, flow, request_method, request_path, request_params,
			request_fingerprint, recovery_point, response_code, response_body, expires_at)
		SELECT u.id, 'preloaded-' || g, 'create_payment', 'POST', '/v1/payments', '{}',
			sha256(('preloaded-' || g)::bytea), 'finished', 201, '{}'::bytea, now() + interval '1 day'
		FROM users u, generate_series(1, $2) g WHERE u.email = $1`, email, n)
	require.NoError(t, err)
}
