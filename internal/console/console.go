// Package console is the operator's console (docs/API.md section 10): HTML
// pages, rendered on the server with html/template and usable without
// JavaScript, that show requests moving through their recovery points, the
// money they moved and the webhooks they sent, and that let an operator
// re-drive a key and redeliver an event.
//
// It acts only through the code the rest of the service uses: a re-drive is
// keyadmin's Retry (as `payments keys retry`), a redelivery is
// merchanthooks.Service.Redeliver under an idempotency key of its own (as
// POST /v1/events/{id}/redeliver). It reads the rest with the queries of
// internal/db/queries/console.sql and operator.sql.
//
// Its credential is its own (Config.Token), never a merchant's API key. A
// right token buys a session: a signed cookie, and a row in
// console_sessions, so that any instance that has the same token accepts
// it and signing out ends it everywhere. Every POST carries a CSRF value
// bound to that session.
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payments/internal/keyadmin"
	"github.com/example/payments/internal/merchanthooks"
)

// Gate limits failed sign-ins per client address: the API's limiter of
// failed authentications (api.FailedAuthGate), so a guesser gains nothing
// by switching from API keys to the console's token.
type Gate interface {
	// Take admits one sign-in before its token is compared. It returns
	// settle, to call with the outcome, or nil and how long until the
	// client may try again.
	Take(r *http.Request) (settle func(failed bool), wait time.Duration)
}

// Config is what the console needs.
type Config struct {
	// Token is the console's credential; it must not be empty.
	Token string
	Pool  *pgxpool.Pool
	// Keys reads keys and re-drives them (its completer must be set).
	Keys *keyadmin.Admin
	// Hooks redelivers events.
	Hooks *merchanthooks.Service
	// Gate limits failed sign-ins; nil: no limit.
	Gate Gate
	// TraceURL, when set, links a key to its trace: {trace_id} in it is
	// replaced by the key's trace id (PAYMENTS_CONSOLE_TRACE_URL).
	TraceURL string
	// SessionTTL is how long a session lasts; 0 means DefaultSessionTTL.
	SessionTTL time.Duration
	Logger     *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// DefaultSessionTTL is how long a sign-in lasts: a working day.
const DefaultSessionTTL = 12 * time.Hour

// Prefix is where the console is mounted.
const Prefix = "/console"

// contentSecurityPolicy is sent with every answer: scripts, styles, images
// and fetches from the console's own origin only, no inline script or
// style, no framing, forms posted only to itself.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; object-src 'none'; frame-ancestors 'none'"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

type handler struct {
	cfg    Config
	log    *slog.Logger
	key    []byte // signs sessions and CSRF values
	pages  map[string]*template.Template
	router chi.Router
}

// New returns the console's handler, to be mounted at Prefix (it sees
// paths without it).
func New(cfg Config) (http.Handler, error) {
	if cfg.Token == "" {
		return nil, errors.New("console: no token")
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h := &handler{cfg: cfg, log: cfg.Logger, key: sessionKey(cfg.Token)}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	h.pages = pages
	h.router = h.routes()
	return h, nil
}

// Routes are the console's routes, as the router serves them, with the
// Prefix: for the check of docs/API.md (internal/api's contract test).
func Routes() ([]string, error) {
	h, err := New(Config{Token: "x"})
	if err != nil {
		return nil, err
	}
	var out []string
	err = chi.Walk(h.(*handler).router, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		route = strings.TrimSuffix(route, "/")
		out = append(out, method+" "+Prefix+route)
		return nil
	})
	return out, err
}

func (h *handler) routes() chi.Router {
	r := chi.NewRouter()
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		h.render(w, r, http.StatusNotFound, "error", page{Title: "Not found", Message: "No such page."})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		h.render(w, r, http.StatusMethodNotAllowed, "error", page{Title: "Method not allowed", Message: r.Method + " is not allowed here."})
	})
	r.Get("/assets/*", h.asset)
	r.Get("/login", h.loginForm)
	r.Post("/login", h.login)
	r.Group(func(r chi.Router) {
		r.Use(h.requireSession)
		r.Post("/logout", h.logout)
		r.Get("/", h.dashboard)
		r.Get("/live", h.live)
		r.Get("/keys", h.keys)
		r.Get("/keys/{user}/{key}", h.story)
		r.Post("/keys/{user}/{key}/retry", h.retry)
		r.Get("/payments", h.payments)
		r.Get("/payments/{id}", h.payment)
		r.Get("/webhook_endpoints", h.endpoints)
		r.Get("/webhook_endpoints/{id}", h.endpoint)
		r.Post("/webhook_endpoints/{id}/redeliver", h.redeliver)
		r.Get("/receipts", h.receipts)
	})
	return r
}

// ServeHTTP sets the headers every answer carries and routes on the
// escaped path, so that a key or an email with a slash or a percent sign in
// it is one path segment (each parameter is unescaped by param).
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", contentSecurityPolicy)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "same-origin")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Cache-Control", "no-store")
	path := strings.TrimPrefix(r.URL.EscapedPath(), Prefix)
	if path == "" {
		path = "/"
	}
	rctx := chi.NewRouteContext()
	rctx.RoutePath = path
	ctx := context.WithValue(r.Context(), chi.RouteCtxKey, rctx)
	h.router.ServeHTTP(w, r.WithContext(ctx))
}

// asset serves one of the embedded assets, without a session. A directory
// is 404, the same with or without a session: http.FileServer would list
// it (issue 42), telling whoever asks what the console is made of.
func (h *handler) asset(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "*")
	assets, _ := fs.Sub(assetFS, "assets")
	if info, err := fs.Stat(assets, name); err != nil || info.IsDir() || !fs.ValidPath(name) {
		h.render(w, r, http.StatusNotFound, "error", page{Title: "Not found", Message: "No such page."})
		return
	}
	http.ServeFileFS(w, r, assets, name)
}

// param is the route parameter name, unescaped.
func param(r *http.Request, name string) (string, bool) {
	v, err := url.PathUnescape(chi.URLParam(r, name))
	return v, err == nil && v != ""
}

// keyPath is the console's address of a key's story.
func keyPath(email, key string) string {
	return Prefix + "/keys/" + url.PathEscape(email) + "/" + url.PathEscape(key)
}

func (h *handler) serverError(w http.ResponseWriter, r *http.Request, err error) {
	h.log.ErrorContext(r.Context(), "console", slog.String("path", r.URL.Path), slog.String("error", err.Error()))
	h.render(w, r, http.StatusInternalServerError, "error", page{Title: "Error", Message: "Something failed; the log says what."})
}

func fmtAge(seconds float64) string {
	d := time.Duration(seconds * float64(time.Second)).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
