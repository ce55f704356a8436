package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"
)

// The methods below are one per route of the API, in the order of docs/API.md.
// POSTs carry an Idempotency-Key (WithIdempotencyKey, or one made per call);
// every method retries as the package comment says.

// CreatePayment charges (or, with Capture false, authorises) a payment:
// POST /v1/payments.
func (c *Client) CreatePayment(ctx context.Context, params CreatePaymentParams, opts ...RequestOption) (*Payment, error) {
	var p Payment
	replayed, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/payments", body: params, out: &p, keyed: true, opts: opts})
	if err != nil {
		return nil, err
	}
	p.Replayed = replayed
	return &p, nil
}

// CapturePayment captures an authorised payment, all of it or
// params.Amount: POST /v1/payments/{id}/capture.
func (c *Client) CapturePayment(ctx context.Context, id string, params CapturePaymentParams, opts ...RequestOption) (*Payment, error) {
	if id == "" {
		return nil, errEmptyID
	}
	var body any
	if params != (CapturePaymentParams{}) {
		body = params
	}
	return c.paymentAction(ctx, "/v1/payments/"+escape(id)+"/capture", body, opts)
}

// CancelPayment releases an authorised payment: POST /v1/payments/{id}/cancel.
func (c *Client) CancelPayment(ctx context.Context, id string, opts ...RequestOption) (*Payment, error) {
	if id == "" {
		return nil, errEmptyID
	}
	return c.paymentAction(ctx, "/v1/payments/"+escape(id)+"/cancel", nil, opts)
}

func (c *Client) paymentAction(ctx context.Context, path string, body any, opts []RequestOption) (*Payment, error) {
	var p Payment
	replayed, err := c.do(ctx, call{method: http.MethodPost, path: path, body: body, out: &p, keyed: true, opts: opts})
	if err != nil {
		return nil, err
	}
	p.Replayed = replayed
	return &p, nil
}

// GetPayment returns one payment: GET /v1/payments/{id}.
func (c *Client) GetPayment(ctx context.Context, id string) (*Payment, error) {
	if id == "" {
		return nil, errEmptyID
	}
	var p Payment
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/payments/" + escape(id), out: &p}); err != nil {
		return nil, err
	}
	return &p, nil
}

// ListPayments iterates over the payments, newest first, fetching the
// pages of GET /v1/payments as the loop needs them (params.Limit items
// each). An error ends the iteration: it is yielded once, with a nil
// payment.
//
//	for p, err := range c.ListPayments(ctx, client.ListParams{}) {
//		if err != nil {
//			return err
//		}
//		...
//	}
func (c *Client) ListPayments(ctx context.Context, params ListParams) iter.Seq2[*Payment, error] {
	return autoPage(params.StartingAfter, func(after *string) (*List[Payment], error) {
		return c.ListPaymentsPage(ctx, ListParams{Limit: params.Limit, StartingAfter: after})
	}, func(p *Payment) string { return p.ID })
}

// ListPaymentsPage returns one page of payments, newest first:
// GET /v1/payments.
func (c *Client) ListPaymentsPage(ctx context.Context, params ListParams) (*List[Payment], error) {
	return list[Payment](ctx, c, "/v1/payments", params.query())
}

// CreateRefund refunds a captured payment: POST /v1/refunds.
func (c *Client) CreateRefund(ctx context.Context, params CreateRefundParams, opts ...RequestOption) (*Refund, error) {
	var r Refund
	replayed, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/refunds", body: params, out: &r, keyed: true, opts: opts})
	if err != nil {
		return nil, err
	}
	r.Replayed = replayed
	return &r, nil
}

// GetRefund returns one refund: GET /v1/refunds/{id}.
func (c *Client) GetRefund(ctx context.Context, id string) (*Refund, error) {
	if id == "" {
		return nil, errEmptyID
	}
	var r Refund
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/refunds/" + escape(id), out: &r}); err != nil {
		return nil, err
	}
	return &r, nil
}

