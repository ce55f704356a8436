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

// The same for IPv6, except the ranges that embed an IPv4 address, which
// whyNonPublicV6 unwraps.
var specialV6 = []rangeClass{
	{netip.MustParsePrefix("::/96"), "an IPv4-compatible (deprecated) address"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local-use NAT64 address"},
	{netip.MustParsePrefix("100::/64"), "a discard-only address"},
	{netip.MustParsePrefix("2001::/32"), "a Teredo tunnel address"},
	{netip.MustParsePrefix("2001:2::/48"), "a benchmarking address"},
	{netip.MustParsePrefix("2001:10::/28"), "an ORCHID address"},
	{netip.MustParsePrefix("2001:20::/28"), "an ORCHIDv2 address"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation address"},
	{netip.MustParsePrefix("3fff::/20"), "a documentation address"},
	{netip.MustParsePrefix("5f00::/16"), "a segment-routing (SRv6) address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local (deprecated) address"},
}

var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96") // RFC 6052: the IPv4 address is the last 32 bits
	sixTo4 = netip.MustParsePrefix("2002::/16")    // RFC 3056: the IPv4 address is bits 16 to 47
)

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
	switch {
	case nat64.Contains(addr):
		return embedded(netip.AddrFrom4([4]byte(b[12:16])), "NAT64")
	case sixTo4.Contains(addr):
		return embedded(netip.AddrFrom4([4]byte(b[2:6])), "6to4")
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
		return class + " (" + v4.String() + " through " + how + ")"
	}
	return ""
}
