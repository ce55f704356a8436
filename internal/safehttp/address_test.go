package safehttp

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every class of address the dialer must refuse, and public neighbours on
// either side of each IPv4 range, so an off-by-one prefix shows.
var (
	nonPublicV4 = []string{
		"0.0.0.0", "0.1.2.3", "0.255.255.255", // "this network"
		"10.0.0.1", "10.255.255.255", // private
		"100.64.0.0", "100.64.0.1", "100.127.255.255", // CGNAT shared space
		"127.0.0.1", "127.255.255.254", // loopback
		"169.254.0.1", "169.254.169.254", // link-local, the cloud metadata service
		"172.16.0.1", "172.31.255.255", // private
		"192.0.0.8", "192.0.0.255", // IETF protocol assignments
		"192.0.2.1",                      // TEST-NET-1
		"192.88.99.1",                    // deprecated 6to4 relay anycast
		"192.168.0.1", "192.168.255.255", // private
		"198.18.0.1", "198.19.255.255", // benchmarking
		"198.51.100.7",                 // TEST-NET-2
		"203.0.113.9",                  // TEST-NET-3
		"224.0.0.1", "239.255.255.250", // multicast
		"240.0.0.1", "254.255.255.255", // reserved
		"255.255.255.255", // broadcast
	}
	publicV4 = []string{
		"1.1.1.1", "8.8.8.8", "93.184.215.14",
		"1.0.0.0", "9.255.255.255", "11.0.0.0",
		"100.63.255.255", "100.128.0.0",
		"126.255.255.255", "128.0.0.0",
		"169.253.255.255", "169.255.0.0",
		"172.15.255.255", "172.32.0.0",
		"192.0.1.1", "192.0.3.0", "192.88.98.255", "192.88.100.0",
		"192.167.255.255", "192.169.0.0",
		"198.17.255.255", "198.20.0.0", "198.51.99.255", "198.51.101.0",
		"203.0.112.255", "203.0.114.0",
		"223.255.255.255",
	}
	nonPublicV6 = []string{
		"::", "::1", // unspecified, loopback
		"::127.0.0.1", "::8.8.8.8", // IPv4-compatible (deprecated): never a real destination
		"64:ff9b:1::1",            // local-use NAT64
		"100::1",                  // discard-only
		"2001::1",                 // Teredo
		"2001:2::1",               // benchmarking
		"2001:10::1",              // ORCHID
		"2001:20::1",              // ORCHIDv2
		"2001:db8::1",             // documentation
		"3fff::1",                 // documentation (RFC 9637)
		"5f00::1",                 // SRv6 SIDs
		"2002:7f00:1::1",          // 6to4 of 127.0.0.1
		"2002:a00:1::1",           // 6to4 of 10.0.0.1
		"2002:a9fe:a9fe::1",       // 6to4 of 169.254.169.254
		"fc00::1", "fd12:3456::1", // unique-local
		"fe80::1", "fe80::1%eth0", // link-local
		"fec0::1", // site-local (deprecated)
		"ff01::1", // interface-local multicast
		"ff02::1", // link-local multicast
		"ff0e::1", // global multicast
	}
	publicV6 = []string{
		"2606:4700:4700::1111", "2a00:1450:4001:80b::200e", "2001:4860:4860::8888",
		"2002:808:808::1", // 6to4 of 8.8.8.8
		"2001:db7:ffff::1", "2001:db9::1",
	}
)

func TestWhyNonPublic(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, s string, wantPublic bool) {
		t.Helper()
		addr := netip.MustParseAddr(s)
		why := whyNonPublic(addr)
		if wantPublic {
			require.Empty(t, why, "%s is public", s)
		} else {
			require.NotEmpty(t, why, "%s is not public", s)
		}
	}
	for _, s := range nonPublicV4 {
		check(t, s, false)
		// The same address as an IPv6 socket would see it, and as a NAT64
		// gateway would translate it: a v4 rule must not be dodged by
		// writing the address in v6.
		check(t, "::ffff:"+s, false)
		check(t, "64:ff9b::"+s, false)
	}
	for _, s := range publicV4 {
		check(t, s, true)
		check(t, "::ffff:"+s, true)
		check(t, "64:ff9b::"+s, true)
	}
	for _, s := range nonPublicV6 {
		check(t, s, false)
	}
	for _, s := range publicV6 {
		check(t, s, true)
	}
}

// Every way IPv6 has of carrying an IPv4 address, each tried with a
// non-public and a public IPv4 address: the v6 form is judged by the v4
// address inside (or, for the forms that are never a real destination,
// refused whatever it carries).
func TestWhyNonPublic_IPv6FormsOfIPv4(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr       string
		wantPublic bool
	}{
		// IPv4-mapped, ::ffff:0:0/96 (RFC 4291 section 2.5.5.2).
		{"::ffff:127.0.0.1", false},
		{"::ffff:7f00:1", false},
		{"::ffff:169.254.169.254", false},
		{"::ffff:8.8.8.8", true},
		// IPv4-translated, ::ffff:0:0:0/96 (RFC 2765 section 2.1, kept by
		// RFC 6145): what issue 28 found accepted.
		{"::ffff:0:7f00:1", false},
		{"::ffff:0:127.0.0.1", false},
		{"::ffff:0:a00:1", false},
		{"::ffff:0:a9fe:a9fe", false},
		{"::ffff:0:0:0", false},
		{"::ffff:0:808:808", true},
		// NAT64 well-known prefix, 64:ff9b::/96 (RFC 6052 section 2.1).
		{"64:ff9b::7f00:1", false},
		{"64:ff9b::10.0.0.1", false},
		{"64:ff9b::169.254.169.254", false},
		{"64:ff9b::808:808", true},
		// NAT64 local-use prefix, 64:ff9b:1::/48 (RFC 8215): where the v4
		// address sits depends on the operator's prefix length, so every
		// address in it is refused, a public one too.
		{"64:ff9b:1::7f00:1", false},
		{"64:ff9b:1:7f00:1::", false},
		{"64:ff9b:1::808:808", false},
		// 6to4, 2002::/16 (RFC 3056 section 2): the v4 address is bits 16-47.
		{"2002:7f00:1::", false},
		{"2002:a9fe:a9fe::1", false},
		{"2002:c0a8:101::1", false},
		{"2002:808:808::1", true},
		// IPv4-compatible, ::/96 (RFC 4291 section 2.5.5.1, deprecated):
		// never a real destination.
		{"::127.0.0.1", false},
		{"::10.0.0.1", false},
		{"::8.8.8.8", false},
		// Teredo, 2001::/32 (RFC 4380): refused whatever it carries.
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", false},
	} {
		why := whyNonPublic(netip.MustParseAddr(tc.addr))
		if tc.wantPublic {
			require.Empty(t, why, "%s is public", tc.addr)
		} else {
			require.NotEmpty(t, why, "%s is not public", tc.addr)
		}
	}
}

func TestWhyNonPublic_namesTheClass(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"127.0.0.1":        "loopback",
		"::ffff:127.0.0.1": "loopback",
		"10.1.2.3":         "private",
		"fd00::1":          "private",
		"169.254.169.254":  "link-local",
		"100.64.1.1":       "carrier-grade NAT",
		"0.0.0.0":          "unspecified",
		"224.0.0.1":        "multicast",
		"64:ff9b::a00:1":   "private",
	} {
		require.Contains(t, whyNonPublic(netip.MustParseAddr(addr)), want, addr)
	}
}
