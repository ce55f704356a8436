package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/example/payments/internal/api"
	"github.com/example/payments/internal/app"
	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/keyfilter"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/stripeclient"
)

// service is the payments service as `payments serve` runs it, assembled by
// internal/app with the service's defaults: its pool, the engine with its
// key filter (rebuilt before the load starts, as at start-up), the payments
// service talking to the simulator over loopback HTTP through stripeclient,
// the webhooks receiver, and the API handler on a real loopback HTTP server
// with the service's timeouts. The rate limit is off. Its logs are
// formatted as in production (JSON, info) and discarded.
type service struct {
	app *app.App
	srv *http.Server
	url string
}

func (b *bench) startService(ctx context.Context, dbname string, filterOn bool, tracer *sqlCounter) (*service, error) {
	log := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	stripeCfg := stripeclient.Config{
		SecretKey: "sk_test_simulator", APIBase: b.simURL, Logger: log.With(slog.String("component", "stripe")),
	}
	if b.o.stripeIdleConns > 0 {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = b.o.stripeIdleConns
		t.MaxIdleConns = b.o.stripeIdleConns
		stripeCfg.HTTPClient = &http.Client{Transport: t}
	}
	stripe, err := stripeclient.New(stripeCfg)
	if err != nil {
		return nil, err
	}
	filter := keyfilter.Config{Disabled: !filterOn} // the service's defaults: 1<<20 keys per slice, 0.1 %
	if b.filterOverride != nil {
		filter = *b.filterOverride
	}
	a, err := app.New(ctx, app.Config{
		DatabaseURL: b.server.URL(dbname), Pool: db.PoolConfig{MaxConns: int32(b.o.serviceConns), Tracer: tracer},
		KeyFilter: filter,
		Stripe:    stripe, WebhookSecret: "whsec_bench_0123456789abcdef", Logger: log,
	})
	if err != nil {
		return nil, err
	}
	if _, err := a.Engine.RebuildKeyFilter(ctx); err != nil {
		a.Close()
		return nil, fmt.Errorf("rebuilding the key filter: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		a.Close()
		return nil, err
	}
	handler, err := a.APIHandler(api.RateLimit{}, 0)
	if err != nil {
		return nil, err
	}
	srv := app.NewServer(labelled(partService, handler), log)
	go func() { _ = srv.Serve(ln) }()
	return &service{app: a, srv: srv, url: "http://" + ln.Addr().String()}, nil
}

func (s *service) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	s.app.Close()
}

// httpClient keeps one connection alive per client.
func httpClient(clients int) *http.Client {
	return &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			Proxy: nil, DialContext: (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns: clients + 8, MaxIdleConnsPerHost: clients + 8, IdleConnTimeout: 90 * time.Second,
			DisableCompression: true,
		},
	}
}

// postPayment sends POST /v1/payments and says how it ended: the status,
// and " replayed" when the answer was a replay.
func postPayment(ctx context.Context, client *http.Client, baseURL string, u benchUser, key string) (string, error) {
	return postIdempotent(ctx, client, baseURL+"/v1/payments", u, key, createBody)
}

// postIdempotent sends body to url as u with the Idempotency-Key key, and
// says how it ended: the status, and " replayed" when the answer was a
// replay.
func postIdempotent(ctx context.Context, client *http.Client, url string, u benchUser, key, body string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+u.apiKey)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return "", err
	}
	outcome := fmt.Sprint(resp.StatusCode)
	if resp.Header.Get("Idempotent-Replayed") == "true" {
		outcome += " replayed"
	}
	return outcome, nil
}

// prefillStats is how C's keys were made.
type prefillStats struct {
	took      time.Duration
	conflicts int // answers 409 or 503 to a new key, retried with the same key
}

// replayKey is a finished key of C.
type replayKey struct {
	user benchUser
	key  string
}

