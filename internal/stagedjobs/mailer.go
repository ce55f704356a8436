package stagedjobs

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wneessen/go-mail"
	"github.com/wneessen/go-mail/smtp"
)

// Message is an email.
type Message struct {
	To      string
	Subject string
	Body    string
	// MessageID is the Message-ID header's value, without its <> (and,
	// without an @, the SMTP mailer adds its From address's domain). It
	// stays the same for every attempt at the same receipt, so a receiver
	// can tell a second copy from a new receipt.
	MessageID string
}

// Mailer sends email. Send must return by ctx's deadline, and must return
// nil once the mail server accepted the message, even if something after
// the acceptance (the goodbye) failed: the receipt worker records a nil
// as "sent, never again".
type Mailer interface {
	Send(ctx context.Context, m Message) error
}

// ErrBadMessage wraps a message that no attempt can send (an address the
// mail library refuses): retrying it is pointless.
var ErrBadMessage = errors.New("message cannot be sent")

// NewMailer returns an SMTP mailer for smtpURL (see ParseSMTPURL) that
// waits as long as timeouts say (zero fields: RFC 5321's, see
// SMTPTimeouts), or, when smtpURL is empty, a mailer that only logs what it
// would send.
func NewMailer(smtpURL string, timeouts SMTPTimeouts, log *slog.Logger) (Mailer, error) {
	if smtpURL == "" {
		return LogMailer{Log: log}, nil
	}
	cfg, err := ParseSMTPURL(smtpURL)
	if err != nil {
		return nil, err
	}
	cfg.Timeouts = timeouts
	return NewSMTPMailer(cfg), nil
}

// SMTPTimeouts are how long an SMTPMailer waits for each step of a
// conversation. The defaults are the client's minimum per-command timeouts
// of RFC 5321, section 4.5.3.2 ("Timeouts"): a client that gives up
// sooner on a server that is only slow sends the message again, and, at
// the end of DATA, the server may have accepted it meanwhile. Section
// 4.5.3.2.6 says so: "A spurious timeout at this point would be very
// wasteful and would typically result in delivery of multiple copies of
// the message, since it has been successfully sent and the server has
// accepted responsibility for delivery."
type SMTPTimeouts struct {
	// Command bounds, each: the connection and the server's greeting
	// (4.5.3.2.1, "Initial 220 Message: 5 Minutes"); EHLO, STARTTLS and
	// AUTH together (the RFC names no timeout for them); MAIL (4.5.3.2.2,
	// "MAIL Command: 5 Minutes"); and each RCPT (4.5.3.2.3, "RCPT Command:
	// 5 Minutes"). Default 5 minutes (PAYMENTS_SMTP_COMMAND_TIMEOUT).
	Command time.Duration
	// DataInit bounds the reply to DATA (4.5.3.2.4, "DATA Initiation: 2
	// Minutes"). Default 2 minutes.
	DataInit time.Duration
	// DataBlock bounds writing the message (4.5.3.2.5, "Data Block: 3
	// Minutes", for each TCP SEND; here for the whole message, which a
	// receipt's few kilobytes fit). Default 3 minutes.
	DataBlock time.Duration
	// DataTermination bounds the reply to the end of the message, the
	// "." (4.5.3.2.6, "DATA Termination: 10 Minutes"): the server may
	// deliver the message before it answers. Default 10 minutes
	// (PAYMENTS_SMTP_DATA_TIMEOUT).
	DataTermination time.Duration
}

// The defaults of SMTPTimeouts: RFC 5321, section 4.5.3.2.
const (
	DefaultSMTPCommandTimeout         = 5 * time.Minute  // 4.5.3.2.1-3
	DefaultSMTPDataInitTimeout        = 2 * time.Minute  // 4.5.3.2.4
	DefaultSMTPDataBlockTimeout       = 3 * time.Minute  // 4.5.3.2.5
	DefaultSMTPDataTerminationTimeout = 10 * time.Minute // 4.5.3.2.6
)

func (t SMTPTimeouts) withDefaults() SMTPTimeouts {
	if t.Command <= 0 {
		t.Command = DefaultSMTPCommandTimeout
	}
	if t.DataInit <= 0 {
		t.DataInit = DefaultSMTPDataInitTimeout
	}
	if t.DataBlock <= 0 {
		t.DataBlock = DefaultSMTPDataBlockTimeout
	}
	if t.DataTermination <= 0 {
		t.DataTermination = DefaultSMTPDataTerminationTimeout
	}
	return t
}

// total is the longest a send to one recipient can take: the connection
// and greeting, then EHLO, STARTTLS and AUTH, then MAIL and RCPT, each a
// Command; DATA, the message and its end. The QUIT after an accepted
// message is not counted: the message is sent by then.
func (t SMTPTimeouts) total() time.Duration {
	return 4*t.Command + t.DataInit + t.DataBlock + t.DataTermination
}

// LogMailer logs each message instead of sending it: the default in dev.
type LogMailer struct{ Log *slog.Logger }

