package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/pglocal"
	"github.com/example/payments/internal/users"
)

// runDev is `payments dev`: everything a newcomer needs, in one process.
// Without DATABASE_URL it runs its own PostgreSQL cluster in --data-dir,
// which survives restarts and dies with the process.
func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseDevConfig(args, stderr)
	if err != nil {
		return err
	}
	log := newLogger(stderr, cfg.LogLevel)
	flushTraces, err := startTracing(ctx, "dev", log)
	if err != nil {
		return err
	}
	defer flushTraces()

	// One dev per data directory: a second one stops here, before it
	// touches the first one's cluster or ports (devlock.go).
	var lock *devLock
	if cfg.usesDataDir() {
		if lock, err = lockDataDir(cfg.DataDir, "payments dev"); err != nil {
			return err
		}
		defer lock.release()
	}
	// Listen first: the simulator needs the API's address for its webhooks,
	// and a second dev the address to name.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	if lock != nil {
		if err := lock.setAddr(ln.Addr().String()); err != nil {
			return err
		}
	}
	if cfg.DatabaseURL == "" {
		pg, err := startLocalPostgres(ctx, cfg.DataDir, log)
		if err != nil {
			return err
		}
		defer pg.Stop()
		cfg.DatabaseURL = pg.URL("payments")
	}
	if cfg.StripeWebhookSecret == "" {
		cfg.StripeWebhookSecret = devWebhookSecret
	}
	if cfg.embeddedSimulator() {
		webhookURL := "http://" + ln.Addr().String() + "/v1/stripe/webhooks"
		// STRIPE_WEBHOOK_SECRET may list several secrets (one being rolled):
		// the simulator signs with the first, which the service takes.
		signing, _, _ := strings.Cut(cfg.StripeWebhookSecret, ",")
		sim, err := startSimulator(cfg.StripesimAddr, webhookURL, strings.TrimSpace(signing), 0,
			filepath.Join(cfg.DataDir, devSimulatorStateFile), log)
		if err != nil {
			return err
		}
		defer sim.stop()
		cfg.StripeAPIBase = sim.url
	}
	if cfg.ConsoleToken == "" {
		cfg.ConsoleToken = newConsoleToken()
	}
	// Private webhook addresses or not, never the service's own.
	cfg.webhookOwn = ownAddresses(ctx, ln.Addr().String(), cfg.StripeAPIBase, log)
	log.Info("starting payments dev", slog.Any("config", cfg))

	if err := db.MigrateUp(ctx, cfg.DatabaseURL, log); err != nil {
		return err
	}
	p, err := newProcess(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer p.Close()
	if err := users.SeedDemoUsers(ctx, p.Pool); err != nil {
		return err
	}
	metrics, err := listenMetrics(cfg.MetricsAddr)
	if err != nil {
		return err
	}
	if metrics != nil {
		cfg.MetricsAddr = metrics.Addr().String() // the port chosen, for the banner
	}
	printWelcome(stdout, cfg, ln.Addr().String())
	return runAll(ctx, p.runWorker, func(ctx context.Context) error { return p.serveAPI(ctx, ln) }, p.metricsServer(metrics))
}

// parseDevConfig reads dev's settings: serve's, and its own.
func parseDevConfig(args []string, stderr io.Writer) (config, error) {
	var cfg config
	f := newFlags("dev", stderr)
	cfg.commonFlags(f)
	cfg.metricsFlag(f, defaultMetricsAddr)
	f.stringVar(&cfg.DataDir, "data-dir", "PAYMENTS_DATA_DIR", ".data", "where the local PostgreSQL cluster lives")
	f.stringVar(&cfg.StripesimAddr, "stripesim-addr", "PAYMENTS_STRIPESIM_ADDR", "127.0.0.1:12111",
		"where the embedded Stripe simulator listens (when neither STRIPE_API_BASE nor STRIPE_SECRET_KEY is set)")
	// A newcomer's endpoint is on their own machine: dev allows private
	// addresses unless PAYMENTS_WEBHOOK_ALLOW_PRIVATE=false (or the flag)
	// says otherwise, so that the SSRF guard can be rehearsed in dev too.
	f.devDefault("webhook-allow-private", "PAYMENTS_WEBHOOK_ALLOW_PRIVATE", "true")
	if err := f.parse(args); err != nil {
		return config{}, err
	}
	if err := cfg.validate(); err != nil {
		return config{}, err
	}
	return cfg, nil
}

