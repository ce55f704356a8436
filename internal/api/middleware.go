package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/example/payments/internal/problem"
	"github.com/example/payments/internal/users"
)

// MaxBodyBytes is the largest request body accepted (64 KiB); larger is 413.
const MaxBodyBytes = 64 << 10

type ctxKey int

const (
	ctxKeyLogger ctxKey = iota
	ctxKeyUser
)

// logger returns the request's logger, which carries its request id.
func logger(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(ctxKeyLogger).(*slog.Logger); ok {
		return l
	}
	return slog.Default()
}

// userFrom returns the authenticated caller; only valid behind authenticate.
func userFrom(ctx context.Context) users.User {
	u, _ := ctx.Value(ctxKeyUser).(users.User)
	return u
}

// MaxRequestIDLen is the longest X-Request-Id a client may send.
const MaxRequestIDLen = 128

// requestID gives the request its id: the client's X-Request-Id when it is
// 1 to 128 visible ASCII characters (%x21-7E: no space, no control, nothing
// beyond ASCII), else a new one made here. A refused id is dropped from the
// request before anything reads it, so it is never logged or echoed: a
// client cannot grow the log by a megabyte a request, nor write a line
// break or another request's id format into it by way of a header.
func requestID(next http.Handler) http.Handler {
	ids := middleware.RequestID(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sent, ok := r.Header[middleware.RequestIDHeader]; ok && (len(sent) != 1 || !validRequestID(sent[0])) {
			r.Header.Del(middleware.RequestIDHeader)
		}
		ids.ServeHTTP(w, r)
	})
}

// validRequestID says whether id is 1 to MaxRequestIDLen characters of
// %x21-7E.
func validRequestID(id string) bool {
	if id == "" || len(id) > MaxRequestIDLen {
		return false
	}
	for i := range len(id) {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// logRequests gives the request a logger carrying its request id, echoes the
// id in X-Request-Id, and logs one line when the request is done.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		reqID := middleware.GetReqID(r.Context())
		log := s.log.With(slog.String("request_id", reqID))
		w.Header().Set("X-Request-Id", reqID)
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r.WithContext(context.WithValue(r.Context(), ctxKeyLogger, log)))
		log.InfoContext(r.Context(), "request",
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", ww.Status()), slog.Int("bytes", ww.BytesWritten()),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000))
	})
}

// recoverPanics turns a panic into a logged 500 instead of a dropped connection.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			rec := recover()
			if rec == nil || rec == http.ErrAbortHandler {
				if rec != nil {
					panic(rec)
				}
				return
			}
			logger(r.Context()).ErrorContext(r.Context(), "panic", slog.Any("panic", rec), slog.String("stack", string(debug.Stack())))
			s.writeError(w, r, fmt.Errorf("panic: %v", rec))
		}()
		next.ServeHTTP(w, r)
	})
}

// authenticate requires `Authorization: Bearer <api key>` and puts the user
// in the context. A missing, malformed or unknown key is 401. A known key is
// usually answered from s.auth's memory, without a query.
//
// Failed authentications are limited per client address (docs/API.md
// section 2, s.failedAuth): a key this instance has not seen valid is
// looked up only if its address has a failure left to spend, which the
// lookup holds while it runs and gives back if the key is valid. Past the
// allowance, the answer is 429 and the key store is not asked, so guessing
// keys costs the database nothing. A key seen valid
// (users.Authenticator.SeenValid) is looked up whatever its address's
// allowance: a client with a valid key is served even from an address that
// is guessing (a NAT, a proxy). Concurrent requests with one key share its
// lookup and its charge (a storm of retries with a new valid key is one
// lookup). A valid key never seen by this instance, from an address past
// its allowance, waits like a guess: the key store alone could tell it from
// one. Stripe, too, answers 429 to an address that sends many invalid keys.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client := clientAddr(r)
		key, ok := bearerToken(r.Header.Get("Authorization"))
		if !ok {
			settle, wait := s.failedAuth.take(r.Context(), client)
			if settle == nil {
				problem.Write(w, tooManyFailures(wait))
				return
			}
			settle(true)
			w.Header().Set("WWW-Authenticate", `Bearer realm="payments"`)
			problem.Write(w, problem.New(http.StatusUnauthorized, problem.Unauthorized,
				"Send your API key as `Authorization: Bearer <key>`."))
			return
		}
		user, err := s.auth.AuthenticateGated(r.Context(), key, func() (func(unknown bool), error) {
			settle, wait := s.failedAuth.take(r.Context(), client)
			if settle == nil {
				return nil, tooManyFailures(wait)
			}
			return settle, nil
		})
		if err != nil {
			if errors.Is(err, users.ErrUnknownKey) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="payments", error="invalid_token"`)
			}
			s.writeError(w, r, err)
			return
		}
		ctx := context.WithValue(r.Context(), ctxKeyUser, user)
		ctx = context.WithValue(ctx, ctxKeyLogger, logger(ctx).With(slog.Int64("user_id", user.ID)))
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// registerAuthMetrics exports how often authenticate was answered from the
// key cache and how often it queried the database.
func registerAuthMetrics(reg prometheus.Registerer, auth *users.Authenticator) {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "payments_auth_cache_hits_total",
			Help: "API keys answered without a query: from the in-process key cache, or by the lookup of the same key another request was making.",
		}, func() float64 { hits, _ := auth.Counts(); return float64(hits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "payments_auth_cache_misses_total",
			Help: "API key lookups that queried the database (every lookup when the cache is off).",
		}, func() float64 { _, misses := auth.Counts(); return float64(misses) }),
	)
}

func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// limitJSONBody enforces the body rules of API.md before any handler runs:
// a request with a body must say Content-Type: application/json (else 415)
// and carry at most MaxBodyBytes (else 413). A body whose length is not
// announced is cut off at the limit: reading past it fails with
// *http.MaxBytesError, which a handler reading the body answers with the same
// 413 (bodyTooLarge).
func limitJSONBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		if !isJSON(r.Header.Get("Content-Type")) {
			problem.Write(w, problem.New(http.StatusUnsupportedMediaType, problem.UnsupportedMediaType,
				"Send the request body as Content-Type: application/json, in UTF-8 (no charset, or charset=utf-8)."))
			return
		}
		if r.ContentLength > MaxBodyBytes {
			problem.Write(w, bodyTooLarge())
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		next.ServeHTTP(w, r)
	})
}

// bodyTooLarge is the 413 of a route under MaxBodyBytes.
func bodyTooLarge() *problem.Problem { return bodyOver(MaxBodyBytes) }

// bodyOver is the 413 of a body over limit bytes: each route names its own
// limit (Stripe's deliveries take MaxWebhookBodyBytes).
func bodyOver(limit int) *problem.Problem {
	return problem.New(http.StatusRequestEntityTooLarge, problem.BodyTooLarge,
		"The request body is larger than %d bytes (%d KiB), this route's limit.", limit, limit>>10)
}

// isJSON reports whether contentType is JSON in UTF-8: application/json,
// with no charset or charset=utf-8. JSON between systems is UTF-8 (RFC 8259
// section 8.1); a body declared in another charset would be read as UTF-8
// all the same, and mean something else than its sender meant.
func isJSON(contentType string) bool {
	mediaType, params, err := mime.ParseMediaType(contentType)
	if err != nil || mediaType != "application/json" {
		return false
	}
	charset, ok := params["charset"]
	return !ok || strings.EqualFold(charset, "utf-8")
}
