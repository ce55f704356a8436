package chaostest

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// Config is the length and intensity of a run. Every field has an
// environment twin read by ConfigFromEnv.
type Config struct {
	// Duration is how long clients start new requests (CHAOS_DURATION).
	Duration time.Duration
	// Clients is how many clients run at once (CHAOS_CLIENTS).
	Clients int
	// Think is the mean pause of a client between two chains of requests
	// (CHAOS_THINK). Without it the clients produce merchant events and
	// receipts twice as fast as one worker's River drains them (about 100
	// jobs a second), and the settling at the end takes as long as the run.
	Think time.Duration
	// Seed drives every random choice of the run (CHAOS_SEED); the same seed
	// makes the same choices, though timing still differs between runs.
	Seed uint64
	// FaultRate is how many simulator faults are armed per second, on
	// average (CHAOS_FAULT_RATE); 0 turns faults off.
	FaultRate float64
	// CrashInterval is the mean time between two crash events: a failpoint
	// restart, a SIGKILL, a graceful restart (CHAOS_CRASH_INTERVAL); 0 turns
	// crashes off.
	CrashInterval time.Duration
	// KillWorker lets crash events SIGKILL the worker too, and restart it
	// with a crash failpoint (CHAOS_KILL_WORKER). Off by default: River marks
	// the jobs it fetched "running", and after a SIGKILL rescues them only
	// once RescueStuckJobsAfter has passed (the worker sets one minute), so
	// such a run takes a minute more to settle. Graceful restarts of the
	// worker happen either way.
	KillWorker bool
	// LockTimeout is the service's PAYMENTS_LOCK_TIMEOUT (CHAOS_LOCK_TIMEOUT).
	LockTimeout time.Duration
	// KeyTTL is the service's PAYMENTS_IDEMPOTENCY_KEY_TTL (CHAOS_KEY_TTL;
	// 0: the service's default, a day). Short, keys expire during the run:
	// some clients that got a 503 come back only after the TTL (a late
	// finish) and replay their answer at once, which must be a replay (API.md
	// rule 8); replays of older answers are not sent, since such a key may
	// rightly be new again, and the checker allows for reaped keys.
	KeyTTL time.Duration
	// AuthorisationLifetime is the simulator's (CHAOS_AUTHORISATION_LIFETIME):
	// an authorisation nobody captures or cancels within it is canceled by
	// Stripe, as after 7 days at Stripe. Some clients leave authorisations
	// alone for that; a capture that comes too late is rightly refused.
	AuthorisationLifetime time.Duration
	// WebhookDuplicates is the share of webhook events delivered twice
	// (CHAOS_WEBHOOK_DUPLICATES).
	WebhookDuplicates float64
	// WebhookDrop is the share of webhook events never delivered
	// (CHAOS_WEBHOOK_DROP): the relay acknowledges them to the simulator and
	// tells no instance, as a webhook Stripe gave up on. At 1 the service
	// hears nothing from Stripe but its answers, and only the reconciler
	// (PAYMENTS_RECONCILE_AFTER, short in the cluster) brings the records
	// to Stripe's: refunds that fail or settle later, authorisations Stripe
	// let lapse, refunds made in the dashboard.
	WebhookDrop float64
	// RequestBudget bounds the retries of one logical request in time
	// (CHAOS_REQUEST_BUDGET); a request without a final answer by then is a
	// violation.
	RequestBudget time.Duration
	// SettleTimeout bounds the wait for the background work to settle after
	// the clients finished (CHAOS_SETTLE_TIMEOUT): it fails when the backlog
	// has not shrunk for that long, or after 20 times that in all. Not
	// settling is a violation.
	SettleTimeout time.Duration
	// LogDir keeps the processes' logs (CHAOS_LOG_DIR); empty: a temporary
	// directory, removed after a run without violations.
	LogDir string
}

// DefaultConfig is the CI run: a minute of chaos, sixteen clients.
func DefaultConfig() Config {
	return Config{
		Duration:              60 * time.Second,
		Clients:               16,
		Think:                 100 * time.Millisecond,
		Seed:                  uint64(time.Now().UnixNano()),
		FaultRate:             4,
		CrashInterval:         3 * time.Second,
		KillWorker:            false,
		LockTimeout:           2 * time.Second,
		KeyTTL:                10 * time.Second,
		WebhookDuplicates:     0.1,
		AuthorisationLifetime: 20 * time.Second,
		RequestBudget:         2 * time.Minute,
		SettleTimeout:         60 * time.Second,
	}
}