// ownAddresses are the addresses webhooks must never reach in dev (docs/API.md
// section 7): the API's, and the Stripe simulator's when it is on this
// machine (the embedded one, or one STRIPE_API_BASE names by a loopback
// address or localhost). A simulator elsewhere is not the service's to
// guard; with Stripe itself there is none.
func ownAddresses(ctx context.Context, apiAddr, stripeAPIBase string, log *slog.Logger) []netip.AddrPort {
	var own []netip.AddrPort
	if ap, err := netip.ParseAddrPort(apiAddr); err == nil {
		own = append(own, ap)
	}
	u, err := url.Parse(stripeAPIBase)
	if stripeAPIBase == "" || err != nil || u.Hostname() == "" {
		return own
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443"}[u.Scheme]
		if port == "" {
			port = "80"
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", u.Hostname())
	if err != nil {
		log.Debug("cannot resolve the Stripe simulator's host; webhooks are not kept from it", slog.String("error", err.Error()))
		return own
	}
	for _, addr := range addrs {
		if ap, err := netip.ParseAddrPort(net.JoinHostPort(addr.String(), port)); err == nil && (addr.IsLoopback() || addr.IsUnspecified()) {
			own = append(own, ap)
		}
	}
	return own
}

// devSimulatorStateFile, in --data-dir, keeps the embedded simulator's
// state across restarts, as the cluster beside it keeps the service's.
const devSimulatorStateFile = "stripesim.json"

// devWebhookSecret signs the embedded simulator's webhooks in dev, on both
// sides, unless STRIPE_WEBHOOK_SECRET says otherwise.
const devWebhookSecret = "whsec_dev_0123456789abcdef"

func startLocalPostgres(ctx context.Context, dataDir string, log *slog.Logger) (*pglocal.Server, error) {
	pg, err := pglocal.Start(ctx, pglocal.Config{
		DataDir: filepath.Join(dataDir, "postgres"),
		LogFile: filepath.Join(dataDir, "postgres.log"),
		Logger:  log,
		// As root, a clone under /root or a fresh `mktemp -d` is out of the
		// postgres user's reach; `make run` must work there all the same.
		RelocateUnreachable: true,
	})
	if err != nil {
		return nil, fmt.Errorf("starting local PostgreSQL in %s: %w", dataDir, err)
	}
	if err := pg.CreateDatabase(ctx, "payments"); err != nil {
		_ = pg.Stop()
		return nil, fmt.Errorf("creating the payments database: %w", err)
	}
	return pg, nil
}

// newConsoleToken makes up the console's token for dev: 128 random bits.
func newConsoleToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "console_" + hex.EncodeToString(b)
}

func printWelcome(w io.Writer, cfg config, addr string) {
	base := "http://" + addr
	fmt.Fprintf(w, "payments dev is up\n\n")
	fmt.Fprintf(w, "  API:       %s\n", base)
	fmt.Fprintf(w, "  Database:  %s\n", maskURL(cfg.DatabaseURL))
	stripe := cfg.StripeAPIBase
	if stripe == "" {
		stripe = "Stripe's API"
	}
	fmt.Fprintf(w, "  Stripe:    %s\n", stripe)
	if cfg.ConsoleToken != "" {
		fmt.Fprintf(w, "  Console:   %s/console  (token: %s)\n", base, cfg.ConsoleToken)
	}
	if metrics := strings.TrimSpace(cfg.MetricsAddr); metrics != "" && !strings.EqualFold(metrics, metricsOff) {
		fmt.Fprintf(w, "  Metrics:   http://%s/metrics\n", cfg.MetricsAddr)
	}
	fmt.Fprintf(w, "\n  Demo API keys:\n")
	for _, u := range users.DemoUsers {
		fmt.Fprintf(w, "    %-20s %s\n", u.Email, u.APIKey)
	}
	fmt.Fprintf(w, "\n  Try:\n    curl -H 'Authorization: Bearer %s' -H 'Idempotency-Key: first-payment' \\\n"+
		"      -H 'Content-Type: application/json' -d '{\"amount\":2000,\"currency\":\"usd\",\"payment_method\":\"pm_card_visa\"}' \\\n"+
		"      %s/v1/payments\n\n", users.DemoUsers[0].APIKey, base)
}

// usesDataDir tells whether dev keeps anything in --data-dir: its own
// PostgreSQL cluster (without DATABASE_URL) or the embedded simulator's
// state (without STRIPE_API_BASE and STRIPE_SECRET_KEY).
func (cfg config) usesDataDir() bool {
	return cfg.DatabaseURL == "" || cfg.embeddedSimulator()
}

// embeddedSimulator tells whether dev runs its own Stripe simulator.
func (cfg config) embeddedSimulator() bool {
	return cfg.StripeAPIBase == "" && cfg.StripeSecretKey == ""
}