// GetIdempotencyKey says where the request made with key stands:
// GET /v1/idempotency_keys/{key}.
func (c *Client) GetIdempotencyKey(ctx context.Context, key string) (*IdempotencyKey, error) {
	if key == "" {
		return nil, errEmptyID
	}
	var k IdempotencyKey
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/idempotency_keys/" + escape(key), out: &k}); err != nil {
		return nil, err
	}
	return &k, nil
}

// ListEvents iterates over the merchant's events (of params.Type only,
// when set), newest first, fetching the pages of GET /v1/events as the
// loop needs them; an error is yielded once and ends it.
func (c *Client) ListEvents(ctx context.Context, params ListEventsParams) iter.Seq2[*Event, error] {
	return autoPage(params.StartingAfter, func(after *string) (*List[Event], error) {
		return c.ListEventsPage(ctx, ListEventsParams{Limit: params.Limit, StartingAfter: after, Type: params.Type})
	}, func(e *Event) string { return e.ID })
}

// ListEventsPage returns one page of the merchant's events, newest first:
// GET /v1/events.
func (c *Client) ListEventsPage(ctx context.Context, params ListEventsParams) (*List[Event], error) {
	q := ListParams{Limit: params.Limit, StartingAfter: params.StartingAfter}.query()
	if params.Type != nil {
		q.Set("type", *params.Type)
	}
	return list[Event](ctx, c, "/v1/events", q)
}

// GetEvent returns one event: GET /v1/events/{id}.
func (c *Client) GetEvent(ctx context.Context, id string) (*Event, error) {
	if id == "" {
		return nil, errEmptyID
	}
	var e Event
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/events/" + escape(id), out: &e}); err != nil {
		return nil, err
	}
	return &e, nil
}

// ListEventDeliveries returns the event's deliveries, one per endpoint it
// is sent to, all of them (the route is not paged):
// GET /v1/events/{id}/deliveries.
func (c *Client) ListEventDeliveries(ctx context.Context, id string) (*List[WebhookDelivery], error) {
	if id == "" {
		return nil, errEmptyID
	}
	return list[WebhookDelivery](ctx, c, "/v1/events/"+escape(id)+"/deliveries", nil)
}

// RedeliverEvent sends the event again, at once, to every endpoint that
// subscribes to it: POST /v1/events/{id}/redeliver.
func (c *Client) RedeliverEvent(ctx context.Context, id string, opts ...RequestOption) (*List[WebhookDelivery], error) {
	if id == "" {
		return nil, errEmptyID
	}
	var l List[WebhookDelivery]
	replayed, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/events/" + escape(id) + "/redeliver", out: &l, keyed: true, opts: opts})
	if err != nil {
		return nil, err
	}
	l.Replayed = replayed
	return &l, nil
}

// CreateWebhookEndpoint registers an endpoint; the answer (and its replays
// only) carries its signing secret: POST /v1/webhook_endpoints.
func (c *Client) CreateWebhookEndpoint(ctx context.Context, params CreateWebhookEndpointParams, opts ...RequestOption) (*WebhookEndpoint, error) {
	var e WebhookEndpoint
	replayed, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/webhook_endpoints", body: params, out: &e, keyed: true, opts: opts})
	if err != nil {
		return nil, err
	}
	e.Replayed = replayed
	return &e, nil
}

// ListWebhookEndpoints iterates over the endpoints, newest first, without
// their secrets, fetching the pages of GET /v1/webhook_endpoints as the
// loop needs them; an error is yielded once and ends it.
func (c *Client) ListWebhookEndpoints(ctx context.Context, params ListParams) iter.Seq2[*WebhookEndpoint, error] {
	return autoPage(params.StartingAfter, func(after *string) (*List[WebhookEndpoint], error) {
		return c.ListWebhookEndpointsPage(ctx, ListParams{Limit: params.Limit, StartingAfter: after})
	}, func(e *WebhookEndpoint) string { return e.ID })
}

