package safehttp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"

	"github.com/example/payments/internal/telemetry"
)

// ErrNonPublicAddress is wrapped by the error of a delivery whose connection
// the dialer refused; the error's text names the address and its class, for
// the delivery's last_error.
var ErrNonPublicAddress = errors.New("refusing to connect to a non-public address")

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
	// AllowPrivate lets the client connect to any address: `payments dev`,
	// and PAYMENTS_WEBHOOK_ALLOW_PRIVATE=true.
	AllowPrivate bool
	// Timeout bounds each request; 0 means DefaultTimeout.
	Timeout time.Duration
	// UserAgent is sent with every request; "" means DefaultUserAgent.
	UserAgent string
	// Resolver resolves host names when dialling; nil is the system's.
	// Whatever it answers, the dialer checks the address it connects to.
	Resolver *net.Resolver
}

// NewClient returns the client for webhook deliveries.
func NewClient(cfg Config) *http.Client {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = DefaultUserAgent
	}
	dialer := &net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second, Resolver: cfg.Resolver}
	if !cfg.AllowPrivate {
		dialer.Control = refuseNonPublic
	}
	transport := &http.Transport{
		Proxy:                 nil, // never from the environment: see the package doc
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   4,
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

// refuseNonPublic is the dialer's Control hook: it runs after the name was
// resolved and before the socket connects, with the address about to be
// dialled, for every address the dialer tries.
func refuseNonPublic(_, address string, _ syscall.RawConn) error {
	addrPort, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot tell whether %q is public: %v", ErrNonPublicAddress, address, err)
	}
	if class := whyNonPublic(addrPort.Addr()); class != "" {
		return fmt.Errorf("%w: %s is %s", ErrNonPublicAddress, addrPort.Addr(), class)
	}
	return nil
}

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
	return t.next.RoundTrip(req)
}

// ReadLimited reads at most n bytes of r (MaxResponseBytes for a delivery's
// answer). A read error ends it early with what was read: the status code
// has already decided the attempt, and the body is only kept to show.
func ReadLimited(r io.Reader, n int64) []byte {
	b, _ := io.ReadAll(io.LimitReader(r, n))
	return b
}
