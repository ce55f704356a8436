// Package smtptest is a fake SMTP server for tests and the chaos run: a real
// TCP listener speaking enough SMTP (RFC 5321) for a real client, whose
// behaviour a test switches at any time: accept, answer slowly, hang, or
// fail. It records every message it accepted, so a test can count copies
// per Message-ID and see whether a receipt was sent twice.
//
// A message counts as accepted at the moment the server decides to answer
// 250 to the end of its DATA, whether or not the client is still there to
// read the answer: that is when a real server has taken responsibility for
// it, and the moment a client that gave up too early sends a duplicate.
//
// It must never be used to deliver mail: it keeps messages in memory only.
// It imports no testing package, so a chaos binary can run it as its own
// listener (Start), and a test in any package can (NewServer in a test
// plus t.Cleanup(srv.Close)).
package smtptest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"fmt"
	"io"
	"math/big"
	"mime"
	"net"
	"net/mail"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Mode is how the server treats a connection.
type Mode int

// The modes.
const (
	// Accept answers every command at once (after Delay, for the end of
	// DATA) and accepts every message.
	Accept Mode = iota
	// HangOnConnect accepts the TCP connection and never says a word: not
	// even the greeting. A client without a deadline waits forever.
	HangOnConnect
	// HangOnData reads the whole message and never answers its end: the
	// message is not accepted.
	HangOnData
	// HangAfterAccept accepts the message (answers 250 to the end of DATA)
	// and then answers nothing more (RSET, QUIT): the client's send is done,
	// its goodbye hangs.
	HangAfterAccept
	// Fail answers the end of DATA with FailCode, FailTimes times (every
	// time when FailTimes is 0), then accepts.
	Fail
)

func (m Mode) String() string {
	switch m {
	case Accept:
		return "accept"
	case HangOnConnect:
		return "hang-on-connect"
	case HangOnData:
		return "hang-on-data"
	case HangAfterAccept:
		return "hang-after-accept"
	case Fail:
		return "fail"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Behaviour is what the server does with the next connections.
type Behaviour struct {
	Mode Mode
	// Delay is how long the server waits before answering the end of
	// DATA (Accept, Fail, HangAfterAccept): a slow server.
	Delay time.Duration
	// FailCode is the answer to the end of DATA in Fail mode. Default 451
	// (a temporary failure; 5xx are permanent).
	FailCode int
	// FailTimes is how many messages Fail refuses before it accepts; 0
	// refuses all.
	FailTimes int
}

// Config configures a Server.
type Config struct {
	// Addr is where it listens. Default 127.0.0.1:0 (a free port).
	Addr string
	// ImplicitTLS makes it speak TLS from the first byte (smtps://), with a
	// certificate made at start for 127.0.0.1 and localhost; clients trust
	// it through ClientTLSConfig.
	ImplicitTLS bool
	// Username and Password, when set, make it advertise AUTH PLAIN and
	// refuse mail from a client that did not authenticate with them.
	Username, Password string
	// From is the from= of URL. Default receipts@example.com.
	From string
	// Behaviour is the starting behaviour. Default Accept.
	Behaviour Behaviour
}

// Message is one message the server accepted.
type Message struct {
	From      string
	To        []string
	MessageID string // the Message-ID header, as sent (with its <>)
	Subject   string // decoded from its RFC 2047 encoding
	Header    mail.Header
	Body      string
	Raw       []byte
	Accepted  time.Time
}

// Server is a running fake SMTP server.
type Server struct {
	cfg       Config
	ln        net.Listener
	clientTLS *tls.Config

	mu          sync.Mutex
	behaviour   Behaviour
	failed      int // messages refused under the current Fail behaviour
	accepted    []Message
	connections int
	goodbyes    int
	conns       map[net.Conn]struct{}
	closed      bool
	done        chan struct{} // closed by Close: ends a Delay early

	wg sync.WaitGroup
}

// Start starts a server and returns once it listens.
func Start(cfg Config) (*Server, error) {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.From == "" {
		cfg.From = "receipts@example.com"
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, behaviour: cfg.Behaviour, conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	if cfg.ImplicitTLS {
		serverTLS, clientTLS, err := selfSigned()
		if err != nil {
			ln.Close()
			return nil, err
		}
		ln = tls.NewListener(ln, serverTLS)
		s.clientTLS = clientTLS
	}
	s.ln = ln
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is an SMTP_URL for the server: smtp:// or smtps://, with the
// credentials and from= of its Config.
func (s *Server) URL() string {
	u := url.URL{Scheme: "smtp", Host: s.Addr(), RawQuery: url.Values{"from": {s.cfg.From}}.Encode()}
	if s.cfg.ImplicitTLS {
		u.Scheme = "smtps"
	}
	if s.cfg.Username != "" {
		u.User = url.UserPassword(s.cfg.Username, s.cfg.Password)
	}
	return u.String()
}

// ClientTLSConfig trusts the server's certificate (ImplicitTLS), and nil
// without TLS.
func (s *Server) ClientTLSConfig() *tls.Config {
	if s.clientTLS == nil {
		return nil
	}
	return s.clientTLS.Clone()
}

// SetBehaviour changes what the server does from now on, for new
// connections and for commands still to come on open ones.
func (s *Server) SetBehaviour(b Behaviour) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.behaviour, s.failed = b, 0
}

// Accepted is every message accepted so far, in order.
func (s *Server) Accepted() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.accepted...)
}

// CountByMessageID says how many copies of each Message-ID were accepted.
func (s *Server) CountByMessageID() map[string]int {
	counts := map[string]int{}
	for _, m := range s.Accepted() {
		counts[m.MessageID]++
	}
	return counts
}

// Duplicates is the Message-IDs accepted more than once, each with its count.
func (s *Server) Duplicates() map[string]int {
	dups := map[string]int{}
	for id, n := range s.CountByMessageID() {
		if n > 1 {
			dups[id] = n
		}
	}
	return dups
}

// Connections is how many connections the server has taken.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connections
}

