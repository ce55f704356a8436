package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"

	"github.com/example/payments/internal/events"
	"github.com/example/payments/internal/merchanthooks"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/problem"
	"github.com/example/payments/internal/route"
)

// served is one route of the API: its declaration, and the handler that
// serves it.
type served struct {
	route.Route
	handle func(*Server) http.Handler
}

// Routes are the API's routes, as declared: the router is built from them
// (NewHandler), and internal/api's tests hold them to the OpenAPI
// document, the README's route table and the Go client
// (routetest.Check). The order is the README table's.
func Routes() []route.Route {
	var routes []route.Route
	for _, s := range servedRoutes() {
		routes = append(routes, s.Route)
	}
	return routes
}

// The errors of the service's own routes, beyond route.Authenticated and
// route.Keyed.
var (
	declined    = []route.Error{{Status: http.StatusPaymentRequired, Code: problem.CardDeclined}, {Status: http.StatusBadRequest, Code: problem.ValidationFailed}}
	stripeDown  = []route.Error{{Status: http.StatusServiceUnavailable, Code: problem.PaymentProcessorUnavailable}}
	paymentBusy = []route.Error{
		{Status: http.StatusConflict, Code: problem.PaymentProcessing}, {Status: http.StatusBadRequest, Code: problem.PaymentNotCapturable},
	}
)

