package safehttp

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

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
		require.Contains(t, msg, `"`+host+`" `+HostRefused)
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

// Issue 42, item 7: "does not resolve" and "not a public address" answered
// differently, so whoever creates endpoints could probe which internal names
// exist. Every refusal of a host name now reads the same, at creation and in
// a delivery's record, and neither names the resolver or an address.
func TestRefusals_ofANameReadTheSameWhetherOrNotItResolves(t *testing.T) {
	t.Parallel()
	dns := newFakeDNS(map[string][]string{
		"internal.test": {"10.20.30.40"},
		"meta.test":     {"169.254.169.254"},
		"self.test":     {"127.0.0.1"},
	})
	own := []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:8080")}
	strict := Config{Resolver: dns.resolver(t), Own: own, Timeout: 5 * time.Second}

	// At creation: the detail, with the host's name taken out.
	var details []string
	for _, host := range []string{"internal.test", "meta.test", "self.test", "nowhere.test"} {
		err := CheckURL(t.Context(), "http://"+host+":8080/hooks", strict)
		require.ErrorIs(t, err, ErrInvalidURL, host)
		details = append(details, strings.ReplaceAll(err.Error(), host, "HOST"))
		for _, leak := range []string{"10.20", "169.254", "127.0.0.1", "lookup", ":53", "no such host", "private", "link-local", "loopback"} {
			require.NotContains(t, err.Error(), leak, host)
		}
	}
	for _, d := range details[1:] {
		require.Equal(t, details[0], d, "every refusal of a name reads the same")
	}

	// At delivery, through the client's real errors: a name that resolves
	// to a private address, to the service's own, or not at all.
	var records []string
	for _, tc := range []struct {
		host string
		cfg  Config
	}{
		{"internal.test", strict},
		{"self.test", Config{AllowPrivate: true, Own: own, Resolver: dns.resolver(t)}},
		{"nowhere.test", strict},
		{"nowhere.test", Config{AllowPrivate: true, Resolver: dns.resolver(t)}},
	} {
		u := "http://" + tc.host + ":8080/hooks"
		_, err := NewClient(tc.cfg).Post(u, "application/json", strings.NewReader(`{}`))
		require.Error(t, err, tc.host)
		record := Describe(err, u)
		records = append(records, record)
		for _, leak := range []string{"10.20", "127.0.0.1", "lookup", ":53", "no such host", "dial", "private", "loopback"} {
			require.NotContains(t, record, leak, "%s: %s (from %v)", tc.host, record, err)
		}
	}
	for _, r := range records[1:] {
		require.Equal(t, records[0], r, "every refusal of a name reads the same in a delivery's record")
	}
	require.Contains(t, records[0], HostRefused)

	// An address the URL itself gives may be named by kind: it is the
	// endpoint owner's own writing.
	_, err := NewClient(strict).Get("http://10.1.2.3/hooks")
	require.Contains(t, Describe(err, "http://10.1.2.3/hooks"), "private")
}

// A delivery's other failures are worded without an address either.
func TestDescribe_failuresOfAConnectionNameNoAddress(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "http://" + ln.Addr().String() + "/hooks"
	require.NoError(t, ln.Close())
	_, err = NewClient(Config{AllowPrivate: true}).Get(closed)
	require.Error(t, err)
	require.Equal(t, "no connection: the endpoint's host refused it", Describe(err, closed))

	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	t.Cleanup(func() { close(release); slow.Close() })
	_, err = NewClient(Config{AllowPrivate: true, Timeout: 100 * time.Millisecond}).Get(slow.URL)
	require.Error(t, err)
	require.Equal(t, "no answer in time: the attempt timed out", Describe(err, slow.URL))
	require.NotContains(t, Describe(err, slow.URL), "127.0.0.1")
}
