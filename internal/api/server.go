package api

import (
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/example/payments/internal/events"
	"github.com/example/payments/internal/merchanthooks"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/problem"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/route"
	"github.com/example/payments/internal/telemetry"
	"github.com/example/payments/internal/users"
	"github.com/example/payments/internal/webhooks"
)

// Config is what the API needs from the process that serves it.
type Config struct {
	Pool     *pgxpool.Pool
	Engine   *recovery.Engine
	Payments *payments.Service
	Webhooks *webhooks.Receiver
	// Hooks runs the webhooks to merchants (endpoints, redelivery).
	Hooks *merchanthooks.Service
	// WebhookURLCheck vets a new endpoint's URL beyond its syntax (a public
	// host, say); nil checks the syntax only.
	WebhookURLCheck URLCheck
	// RateLimit bounds each user's requests; zero turns it off.
	RateLimit RateLimit
	// FailedAuthLimit bounds each client address's failed
	// authentications: zero means DefaultFailedAuthLimit (docs/API.md
	// section 2), a negative Rate turns it off.
	FailedAuthLimit RateLimit
	Logger          *slog.Logger
	// Registry collects the API's metrics. The process serves it to
	// Prometheus on a listener of its own (PAYMENTS_METRICS_ADDR); the
	// API's /metrics answers only a client on the machine itself
	// (localOnly).
	Registry *prometheus.Registry
	// Console, when set, is the operator's console (docs/API.md section
	// 10), mounted at /console: given the limiter of failed
	// authentications, it returns its handler. Nil: /console is 404.
	Console func(FailedAuthGate) http.Handler
	// AuthCacheTTL is how long an API key, once looked up, is answered from
	// memory (users.Authenticator): 0 means users.DefaultAuthCacheTTL (10s),
	// negative turns the cache off. A revoked key keeps working for up to
	// this long on each instance.
	AuthCacheTTL time.Duration
	// Routes are a team's own routes, each declared once (package route)
	// with its Params, served under /v1 like the service's own: the key
	// and the body read strictly, the flow (registered with Engine) run
	// under the key. examples/payouts is one.
	Routes []route.Route
}

// Server holds the API's dependencies; its handlers are methods on it.
type Server struct {
	pool     *pgxpool.Pool
	engine   *recovery.Engine
	payments *payments.Service
	webhooks *webhooks.Receiver
	hooks    *merchanthooks.Service
	checkURL URLCheck
	limiter  *userLimiter // nil: no limit
	// failedAuth limits failed authentications per client address; nil:
	// no limit.
	failedAuth *addrLimiter
	auth       *users.Authenticator
	log        *slog.Logger
	metrics    *httpMetrics
	// metricsHandler serves the registry's metrics (GET /metrics).
	metricsHandler http.Handler
	// eventTypes are the event types a merchant may filter by and
	// subscribe to: the service's own (events.Types, which its routes
	// declare) and those a team's routes (Config.Routes) declare.
	eventTypes []string
}

// NewHandler builds the API's router. It refuses a team's route that
// cannot be served as declared (cfg.Routes: its flow not one the engine
// runs, its Params or Request missing, a path outside /v1), so that the
// mistake stops the program at start-up instead of answering 500 later.
func NewHandler(cfg Config) (http.Handler, error) {
	s := &Server{
		pool: cfg.Pool, engine: cfg.Engine, payments: cfg.Payments, webhooks: cfg.Webhooks,
		hooks: cfg.Hooks, checkURL: cfg.WebhookURLCheck,
		log: cfg.Logger, metrics: newHTTPMetrics(cfg.Registry),
		metricsHandler: promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{}),
		auth:           users.NewAuthenticator(cfg.Pool, users.AuthenticatorConfig{TTL: cfg.AuthCacheTTL}),
	}
	registerAuthMetrics(cfg.Registry, s.auth)
	if cfg.RateLimit.Rate > 0 {
		s.limiter = newUserLimiter(cfg.RateLimit)
	}
	switch failedAuth := cfg.FailedAuthLimit; {
	case failedAuth == RateLimit{}:
		s.failedAuth = newAddrLimiter(DefaultFailedAuthLimit, cfg.Registry)
	case failedAuth.Rate > 0:
		s.failedAuth = newAddrLimiter(failedAuth, cfg.Registry)
	}

	tracing := telemetry.Enabled() // see trace.go
	r := chi.NewRouter()
	r.Use(requestID, s.logRequests, s.metrics.measure, s.recoverPanics)
	if tracing {
		r.Use(nameSpanByRoute)
	}
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		problem.Write(w, problem.New(http.StatusNotFound, problem.NotFound, "%s", "No such route: "+r.Method+" "+r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		allowed := allowedMethods(r, req.URL.Path)
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		problem.Write(w, problem.New(http.StatusMethodNotAllowed, problem.MethodNotAllowed,
			"%s is not allowed on %s; use %s.", req.Method, req.URL.Path, strings.Join(allowed, " or ")))
	})

	// The routes, as declared (routes.go): the public ones at the top,
	// the others behind /v1's authentication, rate limit and body checks.
	routes := servedRoutes()
	s.eventTypes = slices.Clone(events.Types)
	for _, rt := range cfg.Routes {
		for _, e := range rt.Events {
			if !slices.Contains(s.eventTypes, e) {
				s.eventTypes = append(s.eventTypes, e)
			}
		}
		h, err := s.teamRoute(rt)
		if err != nil {
			return nil, err
		}
		routes = append(routes, served{rt, func(*Server) http.Handler { return h }})
	}
	for _, rt := range routes {
		if rt.Public {
			r.Method(rt.Method, rt.Path, rt.handle(s))
		}
	}
	if cfg.Console != nil {
		console := cfg.Console(FailedAuthGate{l: s.failedAuth})
		r.Handle("/console", console)
		r.Handle("/console/*", console)
	}
	r.Route("/v1", func(r chi.Router) {
		r.Use(echoIdempotencyKey, s.authenticate, s.limitRate, limitJSONBody, checkQuery)
		for _, rt := range routes {
			if !rt.Public {
				r.Method(rt.Method, strings.TrimPrefix(rt.Path, "/v1"), rt.handle(s))
			}
		}
	})
	if tracing {
		return traceRequests(r), nil
	}
	return r, nil
}

// allowedMethods lists the methods routes has a handler for at path. chi
// knows them but does not hand them to a custom 405 handler.
func allowedMethods(routes chi.Routes, path string) []string {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if routes.Match(chi.NewRouteContext(), m, path) {
			allowed = append(allowed, m)
		}
	}
	return allowed
}

// handlerFunc is a handler that may fail; handle renders its error.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

func (s *Server) handle(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	}
}

// localOnly serves next to a client on the machine itself, a loopback peer
// that no proxy forwarded (no Forwarded or X-Forwarded-For header), and
// answers 404 to anyone else, as if the route did not exist: the metrics
// name routes, queue depths and failure counts, which are no business of a
// merchant's (issue 42), while the contract's GET /metrics stays for an
// operator on the host. Prometheus scrapes the metrics listener.
func localOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		ip, perr := netip.ParseAddr(host)
		if err != nil || perr != nil || !ip.Unmap().IsLoopback() ||
			r.Header.Get("Forwarded") != "" || r.Header.Get("X-Forwarded-For") != "" {
			problem.Write(w, problem.New(http.StatusNotFound, problem.NotFound, "%s", "No such route: "+r.Method+" "+r.URL.Path))
			return
		}
		next.ServeHTTP(w, r)
	})
}
