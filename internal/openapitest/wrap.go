package openapitest

import (
	"bytes"
	"io"
	"net/http"
	"testing"
)

// Handler wraps a test server's handler: every exchange it serves is
// checked, and a mismatch is reported on t (with t.Errorf, so it may come
// from the server's goroutines).
func Handler(t testing.TB, next http.Handler) http.Handler {
	t.Helper()
	return mustLoad(t).Handler(t, next)
}

// Handler is the package's Handler held to d instead of the service's
// document: a team's own (examples/payouts).
func (doc *Document) Handler(t testing.TB, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqBody, err := readAll(r.Body)
		if err != nil {
			// The client went away mid-body: nothing to check.
			next.ServeHTTP(w, r)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(reqBody))
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		if !rec.wroteHeader {
			rec.WriteHeader(http.StatusOK)
		}
		resp := &http.Response{StatusCode: rec.status, Header: rec.header, Request: r}
		if err := doc.Check(r, reqBody, resp, rec.body.Bytes()); err != nil {
			t.Errorf("%v", err)
		}
	})
}

// Transport wraps a test client's transport: every exchange it carries is
// checked, and a mismatch is reported on t. Only give it a client that talks
// to the payments API (not to the Stripe simulator's control surface).
func Transport(t testing.TB, next http.RoundTripper) http.RoundTripper {
	t.Helper()
	if next == nil {
		next = http.DefaultTransport
	}
	return &checkingTransport{t: t, doc: mustLoad(t), next: next}
}

type checkingTransport struct {
	t    testing.TB
	doc  *Document
	next http.RoundTripper
}

func (c *checkingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	reqBody, err := readAll(req.Body)
	if err != nil {
		return nil, err
	}
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(reqBody))
	if req.Body == nil {
		out.Body = nil
	}
	resp, err := c.next.RoundTrip(out)
	if err != nil {
		return resp, err // no answer: nothing to check
	}
	respBody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err // the answer was cut off: the caller sees the error
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	if err := c.doc.Check(req, reqBody, resp, respBody); err != nil {
		c.t.Errorf("%v", err)
	}
	return resp, nil
}

func mustLoad(t testing.TB) *Document {
	t.Helper()
	doc, err := Load()
	if err != nil {
		t.Fatalf("%v", err)
	}
	return doc
}

func readAll(body io.ReadCloser) ([]byte, error) {
	if body == nil || body == http.NoBody {
		return nil, nil
	}
	defer body.Close()
	return io.ReadAll(body)
}

// recorder passes a response through to the client and keeps a copy.
type recorder struct {
	http.ResponseWriter
	wroteHeader bool
	status      int
	header      http.Header
	body        bytes.Buffer
}

func (r *recorder) WriteHeader(status int) {
	if r.wroteHeader {
		return
	}
	r.wroteHeader, r.status, r.header = true, status, r.ResponseWriter.Header().Clone()
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wroteHeader {
		r.WriteHeader(http.StatusOK)
	}
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the real writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
