package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/stripesim"
)

// simulatorKey is the Stripe key used when only STRIPE_API_BASE is given:
// a simulator or stripe-mock accepts any test key.
const simulatorKey = "sk_test_simulator"

// newStripeClient connects to the Stripe that cfg names. With only an API
// base, it uses simulatorKey.
func newStripeClient(cfg config, log *slog.Logger) (*stripeclient.Client, error) {
	if err := cfg.requireStripe(); err != nil {
		return nil, err
	}
	key := cfg.StripeSecretKey
	if key == "" {
		key = simulatorKey
	}
	return stripeclient.New(stripeclient.Config{
		SecretKey: key, APIBase: cfg.StripeAPIBase, AllowLive: cfg.AllowLiveKeys,
		Logger: log.With(slog.String("component", "stripe")),
	})
}

// requireStripe is the usage error of settings that name no Stripe: which
// settings, with example values.
func (cfg config) requireStripe() error {
	if cfg.StripeSecretKey != "" || cfg.StripeAPIBase != "" {
		return nil
	}
	return fmt.Errorf("%w: no Stripe to call: set STRIPE_API_BASE to a Stripe simulator (payments dev's embedded one: "+
		"STRIPE_API_BASE=http://127.0.0.1:12111, its default --stripesim-addr; payments stripesim's: the same by default), "+
		"or STRIPE_SECRET_KEY to a Stripe test key (STRIPE_SECRET_KEY=sk_test_...); or the flags --stripe-api-base, --stripe-secret-key", errUsage)
}

// embeddedSimulator is a Stripe simulator served from this process.
type embeddedSimulator struct {
	sim *stripesim.Simulator
	srv *http.Server
	url string
}

// startSimulator serves a Stripe simulator on addr, delivering webhooks to
// webhookURL when it is set.
// With a stateFile, the simulator keeps its state there (stripesim.Open):
// what it had when it last stopped, it has again.
func startSimulator(addr, webhookURL, webhookSecret string, authorisationLifetime time.Duration, stateFile string, log *slog.Logger) (*embeddedSimulator, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("starting the Stripe simulator: %w", err)
	}
	cfg := stripesim.Config{
		WebhookURL: webhookURL, WebhookSecret: webhookSecret, AuthorisationLifetime: authorisationLifetime,
		Logger: log.With(slog.String("component", "stripesim")),
	}
	var sim *stripesim.Simulator
	if stateFile == "" {
		sim = stripesim.New(cfg)
	} else if sim, err = stripesim.Open(cfg, stateFile); err != nil {
		ln.Close()
		return nil, err
	}
	srv := &http.Server{
		Handler:           sim.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		// A delay fault may hold a response for a while on purpose.
		WriteTimeout: 5 * time.Minute,
		IdleTimeout:  120 * time.Second,
		ErrorLog:     slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("stripe simulator stopped", slog.String("error", err.Error()))
		}
	}()
	return &embeddedSimulator{sim: sim, srv: srv, url: "http://" + ln.Addr().String()}, nil
}

func (e *embeddedSimulator) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = e.srv.Shutdown(ctx)
	e.sim.Close()
}