// HungGoodbyes is how many clients, in HangAfterAccept, read the 250 that
// accepted their message and went on to their goodbye (RSET or QUIT),
// which the server leaves unanswered. Past this point the client's send
// is done; Accepted alone only says the server took the message, not that
// the client heard so.
func (s *Server) HungGoodbyes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.goodbyes
}

// OpenConnections is how many connections are open now (a hung server
// holds them until the client gives up).
func (s *Server) OpenConnections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Close stops listening, drops every open connection (which ends any
// hang) and waits for the connections' goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	if !s.closed {
		close(s.done)
	}
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	err := s.ln.Close()
	s.wg.Wait()
	return err
}

func (s *Server) serve() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			conn.Close()
			return
		}
		s.conns[conn] = struct{}{}
		s.connections++
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.conns, conn)
				s.mu.Unlock()
				conn.Close()
			}()
			s.session(conn)
		}()
	}
}

func (s *Server) current() Behaviour {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.behaviour
}

// hang waits until the client or Close drops the connection.
func hang(conn net.Conn) { _, _ = io.Copy(io.Discard, conn) }

// session speaks SMTP on one connection until QUIT, an error, or a hang.
func (s *Server) session(conn net.Conn) {
	if s.current().Mode == HangOnConnect {
		hang(conn)
		return
	}
	tp := textproto.NewConn(conn)
	reply := func(code int, msg string) bool { return tp.PrintfLine("%d %s", code, msg) == nil }
	if !reply(220, "smtptest ESMTP ready") {
		return
	}
	var (
		from          string
		to            []string
		authenticated = s.cfg.Username == ""
		hangNext      bool
	)
	for {
		line, err := tp.ReadLine()
		if err != nil {
			return
		}
		if hangNext {
			s.mu.Lock()
			s.goodbyes++
			s.mu.Unlock()
			hang(conn)
			return
		}
		verb, arg, _ := strings.Cut(line, " ")
		switch strings.ToUpper(verb) {
		case "EHLO":
			exts := []string{"smtptest", "8BITMIME", "ENHANCEDSTATUSCODES"}
			if s.cfg.Username != "" {
				exts = append(exts, "AUTH PLAIN")
			}
			for i, e := range exts {
				sep := "-"
				if i == len(exts)-1 {
					sep = " "
				}
				if tp.PrintfLine("250%s%s", sep, e) != nil {
					return
				}
			}
		case "HELO":
			reply(250, "smtptest")
		case "AUTH":
			if s.checkPlainAuth(arg) {
				authenticated = true
				reply(235, "2.7.0 authenticated")
			} else {
				reply(535, "5.7.8 authentication failed")
			}
		case "MAIL":
			if !authenticated {
				reply(530, "5.7.0 authentication required")
				continue
			}
			from, to = addressOf(arg), nil
			reply(250, "2.1.0 ok")
		case "RCPT":
			to = append(to, addressOf(arg))
			reply(250, "2.1.5 ok")
		case "DATA":
			if from == "" || len(to) == 0 {
				reply(503, "5.5.1 MAIL and RCPT first")
				continue
			}
			if !reply(354, "end data with <CR><LF>.<CR><LF>") {
				return
			}
			raw, err := io.ReadAll(tp.DotReader())
			if err != nil {
				return
			}
			if !s.answerData(conn, tp, from, to, raw, &hangNext) {
				return
			}
			from, to = "", nil
		case "RSET":
			from, to = "", nil
			reply(250, "2.0.0 ok")
		case "NOOP":
			reply(250, "2.0.0 ok")
		case "QUIT":
			reply(221, "2.0.0 bye")
			return
		default:
			reply(502, "5.5.2 command not implemented")
		}
	}
}

