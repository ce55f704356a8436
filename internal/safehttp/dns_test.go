package safehttp

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// fakeDNS is a name server in memory: a *net.Resolver whose queries it
// answers from a table that the test may change between lookups, as a
// rebinding attacker's server would. Names not in the table get NXDOMAIN.
type fakeDNS struct {
	mu      sync.Mutex
	answers map[string][]netip.Addr // by lower-case name, without the final dot
}

func newFakeDNS(answers map[string][]string) *fakeDNS {
	d := &fakeDNS{}
	d.set(answers)
	return d
}

func (d *fakeDNS) set(answers map[string][]string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.answers = map[string][]netip.Addr{}
	for name, addrs := range answers {
		for _, a := range addrs {
			d.answers[name] = append(d.answers[name], netip.MustParseAddr(a))
		}
	}
}

// resolver returns a pure-Go resolver that sends every query to d over an
// in-memory stream (DNS over TCP framing: a 2-byte length, then the message).
func (d *fakeDNS) resolver(t *testing.T) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		client, server := net.Pipe()
		go d.serve(t, server)
		return client, nil
	}}
}

func (d *fakeDNS) serve(t *testing.T, conn net.Conn) {
	defer conn.Close()
	for {
		var size [2]byte
		if _, err := io.ReadFull(conn, size[:]); err != nil {
			return
		}
		query := make([]byte, binary.BigEndian.Uint16(size[:]))
		if _, err := io.ReadFull(conn, query); err != nil {
			return
		}
		answer, err := d.answer(query)
		if err != nil {
			t.Errorf("fake DNS: %v", err)
			return
		}
		framed := binary.BigEndian.AppendUint16(nil, uint16(len(answer)))
		if _, err := conn.Write(append(framed, answer...)); err != nil {
			return
		}
	}
}

// answer builds the reply by hand (RFC 1035, section 4): the query's header
// and question, then one A or AAAA record per address of the asked type.
func (d *fakeDNS) answer(query []byte) ([]byte, error) {
	const headerLen = 12
	if len(query) < headerLen {
		return nil, fmt.Errorf("query of %d bytes", len(query))
	}
	var labels []string
	i := headerLen
	for i < len(query) && query[i] != 0 {
		n := int(query[i])
		if i+1+n > len(query) {
			return nil, fmt.Errorf("truncated name")
		}
		labels = append(labels, string(query[i+1:i+1+n]))
		i += 1 + n
	}
	questionEnd := i + 1 + 4 // the root label, QTYPE, QCLASS
	if questionEnd > len(query) {
		return nil, fmt.Errorf("truncated question")
	}
	qtype := binary.BigEndian.Uint16(query[i+1:])
	d.mu.Lock()
	addrs, known := d.answers[strings.ToLower(strings.Join(labels, "."))]
	d.mu.Unlock()

	var records []byte
	count := 0
	for _, a := range addrs {
		var typ uint16
		var data []byte
		switch {
		case a.Is4() && qtype == 1: // A
			typ, data = 1, a.AsSlice()
		case a.Is6() && qtype == 28: // AAAA
			typ, data = 28, a.AsSlice()
		default:
			continue
		}
		records = append(records, 0xC0, headerLen) // the name: a pointer to the question's
		records = binary.BigEndian.AppendUint16(records, typ)
		records = binary.BigEndian.AppendUint16(records, 1) // class IN
		records = binary.BigEndian.AppendUint32(records, 0) // TTL: never cache
		records = binary.BigEndian.AppendUint16(records, uint16(len(data)))
		records = append(records, data...)
		count++
	}
	flags := uint16(0x8400) // a response, authoritative
	if !known {
		flags |= 3 // NXDOMAIN
	}
	reply := binary.BigEndian.AppendUint16(nil, binary.BigEndian.Uint16(query)) // the query's id
	reply = binary.BigEndian.AppendUint16(reply, flags)
	reply = binary.BigEndian.AppendUint16(reply, 1) // one question
	reply = binary.BigEndian.AppendUint16(reply, uint16(count))
	reply = binary.BigEndian.AppendUint32(reply, 0) // no authority, no additional records
	reply = append(reply, query[headerLen:questionEnd]...)
	return append(reply, records...), nil
}
