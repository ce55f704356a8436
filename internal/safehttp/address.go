package safehttp

import (
	"net/netip"
)

// whyNonPublic says what kind of non-public address addr is ("a loopback
// address", ...), or "" when it is a public unicast address a webhook may be
// delivered to. IPv4 addresses written in IPv6 (mapped, NAT64, 6to4) are
// judged by the IPv4 address they carry.
func whyNonPublic(addr netip.Addr) string {
	addr = addr.WithZone("")
	if addr.Is4In6() {
		return whyNonPublic(addr.Unmap())
	}
	if addr.Is4() {
		return whyNonPublicV4(addr)
	}
	return whyNonPublicV6(addr)
}

// rangeClass is a special-purpose range and what to call an address in it.
type rangeClass struct {
	prefix netip.Prefix
	class  string
}

// The IPv4 ranges that netip's predicates do not cover, from IANA's
// special-purpose address registry: every range there that is not
// "globally reachable".
var specialV4 = []rangeClass{
	{netip.MustParsePrefix("0.0.0.0/8"), `a "this network" address`},
	{netip.MustParsePrefix("100.64.0.0/10"), "a carrier-grade NAT (shared) address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol assignment address"},
	{netip.MustParsePrefix("192.0.2.0/24"), "a documentation address"},
	{netip.MustParsePrefix("192.88.99.0/24"), "a deprecated 6to4 relay address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "a documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "a documentation address"},
	{netip.MustParsePrefix("255.255.255.255/32"), "the broadcast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
}

// The same for IPv6, except the ranges that embed an IPv4 address at a
// known place, which whyNonPublicV6 unwraps (embeddingV6). The forms that
// embed one but are never a real destination are refused outright here.
var specialV6 = []rangeClass{
	// IPv4-compatible, RFC 4291 section 2.5.5.1: deprecated, never routed.
	{netip.MustParsePrefix("::/96"), "an IPv4-compatible (deprecated) address"},
	// NAT64 local-use prefix, RFC 8215: where the IPv4 address sits depends
	// on the operator's prefix length, so no address in it is judged public.
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local-use NAT64 address"},
	{netip.MustParsePrefix("100::/64"), "a discard-only address"},
	// Teredo, RFC 4380: the IPv4 address it carries is obfuscated.
	{netip.MustParsePrefix("2001::/32"), "a Teredo tunnel address"},
	{netip.MustParsePrefix("2001:2::/48"), "a benchmarking address"},
	{netip.MustParsePrefix("2001:10::/28"), "an ORCHID address"},
	{netip.MustParsePrefix("2001:20::/28"), "an ORCHIDv2 address"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation address"},
	{netip.MustParsePrefix("3fff::/20"), "a documentation address"},
	{netip.MustParsePrefix("5f00::/16"), "a segment-routing (SRv6) address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local (deprecated) address"},
}

// embedding is an IPv6 range whose addresses carry an IPv4 address at a
// fixed place: a packet to one reaches (through a translator or a tunnel)
// the IPv4 address, so the address is judged by it.
type embedding struct {
	prefix netip.Prefix
	name   string
	at     int // the byte offset of the IPv4 address in the IPv6 one
}

// embeddingV6 are the IPv6 ranges that embed an IPv4 address at a known
// place. IPv4-mapped addresses (::ffff:0:0/96, RFC 4291 section 2.5.5.2)
// are unmapped by whyNonPublic before these are looked at.
var embeddingV6 = []embedding{
	// IPv4-translated, ::ffff:0:0:0/96 (RFC 2765 section 2.1, SIIT):
	// 0:0:0:0:ffff:0:a.b.c.d.
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "IPv4 translation", 12},
	// NAT64 well-known prefix, 64:ff9b::/96 (RFC 6052 section 2.1): the
	// IPv4 address is the last 32 bits.
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64", 12},
	// 6to4, 2002::/16 (RFC 3056 section 2): the IPv4 address is bits 16 to 47.
	{netip.MustParsePrefix("2002::/16"), "6to4", 2},
}

func whyNonPublicV4(addr netip.Addr) string {
	if class := whyNonPublicByPredicate(addr); class != "" {
		return class
	}
	return inRanges(addr, specialV4)
}

func whyNonPublicV6(addr netip.Addr) string {
	// Checked before the predicates: ::1 and :: are in ::/96 too, and their
	// own names say more.
	if class := whyNonPublicByPredicate(addr); class != "" {
		return class
	}
	b := addr.As16()
	for _, e := range embeddingV6 {
		if e.prefix.Contains(addr) {
			return embedded(netip.AddrFrom4([4]byte(b[e.at:e.at+4])), e.name)
		}
	}
	return inRanges(addr, specialV6)
}

// whyNonPublicByPredicate covers the classes net/netip knows, in both
// families. IsPrivate is RFC 1918 for IPv4 and unique-local fc00::/7 for IPv6.
func whyNonPublicByPredicate(addr netip.Addr) string {
	switch {
	case addr.IsUnspecified():
		return "the unspecified address"
	case addr.IsLoopback():
		return "a loopback address"
	case addr.IsPrivate():
		return "a private address"
	case addr.IsLinkLocalUnicast():
		return "a link-local address"
	case addr.IsInterfaceLocalMulticast(), addr.IsLinkLocalMulticast(), addr.IsMulticast():
		return "a multicast address"
	}
	return ""
}

func inRanges(addr netip.Addr, ranges []rangeClass) string {
	for _, r := range ranges {
		if r.prefix.Contains(addr) {
			return r.class
		}
	}
	return ""
}

// embedded judges an IPv6 address by the IPv4 address it translates to.
func embedded(v4 netip.Addr, how string) string {
	if class := whyNonPublicV4(v4); class != "" {
		// Without the IPv4 address: the class may be shown for an address
		// a host name resolved to (see ErrNonPublicAddress).
		return class + " (through " + how + ")"
	}
	return ""
}
