package safehttp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"time"
)

// ErrInvalidURL is wrapped by every error of CheckURL; the error's text is
// meant for the API's 400 validation_failed detail.
var ErrInvalidURL = errors.New("invalid webhook url")

const (
	// MaxURLLength is API.md section 7's limit on a webhook URL.
	MaxURLLength = 2048
	// resolveTimeout bounds the lookup at creation: a slow name server must
	// not hold an API request for long.
	resolveTimeout = 5 * time.Second
)

// CheckURL decides whether rawURL may be a webhook endpoint's URL. Unless
// allowPrivate, it resolves the host with the system's resolver and refuses
// the URL when any of its addresses is not public. This is the check at
// creation; the dialer checks again at every connection (see the package
// doc).
func CheckURL(ctx context.Context, rawURL string, allowPrivate bool) error {
	return checkURL(ctx, rawURL, allowPrivate, net.DefaultResolver)
}

func checkURL(ctx context.Context, rawURL string, allowPrivate bool, resolver *net.Resolver) error {
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
	if allowPrivate {
		return nil
	}
	addrs, err := lookup(ctx, resolver, host)
	if err != nil {
		return err
	}
	for _, addr := range addrs {
		if class := whyNonPublic(addr); class != "" {
			return fmt.Errorf("%w: url's host %s is %s; webhooks are delivered only to public addresses",
				ErrInvalidURL, describeHost(host, addr), class)
		}
	}
	return nil
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
		// The resolver's own message names our name server: not for users.
		return nil, fmt.Errorf("%w: url's host %q does not resolve to any address", ErrInvalidURL, host)
	}
	return addrs, nil
}

func describeHost(host string, addr netip.Addr) string {
	if host == addr.String() {
		return host
	}
	return fmt.Sprintf("%q (%s)", host, addr)
}
