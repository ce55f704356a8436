package safehttp

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"

	"github.com/example/payments/internal/telemetry"
)

// ErrNonPublicAddress is wrapped by the error of a delivery whose connection
// the dialer refused for a non-public address. The error's text, which
// becomes the delivery's last_error that the endpoint's owner reads, says
// what kind of address it was but not which (docs/API.md section 7: the
// URL's host may be a name whose address is not the owner's to learn); the
// address is logged at debug level (Config.Logger).
var (
	ErrNonPublicAddress = errors.New("refusing to connect to a non-public address")
	// ErrOwnAddress is the same for an address of the service itself
	// (Config.Own).
	ErrOwnAddress = errors.New("refusing to connect to an address of this service or of its Stripe simulator")
)

const (
	// DefaultTimeout bounds a whole delivery attempt, from dialling to the
	// last byte read: API.md section 7 counts an answer after 10 s as a
	// failure.
	DefaultTimeout = 10 * time.Second
	// DefaultUserAgent names the sender, so a receiver's logs say who calls.
	DefaultUserAgent = "payments-webhooks/1 (+https://github.com/example/payments)"
	// MaxResponseBytes is how much of an answer a delivery reads and keeps.
	MaxResponseBytes = 4 << 10
)

// Config is the outgoing client's settings. The zero value is the safe
// production client.
type Config struct {
	// AllowPrivate lets the client connect to any address but Own:
	// `payments dev` (unless PAYMENTS_WEBHOOK_ALLOW_PRIVATE=false), and
	// PAYMENTS_WEBHOOK_ALLOW_PRIVATE=true.
	AllowPrivate bool
	// Own are the addresses the service itself listens on (its API, the
	// Stripe simulator it embeds): never connected to, even with
	// AllowPrivate, so that a webhook endpoint cannot make the service call
	// itself (its simulator's /_sim/reset, its own API). A port of Own is
	// refused on every address of this machine (see policy.isOwn).
	Own []netip.AddrPort
	// Logger, when set, gets a debug line with the address of every
	// connection the dialer refuses.
	Logger *slog.Logger
	// Timeout bounds each request; 0 means DefaultTimeout.
	Timeout time.Duration
	// UserAgent is sent with every request; "" means DefaultUserAgent.
	UserAgent string
	// Resolver resolves host names when dialling; nil is the system's.
	// Whatever it answers, the dialer checks the address it connects to.
	Resolver *net.Resolver
}

// DefaultIdleConnsPerHost is how many idle connections the client keeps to
// one host: as many as the webhook dispatcher has attempts in flight in all
// (merchanthooks' default Concurrency), since the endpoints of many users
// may share one host (a webhook relay, a platform's receiver), so that its
// next round of attempts reuses them rather than dialling, and
// handshaking, again. With net/http's default of 2, and the 4 here before,
// make bench's scenario G spent a tenth of the worker's CPU in new
// connections; with 10 (one endpoint's share of the attempts), where its
// 64 users' endpoints share the benchmark's one receiver, still 14 %.
const DefaultIdleConnsPerHost = 50

// NewClient returns the client for webhook deliveries.
func NewClient(cfg Config) *http.Client {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = DefaultUserAgent
	}
	dialer := &net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second, Resolver: cfg.Resolver}
	if p := cfg.policy(); !p.allowPrivate || len(p.own) > 0 {
		dialer.Control = p.control(cfg.Logger)
	}
	transport := &http.Transport{
		Proxy:                 nil, // never from the environment: see the package doc
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   DefaultIdleConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   cfg.Timeout,
		ExpectContinueTimeout: time.Second,
	}
	return &http.Client{
		// With tracing on, each attempt is an HTTP client span in the
		// delivery job's trace; no traceparent goes to the merchant
		// (telemetry.ClientTransport says why).
		Transport: telemetry.ClientTransport(&userAgentTransport{next: transport, userAgent: cfg.UserAgent}, webhookSpanName),
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
		Timeout: cfg.Timeout,
	}
}

// control is the dialer's Control hook: it runs after the name was
// resolved and before the socket connects, with the address about to be
// dialled, for every address the dialer tries. An address it cannot parse
// is refused: the check fails closed.
func (p policy) control(log *slog.Logger) func(_, address string, _ syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		addrPort, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: cannot tell whether the address is public: %v", ErrNonPublicAddress, err)
		}
		r := p.refuse(addrPort)
		if r == nil {
			return nil
		}
		if log != nil {
			log.Debug("webhook connection refused", slog.String("address", address), slog.String("reason", r.reason))
		}
		if r.own {
			return ErrOwnAddress
		}
		return fmt.Errorf("%w: the address is %s", ErrNonPublicAddress, r.reason)
	}
}

// refuseNonPublic is the Control hook of the production client.
var refuseNonPublic = policy{}.control(nil)

// webhookSpanName names an attempt's span: the endpoint's URL is the
// merchant's, one per endpoint, and stays in the span's attributes.
func webhookSpanName(r *http.Request) string { return r.Method + " webhook endpoint" }

// userAgentTransport sets the User-Agent on every request, over whatever the
// caller set: every delivery says who sends it.
type userAgentTransport struct {
	next      http.RoundTripper
	userAgent string
}

func (t *userAgentTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	// A RoundTripper must not change the caller's request: change a copy.
	req = req.Clone(req.Context())
	req.Header.Set("User-Agent", t.userAgent)
	resp, err := t.next.RoundTrip(req)
	return resp, withoutRefusedAddress(err)
}

// withoutRefusedAddress drops the *net.OpError around a refusal of the
// dialer's Control hook: its text ("dial tcp 10.0.0.7:443: ...") names the
// address a host name resolved to, which the refusal must not tell (see
// ErrNonPublicAddress). The refusal's own error says what kind of address it
// was.
func withoutRefusedAddress(err error) error {
	var op *net.OpError
	if err != nil && errors.As(err, &op) && (errors.Is(op.Err, ErrNonPublicAddress) || errors.Is(op.Err, ErrOwnAddress)) {
		return op.Err
	}
	return err
}

// ReadLimited reads at most n bytes of r (MaxResponseBytes for a delivery's
// answer). A read error ends it early with what was read: the status code
// has already decided the attempt, and the body is only kept to show.
func ReadLimited(r io.Reader, n int64) []byte {
	b, _ := io.ReadAll(io.LimitReader(r, n))
	return b
}
