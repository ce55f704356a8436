package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/users"
)

// A-naive-http is the like-for-like floor of B (issue 40): the pattern as a
// team that copied it naively would serve it. A-naive's own four
// SERIALIZABLE transactions (the baseline's request4.sql, one statement at
// a time, BEGIN alone, no key filter, no pipelining), behind the same chi
// router, the same authentication (users.Authenticator on the service's
// users and API keys, with its cache), a JSON body decoded and a JSON
// answer, a JSON log line per request, and the same stripe-go call to the
// same simulator with a child key derived from the key row, between the
// second and the third transaction. What B does beyond it (the engine's
// fencing, replays, the filter, the events and receipts staged) is what the
// ratio B / A-naive-http prices.
type naiveHTTP struct {
	pool   *pgxpool.Pool // the naive schema's database
	auth   *users.Authenticator
	stripe *client.API
	log    *slog.Logger
}

// naiveHTTPTx1 is naiveTx1 with the client's key, not a random one.
const naiveHTTPTx1 = `INSERT INTO idempotency_keys (key, user_id, recovery_point, locked_at, request_params)
VALUES ($3, $1, 'started', now(),
        jsonb_build_object('amount_cents', $2::bigint, 'currency', 'usd'))
RETURNING id`

// naiveHTTPTx3Payment records the PaymentIntent's id, not a made-up one.
const naiveHTTPTx3Payment = `UPDATE payments SET charge_id = $2 WHERE id = $1`

// startNaiveHTTP serves A-naive-http on a loopback port: the naive SQL on
// pool, the users and keys on authPool.
func (b *bench) startNaiveHTTP(pool, authPool *pgxpool.Pool) (url string, stop func(), err error) {
	httpClient := &http.Client{Timeout: 80 * time.Second, Transport: http.DefaultTransport.(*http.Transport).Clone()}
	httpClient.Transport.(*http.Transport).MaxIdleConnsPerHost = 64 // as stripeclient keeps
	httpClient.Transport.(*http.Transport).MaxIdleConns = 64
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		HTTPClient: httpClient, URL: stripe.String(b.simURL),
		MaxNetworkRetries: stripe.Int64(0), EnableTelemetry: stripe.Bool(false),
	})
	n := &naiveHTTP{
		pool: pool, auth: users.NewAuthenticator(authPool, users.AuthenticatorConfig{}),
		stripe: client.New("sk_test_simulator", &stripe.Backends{API: backend, Connect: backend, Uploads: backend}),
		log:    slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	r := chi.NewRouter()
	r.Use(middleware.RequestID)
	r.Post("/v1/payments", n.create)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: labelled(partService, r), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// create is POST /v1/payments, naively: no replay, no fence, no filter.
func (n *naiveHTTP) create(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	status, body := n.serve(r)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
	n.log.InfoContext(r.Context(), "request", slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.Int("status", status), slog.Duration("took", time.Since(start)), slog.String("request_id", middleware.GetReqID(r.Context())))
}

func (n *naiveHTTP) serve(r *http.Request) (int, any) {
	ctx := r.Context()
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return http.StatusUnauthorized, map[string]string{"code": "unauthorized"}
	}
	u, err := n.auth.Authenticate(ctx, token)
	if err != nil {
		return http.StatusUnauthorized, map[string]string{"code": "unauthorized"}
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		return http.StatusBadRequest, map[string]string{"code": "idempotency_key_missing"}
	}
	var req struct {
		Amount        int64  `json:"amount"`
		Currency      string `json:"currency"`
		PaymentMethod string `json:"payment_method"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Amount <= 0 {
		return http.StatusBadRequest, map[string]string{"code": "validation_failed"}
	}
	var keyID, paymentID int64
	err = db.WithTx(ctx, n.pool, naiveTx, func(ctx context.Context, tx *db.Tx) error {
		if err := beginAlone(ctx, tx); err != nil {
			return err
		}
		return tx.QueryRow(ctx, naiveHTTPTx1, u.ID, req.Amount, key).Scan(&keyID)
	})
	if errors.Is(err, db.ErrUniqueViolation) {
		return http.StatusConflict, map[string]string{"code": "idempotency_key_in_use"}
	}
	if err != nil {
		return http.StatusServiceUnavailable, map[string]string{"code": "service_unavailable"}
	}
	err = db.WithTx(ctx, n.pool, naiveTx, func(ctx context.Context, tx *db.Tx) error {
		if err := beginAlone(ctx, tx); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, naiveTx2Payment, keyID, u.ID, req.Amount).Scan(&paymentID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, naiveTx2Audit, req.Amount, paymentID, u.ID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, naiveTx2Key, keyID)
		return err
	})
	if err != nil {
		return http.StatusServiceUnavailable, map[string]string{"code": "service_unavailable"}
	}
	params := &stripe.PaymentIntentParams{
		Amount: stripe.Int64(req.Amount), Currency: stripe.String(req.Currency), PaymentMethod: stripe.String(req.PaymentMethod),
		PaymentMethodTypes: stripe.StringSlice([]string{"card"}), Confirm: stripe.Bool(true), ErrorOnRequiresAction: stripe.Bool(true),
	}
	params.Context = ctx
	params.SetIdempotencyKey(fmt.Sprintf("naive-%d-payment_intent", keyID))
	pi, err := n.stripe.PaymentIntents.New(params)
	if err != nil {
		return http.StatusServiceUnavailable, map[string]string{"code": "payment_processor_unavailable"}
	}
	err = db.WithTx(ctx, n.pool, naiveTx, func(ctx context.Context, tx *db.Tx) error {
		if err := beginAlone(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, naiveHTTPTx3Payment, paymentID, pi.ID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, naiveTx3Key, keyID)
		return err
	})
	if err != nil {
		return http.StatusServiceUnavailable, map[string]string{"code": "service_unavailable"}
	}
	err = db.WithTx(ctx, n.pool, naiveTx, func(ctx context.Context, tx *db.Tx) error {
		if err := beginAlone(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, naiveTx4Job, paymentID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, naiveTx4Finished, paymentID, req.Amount, keyID)
		return err
	})
	if err != nil {
		return http.StatusServiceUnavailable, map[string]string{"code": "service_unavailable"}
	}
	return http.StatusCreated, map[string]any{"id": fmt.Sprintf("pay_%d", paymentID), "object": "payment", "amount": req.Amount,
		"currency": req.Currency, "status": string(pi.Status), "stripe_payment_intent": pi.ID}
}