// ListWebhookEndpointsPage returns one page of endpoints, newest first,
// without their secrets: GET /v1/webhook_endpoints.
func (c *Client) ListWebhookEndpointsPage(ctx context.Context, params ListParams) (*List[WebhookEndpoint], error) {
	return list[WebhookEndpoint](ctx, c, "/v1/webhook_endpoints", params.query())
}

// GetWebhookEndpoint returns one endpoint, without its secret:
// GET /v1/webhook_endpoints/{id}.
func (c *Client) GetWebhookEndpoint(ctx context.Context, id string) (*WebhookEndpoint, error) {
	if id == "" {
		return nil, errEmptyID
	}
	var e WebhookEndpoint
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/webhook_endpoints/" + escape(id), out: &e}); err != nil {
		return nil, err
	}
	return &e, nil
}

// DeleteWebhookEndpoint deletes an endpoint; nothing more is sent to it:
// DELETE /v1/webhook_endpoints/{id}.
func (c *Client) DeleteWebhookEndpoint(ctx context.Context, id string) (*DeletedWebhookEndpoint, error) {
	if id == "" {
		return nil, errEmptyID
	}
	var d DeletedWebhookEndpoint
	if _, err := c.do(ctx, call{method: http.MethodDelete, path: "/v1/webhook_endpoints/" + escape(id), out: &d}); err != nil {
		return nil, err
	}
	return &d, nil
}

// Health returns nil while the service's process is up: GET /healthz.
func (c *Client) Health(ctx context.Context) error {
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/healthz"})
	return err
}

// Ready returns nil when the service's database answers: GET /readyz.
// It does not retry a 503: the answer is the point.
func (c *Client) Ready(ctx context.Context) error {
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/readyz", once: true})
	return err
}

// Metrics returns the service's Prometheus metrics, in the text format:
// GET /metrics, which the service answers to a client on its own machine
// only (a *Error of status 404 to any other).
func (c *Client) Metrics(ctx context.Context) (string, error) {
	var text rawText
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/metrics", out: &text}); err != nil {
		return "", err
	}
	return string(text), nil
}

// OpenAPIDocument returns the API's OpenAPI 3.1 document: GET /openapi.json.
func (c *Client) OpenAPIDocument(ctx context.Context) ([]byte, error) {
	var doc rawText
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/openapi.json", out: &doc}); err != nil {
		return nil, err
	}
	return []byte(doc), nil
}

func list[T any](ctx context.Context, c *Client, path string, q url.Values) (*List[T], error) {
	var l List[T]
	if _, err := c.do(ctx, call{method: http.MethodGet, path: path, query: q, out: &l}); err != nil {
		return nil, err
	}
	return &l, nil
}

// autoPage yields the items of page(after) for after = start, then the
// last id of each page, until a page says it has no more. Only the pages
// the loop reaches are fetched.
func autoPage[T any](start *string, page func(after *string) (*List[T], error), id func(*T) string) iter.Seq2[*T, error] {
	return func(yield func(*T, error) bool) {
		after := start
		for {
			l, err := page(after)
			if err != nil {
				yield(nil, err)
				return
			}
			for i := range l.Data {
				if !yield(&l.Data[i], nil) {
					return
				}
			}
			if !l.HasMore || len(l.Data) == 0 {
				return
			}
			last := id(&l.Data[len(l.Data)-1])
			after = &last
		}
	}
}

func (p ListParams) query() url.Values {
	q := url.Values{}
	if p.Limit != nil {
		q.Set("limit", strconv.FormatInt(*p.Limit, 10))
	}
	if p.StartingAfter != nil {
		q.Set("starting_after", *p.StartingAfter)
	}
	return q
}

// rawText is an answer's body taken as it is, JSON or not (call.out).
type rawText []byte
