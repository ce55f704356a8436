// Package route declares an HTTP route once: its method and path, the flow
// it runs, its request and answer, the errors it may answer and the events
// it emits, and the Go client's method for it. The service builds its
// router from its list of declarations (internal/api's routes.go), and a
// team's own package declares its routes the same way (examples/payouts);
// package routetest holds a list to the OpenAPI document, the README's
// route table and the Go client, from the package's own tests.
//
// It owns the declaration and what is derived from it without a test (the
// README's table). It never serves a request: internal/api does.
package route

import (
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/example/payments/internal/problem"
)

// Route is one route, declared once.
type Route struct {
	Method string // http.MethodPost, ...
	// Path is the full path as chi and the OpenAPI document write it:
	// "/v1/payments/{id}".
	Path string
	// Summary is the route's line in the README's table.
	Summary string
	// Flow names the recovery flow the route runs (its name in
	// recovery.NewFlow); "" for a route that runs none.
	Flow string
	// Request is the body's type, as a zero value (createPaymentRequest{});
	// nil when the route takes no body. Its JSON field names are the
	// properties the OpenAPI document gives the request body.
	Request any
	// Answer is the successful answer's type, as a zero value; nil when
	// the answer is not JSON of a Go type (Prometheus text).
	Answer any
	// Status is the successful answer's status: 200, 201.
	Status int
	// Errors are the problems the route may answer, each a status and a
	// code: the OpenAPI operation lists exactly these statuses besides
	// Status, and the document's ErrorCode enum holds each code.
	Errors []Error
	// Events are the event types the route's flow emits (its staged
	// merchant events): the document's EventType enum holds each.
	Events []string
	// Client is the Go client's method for the route. A route no client
	// calls (Stripe's webhooks) says why in NoClient instead.
	Client   string
	NoClient string
	// Public routes are served without the API key (the health checks,
	// the document, Stripe's signed webhooks); the others sit behind /v1's
	// authentication, rate limit and body checks.
	Public bool
	// Params serves a team's route that runs Flow (internal/api serves the
	// service's own routes with their handlers): it is given the decoded
	// body (a pointer to a new value of Request's type) and returns the
	// params the flow runs with, or the request's problem (a 400
	// validation_failed is not stored, and the key stays free).
	Params func(request any) (any, error)
}

// Error is a problem a route may answer.
type Error struct {
	Status int
	Code   problem.Code
}

// Errors joins sets of errors, each once, in the order met.
func Errors(sets ...[]Error) []Error {
	var all []Error
	for _, set := range sets {
		for _, e := range set {
			if !slices.Contains(all, e) {
				all = append(all, e)
			}
		}
	}
	return all
}

// Errors every route of the API may answer, by where it sits.
var (
	// Authenticated: behind /v1's key, rate limit and body checks, and on
	// the database.
	Authenticated = []Error{
		{http.StatusBadRequest, problem.ValidationFailed}, {http.StatusUnauthorized, problem.Unauthorized},
		{http.StatusRequestEntityTooLarge, problem.BodyTooLarge}, {http.StatusUnsupportedMediaType, problem.UnsupportedMediaType},
		{http.StatusTooManyRequests, problem.RateLimited}, {http.StatusInternalServerError, problem.Internal},
		{http.StatusServiceUnavailable, problem.ServiceUnavailable},
	}
	// Keyed: a POST run under an Idempotency-Key by the engine.
	Keyed = Errors(Authenticated, []Error{
		{http.StatusBadRequest, problem.IdempotencyKeyMissing}, {http.StatusBadRequest, problem.IdempotencyKeyInvalid},
		{http.StatusConflict, problem.IdempotencyKeyInUse}, {http.StatusConflict, problem.IdempotencyKeyNeedsAttention},
		{http.StatusUnprocessableEntity, problem.IdempotencyKeyReused},
	})
	// NotFound: a route with an id in its path.
	NotFound = []Error{{http.StatusNotFound, problem.NotFound}}
)

// Statuses are the route's statuses, its success first, then its errors'
// in increasing order, each once.
func (r Route) Statuses() []int {
	var errs []int
	for _, e := range r.Errors {
		if !slices.Contains(errs, e.Status) {
			errs = append(errs, e.Status)
		}
	}
	slices.Sort(errs)
	return append([]int{r.Status}, errs...)
}

// String is "METHOD /path".
func (r Route) String() string { return r.Method + " " + r.Path }

// Table is the README's table of routes, one row per route in the order
// given, as Markdown.
func Table(routes []Route) string {
	var b strings.Builder
	b.WriteString("| route | flow | answer (its Go type) | events | Go client |\n|---|---|---|---|---|\n")
	for _, r := range routes {
		flow, events, client := "none", "none", "`"+r.Client+"`"
		if r.Flow != "" {
			flow = "`" + r.Flow + "`"
		}
		if len(r.Events) > 0 {
			events = "`" + strings.Join(r.Events, "`, `") + "`"
		}
		if r.Client == "" {
			client = "none: " + r.NoClient
		}
		answer := fmt.Sprint(r.Status)
		if r.Answer != nil {
			answer += " `" + typeName(reflect.TypeOf(r.Answer)) + "`"
		}
		fmt.Fprintf(&b, "| `%s` %s | %s | %s | %s | %s |\n", r, r.Summary, flow, answer, events, client)
	}
	return b.String()
}

// typeName is t's name without package paths: "listJSON[Payment]".
func typeName(t reflect.Type) string {
	return qualifier.ReplaceAllString(t.String(), "")
}

var qualifier = regexp.MustCompile(`[\w./-]*\.`)
