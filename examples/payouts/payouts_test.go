package payouts_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/examples/payouts"
	"github.com/example/payments/internal/api"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/openapitest"
	"github.com/example/payments/internal/problem"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/recovery/recoverytest"
	"github.com/example/payments/internal/route"
	"github.com/example/payments/internal/route/routetest"
	"github.com/example/payments/internal/users"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

// bank stands in for the team's bank, over HTTP: one transfer per
// Idempotency-Key; a closed account refused (422); while down, 503 and
// nothing done.
type bank struct {
	mu    sync.Mutex
	byKey map[string]string
	down  bool
}

func (b *bank) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var p payouts.Params
	key := r.Header.Get("Idempotency-Key")
	switch err := json.NewDecoder(r.Body).Decode(&p); {
	case b.down:
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	case err != nil || key == "":
		http.Error(w, `{"refusal": "no idempotency key, or no JSON"}`, http.StatusBadRequest)
	case p.Destination == "acct_closed":
		http.Error(w, `{"refusal": "the account is closed"}`, http.StatusUnprocessableEntity)
	default:
		if _, ok := b.byKey[key]; !ok {
			b.byKey[key] = fmt.Sprintf("tr_%d", len(b.byKey)+1)
		}
		_, _ = fmt.Fprintf(w, `{"id": %q}`, b.byKey[key])
	}
}

func (b *bank) transfers() int { b.mu.Lock(); defer b.mu.Unlock(); return len(b.byKey) }

// outage is the bank down for the next call: Prove meets it at the step.
func (b *bank) outage() recoverytest.Fault {
	set := func(down bool) { b.mu.Lock(); defer b.mu.Unlock(); b.down = down }
	return recoverytest.Fault{
		Name: "bank_down",
		Arm:  func(string, time.Duration) error { set(true); return nil },
		Armed: func() bool { // the call met it: the bank is up again
			b.mu.Lock()
			defer b.mu.Unlock()
			return b.down
		},
		Disarm: func() { set(false) },
	}
}

// Its ServeHTTP lifts the outage once a call met it.
type outageOnce struct{ *bank }

func (o outageOnce) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.bank.ServeHTTP(w, r)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down = false
}

func migrate(pool *pgxpool.Pool) error {
	_, err := pool.Exec(context.Background(), payouts.Migration+`;
		INSERT INTO users (email) VALUES ('owner@example.com')`)
	return err
}

// The payout, proven exactly-once: killed at every failpoint of its flow
// and met by the bank's outage, resumed by a retry and by the completer;
// every run answers 201 paid, the bank made one transfer, saw one child key
// per run, and the payout row and its one staged event agree.
func TestProve_payouts(t *testing.T) {
	t.Parallel()
	b := &bank{byKey: map[string]string{}}
	bankURL := recoverytest.Server(t, "bank", func() http.Handler { return outageOnce{b} })
	pool := recoverytest.Database(t, migrate)
	recoverytest.Prove(t, recoverytest.Case{
		Pool: pool, Flow: payouts.Flow(bankURL), Effects: b.transfers, Faults: []recoverytest.Fault{b.outage()},
		Request: func() recovery.Request {
			return recovery.Request{UserID: 1, Method: "POST", Path: "/v1/payouts", Body: []byte(`{"amount":500,"currency":"eur","destination":"acct_1"}`),
				Params: payouts.Params{Amount: 500, Currency: "eur", Destination: "acct_1"}}
		},
		Want: recoverytest.Want{Status: http.StatusCreated, JSON: `{"status": "paid", "amount": 500}`},
		State: func(resp recovery.Response) []byte {
			var p payouts.Payout
			require.NoError(t, json.Unmarshal(resp.Body, &p))
			var state []byte
			require.NoError(t, pool.QueryRow(context.Background(), `SELECT json_build_object('status', status, 'transfer', transfer,
				'events', (SELECT count(*) FROM staged_jobs s WHERE s.idempotency_key_id = p.idempotency_key_id)) FROM payouts p WHERE id = $1`, p.ID).Scan(&state))
			return state
		},
	})
}

