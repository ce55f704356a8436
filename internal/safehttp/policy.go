package safehttp

import (
	"net"
	"net/netip"
)

// policy is the one decision CheckURL (at creation) and the dialer (at every
// connection) both make: may a webhook be sent to this address and port?
type policy struct {
	allowPrivate bool
	own          []netip.AddrPort
}

func (cfg Config) policy() policy {
	return policy{allowPrivate: cfg.AllowPrivate, own: cfg.Own}
}

// refusal is why an address may not be reached.
type refusal struct {
	reason string // what kind of address it is
	own    bool   // it is the service's own
}

// refuse says why ap may not be reached, or nil when it may.
func (p policy) refuse(ap netip.AddrPort) *refusal {
	if p.isOwn(ap) {
		return &refusal{reason: "an address of this service or of its Stripe simulator", own: true}
	}
	if p.allowPrivate {
		return nil
	}
	if class := whyNonPublic(ap.Addr()); class != "" {
		return &refusal{reason: class}
	}
	return nil
}

// isOwn reports whether a connection to ap could reach one of the service's
// own listeners: the same address and port, or the port of one on any
// address of this machine. The second is broader than needed (a listener on
// 127.0.0.1:8080 is not reached through 127.0.0.2:8080), but a listener on
// 0.0.0.0 or [::] is reached through every one of them, and connecting to
// 0.0.0.0 reaches loopback: matching the port on every local address is the
// simple rule that holds for all.
func (p policy) isOwn(ap netip.AddrPort) bool {
	if len(p.own) == 0 {
		return false
	}
	addr := ap.Addr().Unmap().WithZone("")
	for _, o := range p.own {
		if o.Port() != ap.Port() {
			continue
		}
		if o.Addr().Unmap().WithZone("") == addr || onThisMachine(addr) {
			return true
		}
	}
	return false
}

// onThisMachine reports whether addr is one of this machine's: loopback,
// the unspecified address (which a connection takes for loopback), or an
// address of one of its interfaces.
func onThisMachine(addr netip.Addr) bool {
	if addr.IsLoopback() || addr.IsUnspecified() {
		return true
	}
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // cannot tell: fail closed
	}
	for _, a := range ifaddrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == addr {
				return true
			}
		}
	}
	return false
}
