package stripeclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"
)

// DefaultTimeout bounds each HTTP request to Stripe; the package comment
// explains the choice.
const DefaultTimeout = 30 * time.Second

// Config configures a Client.
type Config struct {
	SecretKey  string        // sk_test_... ; sk_live_ refused unless AllowLive
	APIBase    string        // "" = Stripe's real URL; else e.g. http://127.0.0.1:12111
	Timeout    time.Duration // per HTTP request; 0 means DefaultTimeout
	AllowLive  bool
	HTTPClient *http.Client // optional; its Timeout, if zero, becomes Timeout
	Logger     *slog.Logger // optional; receives stripe-go's own messages at debug level
}

// Errors returned by New and by the calls.
var (
	ErrLiveKeyRefused   = errors.New("stripeclient: refusing a live Stripe key without AllowLive")
	ErrNoIdempotencyKey = errors.New("stripeclient: a mutating Stripe call needs an idempotency key")
)

// Client calls Stripe for the payment flows. It is safe for concurrent use.
type Client struct {
	api *client.API
}

// New checks cfg and builds a client with its own stripe-go backends.
func New(cfg Config) (*Client, error) {
	if err := checkKey(cfg.SecretKey, cfg.AllowLive); err != nil {
		return nil, err
	}
	base, err := apiBase(cfg.APIBase)
	if err != nil {
		return nil, err
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("stripeclient: negative timeout %v", cfg.Timeout)
	}

	httpClient := traced(httpClientFor(cfg))
	logger := leveledLogger(cfg.Logger)
	backend := func(typ stripe.SupportedBackend, url *string) stripe.Backend {
		b := stripe.GetBackendWithConfig(typ, &stripe.BackendConfig{
			HTTPClient:        httpClient,
			URL:               url,
			MaxNetworkRetries: stripe.Int64(0), // see the package comment
			EnableTelemetry:   stripe.Bool(false),
			LeveledLogger:     logger,
		})
		return sizedBackend{b.(*stripe.BackendImplementation)} // backend.go
	}
	backends := &stripe.Backends{
		API:     backend(stripe.APIBackend, base),
		Connect: backend(stripe.ConnectBackend, nil),
		Uploads: backend(stripe.UploadsBackend, nil),
	}
	return &Client{api: client.New(cfg.SecretKey, backends)}, nil
}

func checkKey(key string, allowLive bool) error {
	switch {
	case key == "":
		return errors.New("stripeclient: no secret key")
	case (strings.HasPrefix(key, "sk_live_") || strings.HasPrefix(key, "rk_live_")) && !allowLive:
		return ErrLiveKeyRefused
	}
	return nil
}

// apiBase validates the base URL; nil means Stripe's.
func apiBase(raw string) (*string, error) {
	if raw == "" {
		return nil, nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("stripeclient: API base %q is not an http(s) URL", raw)
	}
	base := strings.TrimSuffix(raw, "/")
	return &base, nil
}

// maxIdleConnsPerHost keeps enough idle connections to Stripe for the
// service's concurrent calls: Go's default of 2 would make every call past
// the second open a new connection (a new TLS handshake, against Stripe).
const maxIdleConnsPerHost = 64

func defaultTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = maxIdleConnsPerHost
	t.MaxIdleConnsPerHost = maxIdleConnsPerHost
	return t
}

func httpClientFor(cfg Config) *http.Client {
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if cfg.HTTPClient == nil {
		return &http.Client{Timeout: timeout, Transport: defaultTransport()}
	}
	c := *cfg.HTTPClient // never change the caller's client
	if c.Timeout == 0 {
		c.Timeout = timeout
	}
	return &c
}

// withKey prepares the common parameters of a call.
func withKey(ctx context.Context, p *stripe.Params, idempotencyKey string) error {
	if strings.TrimSpace(idempotencyKey) == "" {
		return ErrNoIdempotencyKey
	}
	p.Context = ctx
	p.SetIdempotencyKey(idempotencyKey)
	return nil
}

// leveledLogger adapts logger for stripe-go. stripe-go logs every failed
// request as an error, but each one is also returned to the caller, who
// decides how loud to be; so its messages go to debug. Its own debug level
// dumps whole response bodies, client secrets included, and is dropped.
// Without a logger, stripe-go says nothing.
func leveledLogger(logger *slog.Logger) stripe.LeveledLoggerInterface {
	if logger == nil {
		return &stripe.LeveledLogger{Level: stripe.LevelNull}
	}
	return slogAdapter{logger}
}

type slogAdapter struct{ logger *slog.Logger }

func (a slogAdapter) Debugf(string, ...any)          {}
func (a slogAdapter) Infof(format string, v ...any)  { a.log(format, v...) }
func (a slogAdapter) Warnf(format string, v ...any)  { a.log(format, v...) }
func (a slogAdapter) Errorf(format string, v ...any) { a.log(format, v...) }

func (a slogAdapter) log(format string, v ...any) {
	if a.logger.Enabled(context.Background(), slog.LevelDebug) { // formatting costs, even when dropped
		a.logger.Debug("stripe-go: " + fmt.Sprintf(format, v...))
	}
}