// prepareReplays creates C's finished keys once, through the service.
func (b *bench) prepareReplays(ctx context.Context) error {
	if b.replayable != nil {
		return nil
	}
	start := time.Now()
	svc, err := b.startService(ctx, dbReplay, true, &sqlCounter{})
	if err != nil {
		return err
	}
	defer svc.close()
	const workers = 16
	client := httpClient(workers)
	us := b.users
	keys := make([]replayKey, b.o.replayKeys)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	var prefillRetries atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(keys); i += workers {
				k := replayKey{user: us[i%len(us)], key: "replay-" + uuid.NewString()}
				// A client told 409 or 503 retries with the same key.
				outcome, err := "", error(nil)
				for try := 0; try < 10; try++ {
					if outcome, err = postPayment(ctx, client, svc.url, k.user, k.key); err != nil || (outcome != "409" && outcome != "503") {
						break
					}
					prefillRetries.Add(1)
					time.Sleep(100 * time.Millisecond)
				}
				if err == nil && outcome != "201" && outcome != "201 replayed" {
					err = fmt.Errorf("creating a key to replay: got %s", outcome)
				}
				if err != nil {
					errs <- err
					return
				}
				keys[i] = k
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	b.replayable = keys
	b.prefill = prefillStats{took: time.Since(start), conflicts: int(prefillRetries.Load())}
	b.log.Info("created the keys to replay", slog.Int("keys", len(keys)), slog.Duration("took", b.prefill.took.Round(time.Millisecond)),
		slog.Int("409_or_503_retried", b.prefill.conflicts))
	return nil
}

// setup prepares scenario name for a cell of clients.
func (b *bench) setup(ctx context.Context, name string, clients int) (*scenario, error) {
	tracer := &sqlCounter{}
	floorConns := clients
	if b.o.floorConns > 0 {
		floorConns = b.o.floorConns
	}
	serviceConns := b.o.serviceConns
	if serviceConns <= 0 {
		serviceConns = int(db.DefaultMaxConns()) // the service's default
	}
	switch name {
	case "A-naive":
		if err := b.clone(ctx, dbNaive, tmplNaive); err != nil {
			return nil, err
		}
		pool, err := db.Open(ctx, b.server.URL(dbNaive), db.PoolConfig{MaxConns: int32(floorConns), Tracer: tracer})
		if err != nil {
			return nil, err
		}
		return &scenario{dbname: dbNaive, conns: floorConns, tracer: tracer, close: pool.Close,
			do: func(ctx context.Context, _ int, rng *rand.Rand) (string, error) { return naiveRequest(ctx, pool, rng) },
		}, nil

	case "A-naive-http":
		if err := b.clone(ctx, dbNaive, tmplNaive); err != nil {
			return nil, err
		}
		if err := b.clone(ctx, dbPayments, tmplPayments); err != nil { // the users and their API keys
			return nil, err
		}
		pool, err := db.Open(ctx, b.server.URL(dbNaive), db.PoolConfig{MaxConns: int32(serviceConns), Tracer: tracer})
		if err != nil {
			return nil, err
		}
		authPool, err := db.Open(ctx, b.server.URL(dbPayments), db.PoolConfig{MaxConns: 2})
		if err != nil {
			pool.Close()
			return nil, err
		}
		url, stop, err := b.startNaiveHTTP(pool, authPool)
		if err != nil {
			pool.Close()
			authPool.Close()
			return nil, err
		}
		client, us := httpClient(clients), b.users
		return &scenario{dbname: dbNaive, conns: serviceConns, tracer: tracer,
			close: func() { client.CloseIdleConnections(); stop(); pool.Close(); authPool.Close() },
			do: func(ctx context.Context, _ int, rng *rand.Rand) (string, error) {
				return postPayment(ctx, client, url, us[rng.IntN(len(us))], uuid.NewString())
			},
		}, nil

	case "A-own":
		if err := b.clone(ctx, dbPayments, tmplPayments); err != nil {
			return nil, err
		}
		// The engine as the service wires it (internal/app), on a pool of
		// the floor's size; nothing calls Stripe.
		a, err := app.New(ctx, app.Config{
			DatabaseURL: b.server.URL(dbPayments), Pool: db.PoolConfig{MaxConns: int32(floorConns), Tracer: tracer},
			PaymentsOptions: []payments.Option{payments.WithCreatePaymentIntent(stripeSaysYes)},
		})
		if err != nil {
			return nil, err
		}
		if _, err := a.Engine.RebuildKeyFilter(ctx); err != nil {
			a.Close()
			return nil, err
		}
		us := b.users
		return &scenario{dbname: dbPayments, conns: floorConns, tracer: tracer, close: a.Close,
			do: func(ctx context.Context, _ int, rng *rand.Rand) (string, error) {
				return ownRequest(ctx, a.Payments, us, rng)
			},
		}, nil

	case "F", "G":
		if err := b.clone(ctx, dbPayments, tmplPayments); err != nil {
			return nil, err
		}
		svc, err := b.startService(ctx, dbPayments, true, tracer)
		if err != nil {
			return nil, err
		}
		client, us := httpClient(clients), b.users
		bg, err := b.startBackground(ctx, dbPayments, svc.url, client, name == "G")
		if err != nil {
			svc.close()
			return nil, err
		}
		return &scenario{dbname: dbPayments, conns: serviceConns, tracer: tracer, background: bg,
			close: func() {
				bg.close()
				client.CloseIdleConnections()
				svc.close()
			},
			do: func(ctx context.Context, _ int, rng *rand.Rand) (string, error) {
				return postPayment(ctx, client, svc.url, us[rng.IntN(len(us))], uuid.NewString())
			},
		}, nil

	case "B", "B-young", "E", "D":
		template := tmplPayments
		if name == "B-young" {
			template = tmplYoung // empty tables: every index is a page or two
		}
		if err := b.clone(ctx, dbPayments, template); err != nil {
			return nil, err
		}
		svc, err := b.startService(ctx, dbPayments, name != "E", tracer)
		if err != nil {
			return nil, err
		}
		client, us := httpClient(clients), b.users
		sc := &scenario{dbname: dbPayments, conns: serviceConns, tracer: tracer, close: func() {
			client.CloseIdleConnections()
			svc.close()
		}}
		if name == "D" {
			stormID := uuid.NewString()[:8]
			sc.doRound = func(ctx context.Context, _, round int, _ *rand.Rand) (string, error) {
				return postPayment(ctx, client, svc.url, us[round%len(us)], fmt.Sprintf("storm-%s-%d", stormID, round))
			}
		} else {
			sc.do = func(ctx context.Context, _ int, rng *rand.Rand) (string, error) {
				return postPayment(ctx, client, svc.url, us[rng.IntN(len(us))], uuid.NewString())
			}
		}
		return sc, nil

	case "C":
		if err := b.prepareReplays(ctx); err != nil {
			return nil, err
		}
		b.sim.Reset()
		if _, err := b.monitor.Exec(ctx, "CHECKPOINT"); err != nil {
			return nil, err
		}
		svc, err := b.startService(ctx, dbReplay, true, tracer)
		if err != nil {
			return nil, err
		}
		client, keys := httpClient(clients), b.replayable
		return &scenario{dbname: dbReplay, conns: serviceConns, tracer: tracer,
			close: func() { client.CloseIdleConnections(); svc.close() },
			do: func(ctx context.Context, _ int, rng *rand.Rand) (string, error) {
				k := keys[rng.IntN(len(keys))]
				return postPayment(ctx, client, svc.url, k.user, k.key)
			},
		}, nil
	}
	return nil, errors.New("unknown scenario " + name)
}
