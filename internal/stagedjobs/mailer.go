package stagedjobs

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/smtp"
	"net/url"
	"strings"
)

// Message is an email.
type Message struct {
	To      string
	Subject string
	Body    string
}

// Mailer sends email.
type Mailer interface {
	Send(ctx context.Context, m Message) error
}

// NewMailer returns an SMTP mailer for smtpURL
// (smtp://user:password@host:port?from=receipts@example.com), or, when
// smtpURL is empty, a mailer that only logs what it would send.
func NewMailer(smtpURL string, log *slog.Logger) (Mailer, error) {
	if smtpURL == "" {
		return LogMailer{Log: log}, nil
	}
	u, err := url.Parse(smtpURL)
	if err != nil || u.Scheme != "smtp" || u.Host == "" {
		return nil, fmt.Errorf("SMTP_URL must look like smtp://user:password@host:port?from=address")
	}
	from := u.Query().Get("from")
	if from == "" {
		from = "receipts@" + u.Hostname()
	}
	m := &SMTPMailer{addr: u.Host, from: from}
	if u.User != nil {
		password, _ := u.User.Password()
		m.auth = smtp.PlainAuth("", u.User.Username(), password, u.Hostname())
	}
	return m, nil
}

// LogMailer logs each message instead of sending it: the default in dev.
type LogMailer struct{ Log *slog.Logger }

// Send logs m.
func (l LogMailer) Send(ctx context.Context, m Message) error {
	l.Log.InfoContext(ctx, "email (not sent: SMTP_URL is not set)",
		slog.String("to", m.To), slog.String("subject", m.Subject), slog.String("body", m.Body))
	return nil
}

// SMTPMailer sends through an SMTP server.
type SMTPMailer struct {
	addr string
	from string
	auth smtp.Auth
}

// Send sends m. net/smtp takes no context; the job's timeout bounds it.
func (s *SMTPMailer) Send(ctx context.Context, m Message) error {
	if _, _, err := net.SplitHostPort(s.addr); err != nil {
		return err
	}
	msg := strings.Join([]string{
		"From: " + s.from, "To: " + m.To, "Subject: " + m.Subject,
		"MIME-Version: 1.0", "Content-Type: text/plain; charset=utf-8", "", m.Body,
	}, "\r\n")
	return smtp.SendMail(s.addr, s.auth, s.from, []string{m.To}, []byte(msg))
}