// servedRoutes declares every route, once, with its handler.
func servedRoutes() []served {
	keyed := func(extra ...[]route.Error) []route.Error {
		return route.Errors(append([][]route.Error{route.Keyed}, extra...)...)
	}
	authed := func(extra ...[]route.Error) []route.Error {
		return route.Errors(append([][]route.Error{route.Authenticated}, extra...)...)
	}
	return []served{
		{route.Route{
			Method: http.MethodPost, Path: "/v1/payments", Summary: "charges or authorises a payment",
			Flow: "create_payment", Request: createPaymentRequest{}, Answer: payments.Payment{}, Status: http.StatusCreated,
			Errors: keyed(declined, stripeDown), Events: []string{"payment.succeeded", "payment.failed", "payment.canceled"},
			Client: "CreatePayment",
		}, handler((*Server).createPayment)},
		{route.Route{
			Method: http.MethodPost, Path: "/v1/payments/{id}/capture", Summary: "captures an authorised payment",
			Flow: "capture_payment", Request: captureRequest{}, Answer: payments.Payment{}, Status: http.StatusOK,
			Errors: keyed(route.NotFound, paymentBusy, stripeDown), Events: []string{"payment.captured"},
			Client: "CapturePayment",
		}, handler((*Server).capturePayment)},
		{route.Route{
			Method: http.MethodPost, Path: "/v1/payments/{id}/cancel", Summary: "releases an authorised payment",
			Flow: "cancel_payment", Request: struct{}{}, Answer: payments.Payment{}, Status: http.StatusOK,
			Errors: keyed(route.NotFound, paymentBusy, stripeDown), Events: []string{"payment.canceled"},
			Client: "CancelPayment",
		}, handler((*Server).cancelPayment)},
		{route.Route{
			Method: http.MethodPost, Path: "/v1/refunds", Summary: "refunds a captured payment",
			Flow: "refund_payment", Request: createRefundRequest{}, Answer: payments.Refund{}, Status: http.StatusCreated,
			Errors: keyed(route.NotFound, stripeDown, []route.Error{
				{Status: http.StatusBadRequest, Code: problem.RefundNotAllowed}, {Status: http.StatusBadRequest, Code: problem.PaymentDisputed},
				{Status: http.StatusConflict, Code: problem.PaymentProcessing},
			}),
			Events: []string{"refund.succeeded", "refund.failed"}, Client: "CreateRefund",
		}, handler((*Server).createRefund)},
		{route.Route{
			Method: http.MethodGet, Path: "/v1/payments/{id}", Summary: "one payment",
			Answer: payments.Payment{}, Status: http.StatusOK, Errors: authed(route.NotFound), Client: "GetPayment",
		}, handler((*Server).getPayment)},
		{route.Route{
			Method: http.MethodGet, Path: "/v1/payments", Summary: "the payments, newest first",
			Answer: listJSON[payments.Payment]{}, Status: http.StatusOK, Errors: authed(), Client: "ListPaymentsPage",
		}, handler((*Server).listPayments)},
		{route.Route{
			Method: http.MethodGet, Path: "/v1/refunds/{id}", Summary: "one refund",
			Answer: payments.Refund{}, Status: http.StatusOK, Errors: authed(route.NotFound), Client: "GetRefund",
		}, handler((*Server).getRefund)},
		{route.Route{
			Method: http.MethodGet, Path: "/v1/idempotency_keys/{key}", Summary: "where a request stands",
			Answer: keyObject{}, Status: http.StatusOK, Errors: authed(route.NotFound), Client: "GetIdempotencyKey",
		}, handler((*Server).getIdempotencyKey)},
		{route.Route{
			Method: http.MethodGet, Path: "/v1/events", Summary: "the merchant's events, newest first",
			Answer: listJSON[events.Event]{}, Status: http.StatusOK, Errors: authed(), Client: "ListEventsPage",
		}, handler((*Server).listEvents)},
		{route.Route{
			Method: http.MethodGet, Path: "/v1/events/{id}", Summary: "one event",
			Answer: events.Event{}, Status: http.StatusOK, Errors: authed(route.NotFound), Client: "GetEvent",
		}, handler((*Server).getEvent)},
		{route.Route{
			Method: http.MethodGet, Path: "/v1/events/{id}/deliveries", Summary: "an event's delivery to each endpoint",
			Answer: listJSON[merchanthooks.Delivery]{}, Status: http.StatusOK, Errors: authed(route.NotFound), Client: "ListEventDeliveries",
		}, handler((*Server).listDeliveries)},
		{route.Route{
			Method: http.MethodPost, Path: "/v1/events/{id}/redeliver", Summary: "sends an event again",
			Flow: "redeliver_event", Request: struct{}{}, Answer: listJSON[merchanthooks.Delivery]{}, Status: http.StatusOK,
			Errors: keyed(route.NotFound), Client: "RedeliverEvent",
		}, handler((*Server).redeliverEvent)},
		{route.Route{
			Method: http.MethodPost, Path: "/v1/webhook_endpoints", Summary: "adds a webhook endpoint",
			Flow: "create_webhook_endpoint", Request: createEndpointRequest{}, Answer: merchanthooks.Endpoint{}, Status: http.StatusCreated,
			Errors: keyed(), Client: "CreateWebhookEndpoint",
		}, handler((*Server).createWebhookEndpoint)},
		{route.Route{
			Method: http.MethodGet, Path: "/v1/webhook_endpoints", Summary: "the webhook endpoints, newest first",
			Answer: listJSON[merchanthooks.Endpoint]{}, Status: http.StatusOK, Errors: authed(), Client: "ListWebhookEndpointsPage",
		}, handler((*Server).listWebhookEndpoints)},
		{route.Route{
			Method: http.MethodGet, Path: "/v1/webhook_endpoints/{id}", Summary: "one webhook endpoint",
			Answer: merchanthooks.Endpoint{}, Status: http.StatusOK, Errors: authed(route.NotFound), Client: "GetWebhookEndpoint",
		}, handler((*Server).getWebhookEndpoint)},
		{route.Route{
			Method: http.MethodDelete, Path: "/v1/webhook_endpoints/{id}", Summary: "stops sending to an endpoint",
			Answer: deletedEndpoint{}, Status: http.StatusOK, Errors: authed(route.NotFound), Client: "DeleteWebhookEndpoint",
		}, handler((*Server).deleteWebhookEndpoint)},
		{route.Route{
			Method: http.MethodPost, Path: "/v1/stripe/webhooks", Summary: "Stripe's events, signed",
			Public:  true, // Stripe signs its deliveries instead of sending an API key
			Request: json.RawMessage{}, Answer: webhookReceipt{}, Status: http.StatusOK,
			Errors: []route.Error{
				{Status: http.StatusBadRequest, Code: problem.WebhookSignatureInvalid}, {Status: http.StatusBadRequest, Code: problem.ValidationFailed},
				{Status: http.StatusRequestEntityTooLarge, Code: problem.BodyTooLarge}, {Status: http.StatusInternalServerError, Code: problem.Internal},
				{Status: http.StatusServiceUnavailable, Code: problem.ServiceUnavailable},
			},
			// Whatever Stripe tells of a payment or refund, each change announced once.
			Events: []string{
				"payment.succeeded", "payment.failed", "payment.captured", "payment.canceled", "payment.disputed",
				"payment.dispute_closed", "payment.duplicate_refunded", "refund.succeeded", "refund.failed",
			},
			NoClient: "Stripe calls it",
		}, handler((*Server).receiveStripeWebhook)},
		{route.Route{Method: http.MethodGet, Path: "/healthz", Summary: "the process is up", Public: true,
			Answer: health{}, Status: http.StatusOK, Client: "Health"},
			func(s *Server) http.Handler { return http.HandlerFunc(s.healthz) }},
		{route.Route{Method: http.MethodGet, Path: "/readyz", Summary: "a commit is possible", Public: true,
			Answer: health{}, Status: http.StatusOK, Errors: []route.Error{{Status: http.StatusServiceUnavailable, Code: problem.ServiceUnavailable}},
			Client: "Ready"},
			func(s *Server) http.Handler { return http.HandlerFunc(s.readyz) }},
		{route.Route{Method: http.MethodGet, Path: "/openapi.json", Summary: "this API's OpenAPI document", Public: true,
			Status: http.StatusOK, Client: "OpenAPIDocument"},
			func(*Server) http.Handler { return http.HandlerFunc(serveOpenAPI) }},
		{route.Route{Method: http.MethodGet, Path: "/metrics", Summary: "Prometheus text, to a client on the machine itself", Public: true,
			Status: http.StatusOK, Errors: route.NotFound, Client: "Metrics"},
			func(s *Server) http.Handler { return localOnly(s.metricsHandler) }},
	}
}