// Send logs m.
func (l LogMailer) Send(ctx context.Context, m Message) error {
	l.Log.InfoContext(ctx, "email (not sent: SMTP_URL is not set)", slog.String("to", m.To),
		slog.String("subject", m.Subject), slog.String("message_id", m.MessageID), slog.String("body", m.Body))
	return nil
}

// SMTPConfig is where and how an SMTPMailer sends.
type SMTPConfig struct {
	Host string
	Port int
	// ImplicitTLS speaks TLS from the first byte (smtps://, port 465).
	// Without it, the mailer upgrades with STARTTLS when the server offers
	// it, and sends in the clear when it does not; credentials are then
	// refused by the library unless the server is on loopback.
	ImplicitTLS        bool
	Username, Password string
	From               string
	// TLSConfig verifies the server (implicit TLS and STARTTLS alike).
	// Default: the system's roots, for Host.
	TLSConfig *tls.Config
	// Timeouts are how long each step may take (zero fields: RFC 5321's).
	Timeouts SMTPTimeouts
}

// ParseSMTPURL reads SMTP_URL: smtp://user:password@host:port?from=address
// or smtps://... for implicit TLS. The port defaults to 25 (smtp) or 465
// (smtps), from to receipts@host.
func ParseSMTPURL(raw string) (SMTPConfig, error) {
	const form = "SMTP_URL must look like smtp://user:password@host:port?from=address (or smtps://... for implicit TLS)"
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "smtp" && u.Scheme != "smtps") || u.Hostname() == "" {
		return SMTPConfig{}, errors.New(form)
	}
	cfg := SMTPConfig{Host: u.Hostname(), Port: 25, ImplicitTLS: u.Scheme == "smtps", From: u.Query().Get("from")}
	if cfg.ImplicitTLS {
		cfg.Port = 465
	}
	if p := u.Port(); p != "" {
		if cfg.Port, err = strconv.Atoi(p); err != nil || cfg.Port < 1 || cfg.Port > 65535 {
			return SMTPConfig{}, errors.New(form)
		}
	}
	if cfg.From == "" {
		cfg.From = "receipts@" + cfg.Host
	}
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
	}
	return cfg, nil
}

// SMTPMailer sends through an SMTP server with wneessen/go-mail, which
// encodes headers (a non-ASCII subject or name) as RFC 2047 says.
type SMTPMailer struct{ cfg SMTPConfig }

// NewSMTPMailer returns a mailer for cfg.
func NewSMTPMailer(cfg SMTPConfig) *SMTPMailer {
	if cfg.TLSConfig == nil {
		cfg.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	} else {
		cfg.TLSConfig = cfg.TLSConfig.Clone()
	}
	if cfg.TLSConfig.ServerName == "" {
		cfg.TLSConfig.ServerName = cfg.Host
	}
	cfg.Timeouts = cfg.Timeouts.withDefaults()
	return &SMTPMailer{cfg: cfg}
}

// MaxSendTime is the longest one Send can take when ctx allows it: every
// step's timeout, one after the other (35 minutes by default). The receipt
// worker gives a send that long.
func (s *SMTPMailer) MaxSendTime() time.Duration { return s.cfg.Timeouts.total() }

// quitTimeout bounds the QUIT after an accepted message: the message is
// sent whatever the answer, so nothing is worth waiting for.
const quitTimeout = 5 * time.Second