// ConfigFromEnv is DefaultConfig overridden by the CHAOS_* variables.
func ConfigFromEnv() (Config, error) {
	cfg := DefaultConfig()
	var errs []error
	duration := func(name string, p *time.Duration) {
		if v, ok := os.LookupEnv(name); ok {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				errs = append(errs, fmt.Errorf("%s=%q: want a duration such as 60s", name, v))
			}
			*p = d
		}
	}
	duration("CHAOS_DURATION", &cfg.Duration)
	duration("CHAOS_CRASH_INTERVAL", &cfg.CrashInterval)
	duration("CHAOS_THINK", &cfg.Think)
	duration("CHAOS_LOCK_TIMEOUT", &cfg.LockTimeout)
	duration("CHAOS_KEY_TTL", &cfg.KeyTTL)
	duration("CHAOS_REQUEST_BUDGET", &cfg.RequestBudget)
	duration("CHAOS_SETTLE_TIMEOUT", &cfg.SettleTimeout)
	duration("CHAOS_AUTHORISATION_LIFETIME", &cfg.AuthorisationLifetime)
	if v, ok := os.LookupEnv("CHAOS_CLIENTS"); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("CHAOS_CLIENTS=%q: want a number", v))
		}
		cfg.Clients = n
	}
	if v, ok := os.LookupEnv("CHAOS_SEED"); ok && v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("CHAOS_SEED=%q: want an unsigned number", v))
		}
		cfg.Seed = n
	}
	for name, p := range map[string]*float64{"CHAOS_FAULT_RATE": &cfg.FaultRate, "CHAOS_WEBHOOK_DUPLICATES": &cfg.WebhookDuplicates,
		"CHAOS_WEBHOOK_DROP": &cfg.WebhookDrop} {
		if v, ok := os.LookupEnv(name); ok {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: want a number", name, v))
			}
			*p = x
		}
	}
	if v, ok := os.LookupEnv("CHAOS_KILL_WORKER"); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("CHAOS_KILL_WORKER=%q: want true or false", v))
		}
		cfg.KillWorker = b
	}
	cfg.LogDir = os.Getenv("CHAOS_LOG_DIR")
	if err := errors.Join(errs...); err != nil {
		return cfg, err
	}
	return cfg, cfg.validate()
}

func (cfg Config) validate() error {
	switch {
	case cfg.Duration <= 0 || cfg.Duration > 24*time.Hour:
		return fmt.Errorf("chaos: duration %v is not in (0, 24h]", cfg.Duration)
	case cfg.Clients < 1 || cfg.Clients > 256:
		return fmt.Errorf("chaos: %d clients is not in [1, 256]", cfg.Clients)
	case cfg.FaultRate < 0 || cfg.FaultRate > 100:
		return fmt.Errorf("chaos: fault rate %v is not in [0, 100] per second", cfg.FaultRate)
	case cfg.CrashInterval != 0 && cfg.CrashInterval < 500*time.Millisecond:
		return fmt.Errorf("chaos: crash interval %v is under 500ms", cfg.CrashInterval)
	case cfg.LockTimeout < 300*time.Millisecond:
		return fmt.Errorf("chaos: lock timeout %v is under 300ms", cfg.LockTimeout)
	case cfg.KeyTTL != 0 && cfg.KeyTTL < 5*time.Second:
		return fmt.Errorf("chaos: key TTL %v is under 5s: clients could not replay their answers inside it", cfg.KeyTTL)
	case cfg.WebhookDuplicates < 0 || cfg.WebhookDuplicates > 1:
		return fmt.Errorf("chaos: webhook duplicate share %v is not in [0, 1]", cfg.WebhookDuplicates)
	case cfg.WebhookDrop < 0 || cfg.WebhookDrop > 1:
		return fmt.Errorf("chaos: webhook drop share %v is not in [0, 1]", cfg.WebhookDrop)
	case cfg.AuthorisationLifetime < 5*time.Second:
		return fmt.Errorf("chaos: authorisation lifetime %v is under 5s: clients could not capture in time", cfg.AuthorisationLifetime)
	case cfg.RequestBudget < time.Second || cfg.SettleTimeout < time.Second:
		return fmt.Errorf("chaos: request budget and settle timeout must be at least 1s")
	}
	return nil
}