// handler serves a route with one of the Server's handler methods.
func handler(method func(*Server, http.ResponseWriter, *http.Request) error) func(*Server) http.Handler {
	return func(s *Server) http.Handler {
		return s.handle(func(w http.ResponseWriter, r *http.Request) error { return method(s, w, r) })
	}
}

// teamRoute serves a team's route (Config.Routes): the key and the body,
// read strictly into a new value of the route's Request type as the
// service's own routes read theirs; the route's Params check it; the
// engine runs its flow under the key; the answer is the engine's.
func (s *Server) teamRoute(rt route.Route) (http.Handler, error) {
	flow, ok := s.engine.Flow(rt.Flow)
	switch {
	case rt.Params == nil || rt.Request == nil:
		return nil, fmt.Errorf("route %s: a team's route declares its Request and Params", rt)
	case rt.Public || !strings.HasPrefix(rt.Path, "/v1/"):
		return nil, fmt.Errorf("route %s: a team's route is served under /v1, behind its authentication", rt)
	case !ok:
		return nil, fmt.Errorf("route %s: its flow %q is not registered with the engine", rt, rt.Flow)
	}
	typ := reflect.TypeOf(rt.Request)
	return s.handle(func(w http.ResponseWriter, r *http.Request) error {
		body := reflect.New(typ).Interface()
		idem, err := readIdempotent(r, body, false)
		if err != nil {
			return err
		}
		params, err := rt.Params(body)
		if err != nil {
			return err
		}
		req := engineRequest(idem)
		req.Params, req.Flow = params, flow
		resp, err := s.engine.Execute(r.Context(), req)
		s.writeExecution(w, r, resp, err)
		return nil
	}), nil
}

// The answers declared above whose types had no name.
type (
	deletedEndpoint struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Deleted bool   `json:"deleted"`
	}
	webhookReceipt struct { // written as a map: its keys in this order
		Outcome  string `json:"outcome"`
		Received bool   `json:"received"`
	}
	health struct {
		Status string `json:"status"`
	}
)