// answerData answers the end of a message's DATA as the behaviour says,
// recording the message if it accepts it. It returns false when the
// session is over.
func (s *Server) answerData(conn net.Conn, tp *textproto.Conn, from string, to []string, raw []byte, hangNext *bool) bool {
	b := s.current()
	if b.Mode == HangOnData {
		hang(conn)
		return false
	}
	if b.Delay > 0 {
		t := time.NewTimer(b.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.done:
			return false
		}
	}
	if b.Mode == Fail && s.refuse(b) {
		code := b.FailCode
		if code == 0 {
			code = 451
		}
		return tp.PrintfLine("%d %d.0.0 smtptest refuses this message", code, code/100) == nil
	}
	s.record(from, to, raw)
	*hangNext = b.Mode == HangAfterAccept
	return tp.PrintfLine("250 2.0.0 ok: queued") == nil
}

// refuse counts one more refusal under b, unless b's FailTimes are used up.
func (s *Server) refuse(b Behaviour) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.FailTimes > 0 && s.failed >= b.FailTimes {
		return false
	}
	s.failed++
	return true
}

func (s *Server) record(from string, to []string, raw []byte) {
	m := Message{From: from, To: to, Raw: raw, Accepted: time.Now()}
	if parsed, err := mail.ReadMessage(bytes.NewReader(raw)); err == nil {
		m.Header = parsed.Header
		m.MessageID = parsed.Header.Get("Message-Id")
		m.Subject = parsed.Header.Get("Subject")
		if decoded, err := new(mime.WordDecoder).DecodeHeader(m.Subject); err == nil {
			m.Subject = decoded
		}
		body, _ := io.ReadAll(parsed.Body)
		m.Body = string(body)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.accepted = append(s.accepted, m)
}

func (s *Server) checkPlainAuth(arg string) bool {
	mech, initial, _ := strings.Cut(arg, " ")
	if !strings.EqualFold(mech, "PLAIN") {
		return false
	}
	decoded, err := base64.StdEncoding.DecodeString(initial)
	if err != nil {
		return false
	}
	parts := strings.Split(string(decoded), "\x00")
	return len(parts) == 3 && parts[1] == s.cfg.Username && parts[2] == s.cfg.Password
}

// addressOf takes the address out of "FROM:<a@b> SIZE=..." or "TO:<a@b>".
func addressOf(arg string) string {
	_, rest, _ := strings.Cut(arg, ":")
	rest = strings.TrimSpace(rest)
	if i := strings.IndexByte(rest, '>'); strings.HasPrefix(rest, "<") && i > 0 {
		return rest[1:i]
	}
	addr, _, _ := strings.Cut(rest, " ")
	return addr
}

// selfSigned makes a certificate for 127.0.0.1 and localhost, and the
// client configuration that trusts it.
func selfSigned() (server, client *tls.Config, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "smtptest"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	server = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}}, MinVersion: tls.VersionTLS12}
	client = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	return server, client, nil
}
