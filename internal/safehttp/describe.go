package safehttp

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"net/url"
	"syscall"
)

// Describe words an error of a request made with a client of this package
// for the owner of the endpoint it was sent to: it becomes a delivery's
// last_error, which the API and the console show. The error itself is for
// the service's log only: Go's text names the service's DNS resolver
// ("lookup h on 10.0.0.53:53: no such host") and the addresses a name
// resolved to ("dial tcp 10.1.2.3:443"), which would map the network the
// service runs in for whoever registers an endpoint. So the answer never
// contains an address the client did not write, and a name that does not
// resolve reads as one that resolves to an address refused (HostRefused):
// issue 42, docs/API.md section 7.
func Describe(err error, rawURL string) string {
	host := ""
	if u, perr := url.Parse(rawURL); perr == nil {
		host = u.Hostname()
	}
	_, literalErr := netip.ParseAddr(host)
	literal := literalErr == nil
	var dnsErr *net.DNSError
	var opErr *net.OpError
	var certErr *tls.CertificateVerificationError
	var netErr net.Error
	switch {
	case errors.Is(err, ErrNonPublicAddress) || errors.Is(err, ErrOwnAddress):
		if literal {
			// The address is the endpoint owner's own writing: what
			// kind it is may be said (the refusal's own text, without
			// the request and dial around it, names no address).
			var urlErr *url.Error
			inner := err
			if errors.As(inner, &urlErr) {
				inner = urlErr.Err
			}
			if errors.As(inner, &opErr) {
				inner = opErr.Err
			}
			return "no connection: " + inner.Error()
		}
		return "no connection: the endpoint's host " + HostRefused
	case errors.As(err, &dnsErr):
		return "no connection: the endpoint's host " + HostRefused
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()):
		return "no answer in time: the attempt timed out"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "no connection: the endpoint's host refused it"
	case errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH):
		return "no connection: the endpoint's host is unreachable"
	case errors.As(err, &certErr):
		// x509's text names the certificate's names and the URL's host,
		// both public: the endpoint's owner needs it to fix the server.
		return "the TLS handshake failed: " + certErr.Err.Error()
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "the connection was closed before an answer"
	case errors.Is(err, context.Canceled):
		return "the attempt was cut short: the service was stopping"
	default:
		var tlsAlert tls.AlertError
		var recordErr tls.RecordHeaderError
		if errors.As(err, &tlsAlert) || errors.As(err, &recordErr) {
			return "the TLS handshake failed"
		}
		return "the request failed before an answer"
	}
}