// Over HTTP, through the service's router: a payout, its replay, the
// bank's refusal stored like a decline, a malformed request not stored,
// the bank's outage answered 503 and resumed by the retry; then the keys
// deleted and the payouts kept.
func TestPayouts_overHTTP(t *testing.T) {
	t.Parallel()
	b := &bank{byKey: map[string]string{}}
	bankServer := httptest.NewServer(b)
	t.Cleanup(bankServer.Close)
	pool := recoverytest.Database(t, migrate)
	engine, err := recovery.New(recovery.Config{Pool: pool}, payouts.Flow(bankServer.URL))
	require.NoError(t, err)
	doc, err := os.ReadFile("openapi.json")
	require.NoError(t, err)
	contract, err := openapitest.Parse(doc) // every exchange below is held to it
	require.NoError(t, err)
	handler, err := api.NewHandler(api.Config{
		Pool: pool, Engine: engine, Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(),
		Routes: []route.Route{payouts.Route()},
	})
	require.NoError(t, err)
	server := httptest.NewServer(contract.Handler(t, handler))
	t.Cleanup(server.Close)
	_, apiKey, err := users.CreateUser(context.Background(), pool, "team@example.com")
	require.NoError(t, err)
	c, ctx := payouts.Client{BaseURL: server.URL, APIKey: apiKey}, context.Background()
	problemOf := func(_ *payouts.Payout, err error) *problem.Problem {
		var p *problem.Problem
		require.ErrorAs(t, err, &p)
		return p
	}

	paid, err := c.CreatePayout(ctx, "po-1", payouts.Params{Amount: 500, Currency: "eur", Destination: "acct_1"})
	require.NoError(t, err)
	require.Equal(t, "paid", paid.Status)
	again, err := c.CreatePayout(ctx, "po-1", payouts.Params{Amount: 500, Currency: "eur", Destination: "acct_1"})
	require.NoError(t, err)
	require.Equal(t, paid, again)

	closed := payouts.Params{Amount: 500, Currency: "eur", Destination: "acct_closed"}
	refused := problemOf(c.CreatePayout(ctx, "po-2", closed))
	require.Equal(t, []any{402, payouts.Refused}, []any{refused.Status, refused.Code})
	require.Equal(t, refused, problemOf(c.CreatePayout(ctx, "po-2", closed)))

	require.Equal(t, problem.ValidationFailed, problemOf(c.CreatePayout(ctx, "po-3", payouts.Params{Currency: "eur", Destination: "acct_1"})).Code)
	b.mu.Lock()
	b.down = true
	b.mu.Unlock()
	fixed := payouts.Params{Amount: 700, Currency: "eur", Destination: "acct_1"}
	unavailable := problemOf(c.CreatePayout(ctx, "po-3", fixed))
	require.Equal(t, []any{503, problem.PaymentProcessorUnavailable}, []any{unavailable.Status, unavailable.Code})
	b.mu.Lock()
	b.down = false
	b.mu.Unlock()
	resumed, err := c.CreatePayout(ctx, "po-3", fixed)
	require.NoError(t, err)
	require.Equal(t, []any{int64(700), "tr_2"}, []any{resumed.Amount, resumed.Transfer})
	require.Equal(t, 2, b.transfers())

	// The keys deleted (as the reaper deletes them), the payouts stay and
	// let go of them, as their key_references row declares.
	_, err = pool.Exec(ctx, "DELETE FROM idempotency_keys")
	require.NoError(t, err)
	var kept, keyed int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*), count(idempotency_key_id) FROM payouts").Scan(&kept, &keyed))
	require.Equal(t, []int{3, 0}, []int{kept, keyed})
}

// The route, declared once, agrees with the team's OpenAPI document, its
// README's route table, its Go client and its flow.
func TestRoutes_payouts(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("openapi.json")
	require.NoError(t, err)
	_, err = openapitest.Parse(doc) // valid OpenAPI 3.1
	require.NoError(t, err)
	routetest.Check(t, routetest.Contract{
		OpenAPI: doc, README: "README.md", Client: payouts.Client{}, Flows: []*recovery.Flow{payouts.Flow("")},
	}, payouts.Route())
}

// What a team writes to add the route, counted from the tree: the files
// under examples/payouts (it touches no file outside it), and their lines
// but for blank ones and those that are only a comment (//, --, <!--), in
// every file: code, SQL, tests, the OpenAPI document and the README.
func TestExample_payoutsIsSmall(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	files, lines := 0, 0
	for _, e := range entries {
		require.False(t, e.IsDir(), "a directory under examples/payouts: count it too")
		f, err := os.Open(e.Name())
		require.NoError(t, err)
		files++
		for s := bufio.NewScanner(f); s.Scan(); {
			line := strings.TrimSpace(s.Text())
			if line != "" && !strings.HasPrefix(line, "//") && !strings.HasPrefix(line, "--") && !strings.HasPrefix(line, "<!--") {
				lines++
			}
		}
		require.NoError(t, f.Close())
	}
	t.Logf("examples/payouts: %d files, %d lines", files, lines)
	require.LessOrEqual(t, files, 8)
	require.LessOrEqual(t, lines, 500)
}
