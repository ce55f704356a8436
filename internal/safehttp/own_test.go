package safehttp

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs/API.md section 7: "The refusal does not tell what a host name
// resolved to." The answer names the host the caller wrote and says it is
// not public; the address, and what kind it is, stay on the server (in the
// error's fields, for a debug log line).
func TestCheckURL_doesNotTellWhatANameResolvedTo(t *testing.T) {
	t.Parallel()
	dns := newFakeDNS(map[string][]string{
		"meta.test":   {"::ffff:169.254.169.254"},
		"db.test":     {"10.20.30.40"},
		"mixed.test":  {"93.184.215.14", "fd00::1234"},
		"nat64.test":  {"64:ff9b::a00:2"},
		"public.test": {"93.184.215.14"},
	})
	for host, wantAddr := range map[string]string{
		"meta.test":  "::ffff:169.254.169.254",
		"db.test":    "10.20.30.40",
		"mixed.test": "fd00::1234",
		"nat64.test": "64:ff9b::a00:2",
	} {
		err := CheckURL(t.Context(), "https://"+host+"/hooks", Config{Resolver: dns.resolver(t)})
		require.ErrorIs(t, err, ErrInvalidURL, host)
		msg := err.Error()
		require.Contains(t, msg, `"`+host+`" is not a public address`)
		for _, leak := range []string{wantAddr, "169.254", "10.20", "fd00", "a00:2", "link-local", "private", "NAT64"} {
			require.NotContains(t, msg, leak, "%s: the answer tells nothing of what the name resolved to", host)
		}
		var refused *RefusedError
		require.ErrorAs(t, err, &refused, host)
		require.Equal(t, host, refused.Host)
		require.Equal(t, netip.MustParseAddr(wantAddr), refused.Addr, "the server keeps the detail, for its log")
		require.NotEmpty(t, refused.Reason)
	}
	// An IP literal is the caller's own writing: its class may be named.
	err := CheckURL(t.Context(), "http://169.254.169.254/latest/meta-data/", Config{})
	require.ErrorIs(t, err, ErrInvalidURL)
	require.Contains(t, err.Error(), "link-local")
	require.NoError(t, CheckURL(t.Context(), "https://public.test/hooks", Config{Resolver: dns.resolver(t)}))
}

// payments dev allows private addresses, but never those of the service
// itself or of its simulator (docs/API.md section 7): a webhook endpoint at
// the simulator's /_sim/reset would let any user reset Stripe's state, one
// at the service's own address would let events feed requests back into it.
func TestCheckURL_refusesTheServicesOwnAddressesEvenWhenPrivateIsAllowed(t *testing.T) {
	t.Parallel()
	dns := newFakeDNS(map[string][]string{
		"loop.test":  {"127.0.0.1"},
		"loop6.test": {"::1", "127.0.0.1"},
		"lan.test":   {"192.168.1.20"},
	})
	own := []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:8080"), netip.MustParseAddrPort("127.0.0.1:12111")}
	cfg := Config{AllowPrivate: true, Own: own, Resolver: dns.resolver(t)}
	for _, tc := range []struct {
		url     string
		refused bool
	}{
		{"http://127.0.0.1:12111/_sim/reset", true},
		{"http://127.0.0.1:8080/v1/payments", true},
		{"http://loop.test:12111/_sim/reset", true},
		{"http://loop6.test:8080/", true},
		{"http://[::ffff:127.0.0.1]:8080/", true},
		{"http://0.0.0.0:12111/", true},   // connecting to 0.0.0.0 reaches loopback
		{"http://127.0.0.2:8080/", true},  // another loopback address: this machine all the same
		{"http://localhost:12111/", true}, // the system's resolver
		{"http://127.0.0.1:9999/hooks", false},
		{"http://loop.test:3000/hooks", false},
		{"http://lan.test:8080/hooks", false},
		{"http://127.0.0.1/hooks", false}, // port 80
		{"https://127.0.0.1/hooks", false},
		{"http://nowhere.test:8080/", false}, // does not resolve now; the dialer checks again
	} {
		c := cfg
		if strings.Contains(tc.url, "localhost") {
			c.Resolver = nil
		}
		err := CheckURL(t.Context(), tc.url, c)
		if !tc.refused {
			require.NoError(t, err, tc.url)
			continue
		}
		require.ErrorIs(t, err, ErrInvalidURL, tc.url)
		require.Contains(t, err.Error(), "this service", tc.url)
		require.NotContains(t, err.Error(), "127.0.0.1:", tc.url)
	}
}

// The same at connect time: an endpoint whose name resolved elsewhere when
// it was created (or that was created by another process) gets nothing when
// it now points at the service's own address.
func TestClient_neverConnectsToTheServicesOwnAddresses(t *testing.T) {
	t.Parallel()
	self, selfHits := countingServer(t)
	other, otherHits := countingServer(t)
	selfAddr := netip.MustParseAddrPort(strings.TrimPrefix(self.URL, "http://"))
	_, selfPort, err := net.SplitHostPort(selfAddr.String())
	require.NoError(t, err)
	dns := newFakeDNS(map[string][]string{"hooks.rebind.test": {"127.0.0.1"}})
	client := NewClient(Config{AllowPrivate: true, Own: []netip.AddrPort{selfAddr}, Resolver: dns.resolver(t)})

	for _, u := range []string{self.URL + "/_sim/reset", "http://hooks.rebind.test:" + selfPort + "/", "http://0.0.0.0:" + selfPort + "/"} {
		_, err := client.Post(u, "application/json", strings.NewReader(`{}`))
		require.ErrorIs(t, err, ErrOwnAddress, u)
		require.False(t, errors.Is(err, ErrNonPublicAddress), "private addresses are allowed: the refusal is of the service's own")
	}
	require.Zero(t, selfHits.Load(), "nothing reached the service's own address")

	resp, err := client.Get(other.URL)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.EqualValues(t, 1, otherHits.Load(), "another loopback server is reached")
}
