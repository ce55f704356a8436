package api

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/example/payments/internal/problem"
)

// Listener wraps the API's listener so that the answers net/http writes
// itself, before any handler runs, are application/problem+json like every
// other error (docs/API.md section 2), instead of text/plain: header fields
// over http.Server.MaxHeaderBytes (431), a request it cannot parse (400),
// and a transfer coding it does not know (501 from net/http, 400 here: no
// input gets a 5xx).
//
// net/http offers no hook for those answers: it writes them straight to
// the connection, in one write of a fixed form (a status line, then
// exactly netHTTPErrorHeaders, then the text), and closes it. The wrapped
// connection recognises that form and writes the problem instead. A
// handler's response cannot take that form: net/http always puts a Date
// header after Connection (the API never removes it). Over TLS the bytes
// are encrypted and pass untouched; the service speaks plain HTTP behind
// its proxy.
func Listener(ln net.Listener) net.Listener { return problemListener{ln} }

// netHTTPErrorHeaders is what net/http's server writes between the status
// line and the text of its own error answers (net/http/server.go,
// conn.serve).
const netHTTPErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

type problemListener struct{ net.Listener }

func (l problemListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &problemConn{Conn: c}, nil
}

type problemConn struct{ net.Conn }

func (c *problemConn) Write(b []byte) (int, error) {
	answer, ok := asProblem(b)
	if !ok {
		return c.Conn.Write(b)
	}
	if _, err := c.Conn.Write(answer); err != nil {
		return 0, err
	}
	return len(b), nil
}

// CloseWrite keeps what net/http does with a TCP connection after a 431:
// close the writing half, so the client reads the answer before the reset.
func (c *problemConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// asProblem returns the problem+json answer for b when b is one of
// net/http's own error answers.
func asProblem(b []byte) ([]byte, bool) {
	const prefix = "HTTP/1.1 "
	end := bytes.Index(b, []byte(netHTTPErrorHeaders))
	if !bytes.HasPrefix(b, []byte(prefix)) || end < len(prefix)+3 || bytes.ContainsAny(b[:end], "\r\n") {
		return nil, false
	}
	code, err := strconv.Atoi(string(b[len(prefix) : len(prefix)+3]))
	if err != nil {
		return nil, false
	}
	text := string(b[end+len(netHTTPErrorHeaders):])
	var p *problem.Problem
	if code == http.StatusRequestHeaderFieldsTooLarge {
		// 431 (RFC 6585 section 5) says it precisely; the code is
		// validation_failed, docs/API.md section 2's code for input the
		// service does not take (its list has none for headers).
		// (app.NewServer keeps http.DefaultMaxHeaderBytes, 1 MiB.)
		p = problem.New(http.StatusRequestHeaderFieldsTooLarge, problem.ValidationFailed,
			"The request's header fields are larger than the 1 MiB the service reads.")
	} else {
		// net/http's text is "400 Bad Request", or that and ": why".
		why := "it is malformed"
		if _, after, ok := strings.Cut(text, ": "); ok {
			why = after
		} else if code == http.StatusNotImplemented {
			why = text // "Unsupported transfer encoding"
		}
		p = problem.New(http.StatusBadRequest, problem.ValidationFailed, "The request could not be read as HTTP: %s.", why)
	}
	body := p.JSON()
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		p.Status, http.StatusText(p.Status), problem.ContentType, len(body), body), true
}
