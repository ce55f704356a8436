package safehttp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"time"
)

// ErrInvalidURL is wrapped by every error of CheckURL; the error's text is
// meant for the API's 400 validation_failed detail.
var ErrInvalidURL = errors.New("invalid webhook url")

const (
	// MaxURLLength is docs/API.md section 7's limit on a webhook URL.
	MaxURLLength = 2048
	// resolveTimeout bounds the lookup at creation: a slow name server must
	// not hold an API request for long.
	resolveTimeout = 5 * time.Second
)

// CheckURL decides whether rawURL may be a webhook endpoint's URL for a
// client made with cfg (its AllowPrivate, Own and Resolver). Unless
// cfg.AllowPrivate, it resolves the host and refuses the URL when any of its
// addresses is not public; in any case it refuses one that is an address of
// the service itself (cfg.Own). This is the check at creation; the dialer
// checks again at every connection (see the package doc).
//
// A refusal of a host for its address is a *RefusedError, whose text tells
// the client nothing of what a name resolved to (docs/API.md section 7).
func CheckURL(ctx context.Context, rawURL string, cfg Config) error {
	if len(rawURL) > MaxURLLength {
		return fmt.Errorf("%w: url is %d characters long, more than %d", ErrInvalidURL, len(rawURL), MaxURLLength)
	}
	u, err := url.Parse(rawURL)
	if err != nil || !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https") || u.Opaque != "" {
		return fmt.Errorf("%w: url must be an absolute http or https URL", ErrInvalidURL)
	}
	if u.User != nil {
		return fmt.Errorf("%w: url must not contain user information (user:password@)", ErrInvalidURL)
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("%w: url has no host", ErrInvalidURL)
	}
	port, err := urlPort(u)
	if err != nil {
		return err
	}
	p := cfg.policy()
	if p.allowPrivate && len(p.own) == 0 {
		return nil
	}
	resolver := cfg.Resolver
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	addrs, err := lookup(ctx, resolver, host)
	if err != nil {
		if p.allowPrivate {
			// Only the service's own addresses are refused, and a name
			// that resolves to nothing now is none of them; the dialer
			// looks again when it connects.
			return nil
		}
		return err
	}
	for _, addr := range addrs {
		if refusal := p.refuse(netip.AddrPortFrom(addr, port)); refusal != nil {
			return &RefusedError{Host: host, Addr: addr, Reason: refusal.reason, own: refusal.own}
		}
	}
	return nil
}

// HostRefused is what every refusal of a host name says, whether the name
// does not resolve, resolves to a non-public address, or to one of the
// service's own: told apart, the answers would let a caller probe which
// internal names exist (issue 42). The server's log tells them apart.
const HostRefused = "does not resolve, or only to addresses webhooks are not sent to (non-public ones, or this service's own)"

// RefusedError is CheckURL's refusal of a URL for the address its host is,
// or resolves to, or for a host name that does not resolve. Its text, meant
// for the client, names the host as the client wrote it and, for a host
// name, says the same whatever the reason (HostRefused): the address it
// resolved to, what kind of address that is, and whether it resolved at
// all would tell a caller about the network the service runs in. They are
// in the fields, for the server's own log.
type RefusedError struct {
	Host   string     // as written in the URL
	Addr   netip.Addr // the address refused; invalid when the name did not resolve
	Reason string     // what kind of address Addr is ("a link-local address", ...), or why the name did not resolve
	own    bool       // Addr is the service's own (Config.Own)
}

func (e *RefusedError) Error() string {
	literal := e.Addr.IsValid() && (e.Host == e.Addr.String() || e.Host == e.Addr.WithZone("").String())
	switch {
	case e.own && literal:
		return fmt.Sprintf("%v: url's host %s is an address of this service or of its Stripe simulator; webhooks are never sent to the service itself", ErrInvalidURL, e.Host)
	case literal:
		return fmt.Sprintf("%v: url's host %s is %s; webhooks are delivered only to public addresses", ErrInvalidURL, e.Host, e.Reason)
	default:
		return fmt.Sprintf("%v: url's host %q %s", ErrInvalidURL, e.Host, HostRefused)
	}
}

func (e *RefusedError) Unwrap() error { return ErrInvalidURL }

// urlPort is the port u connects to: its own, or its scheme's.
func urlPort(u *url.URL) (uint16, error) {
	s := u.Port()
	if s == "" {
		if u.Scheme == "https" {
			return 443, nil
		}
		return 80, nil
	}
	port, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("%w: url's port %q is not a port number", ErrInvalidURL, s)
	}
	return uint16(port), nil
}

// lookup returns host's addresses: itself when it is an IP literal, else
// every address the resolver answers.
func lookup(ctx context.Context, resolver *net.Resolver, host string) ([]netip.Addr, error) {
	if addr, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{addr}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	addrs, err := resolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		// The resolver's own message names our name server: it is for the
		// log only. The client reads what any refusal of a name reads.
		reason := "no address"
		if err != nil {
			reason = err.Error()
		}
		return nil, &RefusedError{Host: host, Reason: "does not resolve: " + reason}
	}
	return addrs, nil
}
