package api_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/keyfilter"
	"github.com/example/payments/internal/recovery"
)

// Rule 5: a request whose key nobody else is executing never gets 409, on a
// new, empty database too. There the indexes are a page or two, and
// SERIALIZABLE's page-level predicate locks made concurrent claims of
// different keys conflict until their retries ran out.
func TestIdempotency_freshKeysOnAYoungDatabaseNeverGet409(t *testing.T) {
	t.Parallel()
	for _, filter := range []bool{true, false} {
		t.Run(fmt.Sprintf("keyfilter=%v", filter), func(t *testing.T) {
			t.Parallel()
			var cfg recovery.Config
			if filter {
				f, err := keyfilter.New(keyfilter.Config{TTL: 24 * time.Hour, ExpectedKeysPerSlice: 10000})
				require.NoError(t, err)
				_, err = f.Rebuild(t.Context(), func(func(keyfilter.Row, error) bool) {})
				require.NoError(t, err)
				cfg.KeyFilter = f
			}
			b := setup(t, setupOpts{engine: cfg})
			const clients, perClient = 32, 10
			var wg sync.WaitGroup
			statuses := make(chan string, clients*perClient)
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range perClient {
						apiKey := aliceKey
						if c%2 == 1 {
							apiKey = bobKey
						}
						resp, data, err := b.send(jsonRequest{apiKey: apiKey, path: pathPayments,
							idemKey: fmt.Sprintf("young-%d-%d", c, i), body: visaBody})
						if err != nil {
							statuses <- err.Error()
							continue
						}
						if resp.StatusCode != http.StatusCreated {
							statuses <- fmt.Sprintf("%d %s", resp.StatusCode, data)
						}
					}
				}()
			}
			wg.Wait()
			close(statuses)
			var failed []string
			for s := range statuses {
				failed = append(failed, s)
			}
			require.Empty(t, failed, "%d of %d fresh keys were not answered 201", len(failed), clients*perClient)
			require.Equal(t, clients*perClient, b.count(t, "SELECT count(*) FROM payments"))
		})
	}
}