// Send sends m on a connection of its own, each step within its timeout
// (SMTPTimeouts), and returns by ctx's deadline at the latest, or as soon
// as ctx is cancelled: the connection's deadlines never pass ctx's. A
// message the server accepted is sent, whatever happens afterwards.
//
// go-mail dials, greets and authenticates (under Command, per its
// WithTimeout); the mail transaction is driven here, step by step, because
// go-mail's own Send gives the whole transaction one deadline: it cannot
// wait ten minutes for the end of DATA and a few for the rest.
func (s *SMTPMailer) Send(ctx context.Context, m Message) error {
	msg, err := s.message(m)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	dial := &ctxDialer{ctx: ctx, implicitTLS: s.cfg.ImplicitTLS, tlsConfig: s.cfg.TLSConfig}
	defer dial.release()
	opts := []mail.Option{
		mail.WithPort(s.cfg.Port), mail.WithTimeout(s.cfg.Timeouts.Command), mail.WithDialContextFunc(dial.DialContext),
		mail.WithTLSConfig(s.cfg.TLSConfig), mail.WithTLSPolicy(mail.TLSOpportunistic),
	}
	if s.cfg.ImplicitTLS {
		opts = append(opts, mail.WithSSL()) // the dialer speaks TLS already: no STARTTLS on top
	}
	if s.cfg.Username != "" {
		opts = append(opts, mail.WithSMTPAuth(mail.SMTPAuthPlain), mail.WithUsername(s.cfg.Username), mail.WithPassword(s.cfg.Password))
	}
	client, err := mail.NewClient(s.cfg.Host, opts...)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	conn, err := client.DialToSMTPClientWithContext(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := s.transact(conn, msg); err != nil {
		return err
	}
	// The server answered 250 to the message: it is sent, even if the
	// QUIT fails or ctx ends meanwhile.
	if conn.UpdateDeadline(quitTimeout) == nil {
		_ = conn.Quit()
	}
	return nil
}

// transact sends msg on c: MAIL, RCPT, DATA, the message, and its end,
// each step under its own timeout, and returns nil once the server
// accepted it (its 250 to the end of DATA).
func (s *SMTPMailer) transact(c *smtp.Client, msg *mail.Msg) error {
	t := s.cfg.Timeouts
	from, err := msg.GetSender(false)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	rcpts, err := msg.GetRecipients()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	step := func(timeout time.Duration, what string, do func() error) error {
		if err := c.UpdateDeadline(timeout); err != nil {
			return err
		}
		if err := do(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	if err := step(t.Command, "MAIL", func() error { return c.Mail(from) }); err != nil {
		return err
	}
	for _, rcpt := range rcpts {
		if err := step(t.Command, "RCPT", func() error { return c.Rcpt(rcpt) }); err != nil {
			return err
		}
	}
	var data io.WriteCloser
	if err := step(t.DataInit, "DATA", func() (err error) { data, err = c.Data(); return err }); err != nil {
		return err
	}
	if err := step(t.DataBlock, "writing the message", func() error { _, err := msg.WriteTo(data); return err }); err != nil {
		return err
	}
	// The end of DATA: from here until its answer the server may take
	// responsibility for the message at any moment (docs/failure-scenarios.md).
	return step(t.DataTermination, "end of DATA", data.Close)
}

func (s *SMTPMailer) message(m Message) (*mail.Msg, error) {
	msg := mail.NewMsg()
	if err := msg.From(s.cfg.From); err != nil {
		return nil, fmt.Errorf("from %q: %w", s.cfg.From, err)
	}
	if err := msg.To(m.To); err != nil {
		return nil, fmt.Errorf("to %q: %w", m.To, err)
	}
	msg.Subject(m.Subject)
	if id := m.MessageID; id != "" {
		if !strings.Contains(id, "@") {
			_, domain, _ := strings.Cut(s.cfg.From, "@")
			id += "@" + domain
		}
		msg.SetMessageIDWithValue(id)
	} else {
		msg.SetMessageID()
	}
	msg.SetDate()
	msg.SetBodyString(mail.TypeTextPlain, m.Body)
	return msg, nil
}

// ctxDialer dials the server for one Send, and ties the connection to the
// Send's ctx: go-mail takes a context only for the dial and then moves a
// deadline of its own forward before each command, so without this a
// server that stops answering would hold the Send for a full timeout per
// command, whatever ctx says.
type ctxDialer struct {
	ctx         context.Context
	implicitTLS bool
	tlsConfig   *tls.Config

	mu   sync.Mutex
	stop []func() bool
}

// DialContext connects (go-mail's dialCtx carries its own dial timeout;
// d.ctx is the Send's, which outlives the dial).
func (d *ctxDialer) DialContext(dialCtx context.Context, network, addr string) (net.Conn, error) {
	var dialer net.Dialer
	raw, err := dialer.DialContext(dialCtx, network, addr)
	if err != nil {
		return nil, err
	}
	conn := &deadlineConn{Conn: raw, ctx: d.ctx}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		raw.Close()
		return nil, err
	}
	d.mu.Lock()
	// A cancelled ctx (no deadline to wait for) interrupts the
	// connection's pending reads and writes at once.
	d.stop = append(d.stop, context.AfterFunc(d.ctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) }))
	d.mu.Unlock()
	if !d.implicitTLS {
		return conn, nil
	}
	tlsConn := tls.Client(conn, d.tlsConfig)
	if err := tlsConn.HandshakeContext(dialCtx); err != nil {
		raw.Close()
		return nil, err
	}
	return tlsConn, nil
}

func (d *ctxDialer) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, stop := range d.stop {
		stop()
	}
}

// deadlineConn never lets a deadline go past its ctx's: go-mail sets
// "now + timeout" before each command, and gets at most ctx's deadline.
type deadlineConn struct {
	net.Conn
	ctx context.Context
}

func (c *deadlineConn) SetDeadline(t time.Time) error     { return c.Conn.SetDeadline(c.clamp(t)) }
func (c *deadlineConn) SetReadDeadline(t time.Time) error { return c.Conn.SetReadDeadline(c.clamp(t)) }
func (c *deadlineConn) SetWriteDeadline(t time.Time) error {
	return c.Conn.SetWriteDeadline(c.clamp(t))
}

func (c *deadlineConn) clamp(t time.Time) time.Time {
	if c.ctx.Err() != nil {
		return time.Unix(1, 0) // in the past: every read and write fails now
	}
	if d, ok := c.ctx.Deadline(); ok && (t.IsZero() || d.Before(t)) {
		return d
	}
	return t
}
