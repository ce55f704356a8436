package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/example/payments/internal/db/dbsqlc"
)

// cookieName is the session cookie's name.
const cookieName = "payments_console"

// maxFormBytes bounds a form's body: the console's forms are a few fields.
const maxFormBytes = 16 << 10

// sessionKey derives the key that signs sessions and CSRF values from the
// console's token: every instance with the token accepts the sessions of
// the others, and a new token ends every session.
func sessionKey(token string) []byte {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("payments console session v1"))
	return m.Sum(nil)
}

// session is a signed-in operator: the cookie holds when it was issued and
// a random id, signed.
type session struct {
	id     []byte
	issued time.Time
}

type ctxKey struct{}

func sessionFrom(ctx context.Context) session {
	s, _ := ctx.Value(ctxKey{}).(session)
	return s
}

func (h *handler) sign(parts ...[]byte) []byte {
	m := hmac.New(sha256.New, h.key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

var b64 = base64.RawURLEncoding

// cookieValue is payload.signature, each base64url; the payload is the
// issue time (Unix seconds, 8 bytes) and the session id (16 bytes).
func (h *handler) cookieValue(s session) string {
	payload := binary.BigEndian.AppendUint64(nil, uint64(s.issued.Unix()))
	payload = append(payload, s.id...)
	return b64.EncodeToString(payload) + "." + b64.EncodeToString(h.sign([]byte("session"), payload))
}

// readSession verifies the session cookie of r: its signature, its age,
// and that the session is still on record (console_sessions): signed out,
// it is not, on any instance. A database that does not answer is no
// session either (err says so, for the log).
func (h *handler) readSession(r *http.Request) (session, bool, error) {
	s, ok := h.readCookie(r)
	if !ok {
		return session{}, false, nil
	}
	live, err := queries.ConsoleSessionLive(r.Context(), h.cfg.Pool, dbsqlc.ConsoleSessionLiveParams{ID: s.id, Now: h.cfg.Now()})
	if err != nil {
		return session{}, false, err
	}
	return s, live, nil
}

// readCookie verifies the session cookie's signature and age.
func (h *handler) readCookie(r *http.Request) (session, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return session{}, false
	}
	p, sig, ok := strings.Cut(c.Value, ".")
	if !ok {
		return session{}, false
	}
	payload, err1 := b64.DecodeString(p)
	mac, err2 := b64.DecodeString(sig)
	if err1 != nil || err2 != nil || len(payload) != 24 || !hmac.Equal(mac, h.sign([]byte("session"), payload)) {
		return session{}, false
	}
	issued := time.Unix(int64(binary.BigEndian.Uint64(payload[:8])), 0)
	now := h.cfg.Now()
	if now.Before(issued.Add(-time.Minute)) || !now.Before(issued.Add(h.cfg.SessionTTL)) {
		return session{}, false
	}
	return session{id: payload[8:], issued: issued}, true
}

// csrf is the session's CSRF value, which every form carries.
func (h *handler) csrf(s session) string {
	return b64.EncodeToString(h.sign([]byte("csrf"), s.id))
}

// requireSession lets a signed-in operator through: without a session, a
// GET is sent to the sign-in (303) and any other method is 401; a POST
// without the session's CSRF value is 403.
func (h *handler) requireSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, ok, err := h.readSession(r)
		if err != nil {
			h.serverError(w, r, fmt.Errorf("reading the session: %w", err))
			return
		}
		if !ok {
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
				return
			}
			h.render(w, r, http.StatusUnauthorized, "error", page{Title: "Sign in first",
				Message: "This action needs a signed-in session.", SignIn: true})
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
			if err := r.ParseForm(); err != nil {
				h.render(w, r, http.StatusBadRequest, "error", page{Title: "Bad form", Message: "The form could not be read."})
				return
			}
			if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(h.csrf(s))) != 1 {
				h.render(w, r, http.StatusForbidden, "error", page{Title: "Refused",
					Message: "The form did not carry this session's CSRF value: reload the page and try again."})
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, s)))
	})
}

func (h *handler) loginForm(w http.ResponseWriter, r *http.Request) {
	if _, ok, err := h.readSession(r); err == nil && ok {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	h.render(w, r, http.StatusOK, "login", page{Title: "Sign in"})
}

// login compares the token in constant time (of its SHA-256, so that its
// length does not show either), after the failed-authentication limiter
// has admitted the attempt.
func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	settle := func(bool) {}
	if h.cfg.Gate != nil {
		var wait time.Duration
		settle, wait = h.cfg.Gate.Take(r)
		if settle == nil {
			seconds := max(1, int(math.Ceil(wait.Seconds())))
			w.Header().Set("Retry-After", strconv.Itoa(seconds))
			h.render(w, r, http.StatusTooManyRequests, "login", page{Title: "Sign in",
				Message: "Too many failed sign-ins from your address; try again in " + strconv.Itoa(seconds) + " s."})
			return
		}
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	_ = r.ParseForm()
	given, want := sha256.Sum256([]byte(r.PostForm.Get("token"))), sha256.Sum256([]byte(h.cfg.Token))
	if subtle.ConstantTimeCompare(given[:], want[:]) != 1 {
		settle(true)
		h.render(w, r, http.StatusUnauthorized, "login", page{Title: "Sign in", Message: "That is not the console's token."})
		return
	}
	settle(false)
	s := session{id: make([]byte, 16), issued: h.cfg.Now()}
	_, _ = rand.Read(s.id)
	// The session is kept on the server, so that signing out ends it;
	// sessions past their time go at each sign-in.
	if err := queries.DeleteExpiredConsoleSessions(r.Context(), h.cfg.Pool, s.issued); err != nil {
		h.serverError(w, r, fmt.Errorf("deleting expired sessions: %w", err))
		return
	}
	if err := queries.StartConsoleSession(r.Context(), h.cfg.Pool, dbsqlc.StartConsoleSessionParams{
		ID: s.id, Now: s.issued, ExpiresAt: s.issued.Add(h.cfg.SessionTTL),
	}); err != nil {
		h.serverError(w, r, fmt.Errorf("starting a session: %w", err))
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: h.cookieValue(s), Path: Prefix, MaxAge: int(h.cfg.SessionTTL.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: viaHTTPS(r),
	})
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// logout ends the session on the server (its row goes: the cookie, kept
// or copied, is refused from now on, by every instance), and clears the
// cookie in this browser.
func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	if err := queries.EndConsoleSession(r.Context(), h.cfg.Pool, sessionFrom(r.Context()).id); err != nil {
		h.serverError(w, r, fmt.Errorf("ending the session: %w", err))
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Prefix, MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: viaHTTPS(r)})
	http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
}

// viaHTTPS tells whether the browser reached the console over HTTPS: on a
// TLS connection of its own, or through a proxy that ended TLS and says so
// (X-Forwarded-Proto, or RFC 7239's Forwarded with proto=https), so that
// the session cookie is Secure and never travels over plain HTTP. The
// headers are believed from anyone: they can only make the cookie
// stricter, and a browser on plain HTTP refuses a Secure cookie (the
// sign-in of whoever forged them fails).
func viaHTTPS(r *http.Request) bool {
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		return true
	}
	for _, forwarded := range r.Header.Values("Forwarded") {
		for _, element := range strings.Split(forwarded, ",") {
			for _, pair := range strings.Split(element, ";") {
				k, v, _ := strings.Cut(strings.TrimSpace(pair), "=")
				if strings.EqualFold(k, "proto") && strings.EqualFold(strings.Trim(v, `"`), "https") {
					return true
				}
			}
		}
	}
	return false
}
