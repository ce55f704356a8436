package client

import "encoding/json"

// PaymentStatus is where a payment stands.
type PaymentStatus string

// The statuses of a payment.
const (
	PaymentProcessing      PaymentStatus = "processing"
	PaymentRequiresCapture PaymentStatus = "requires_capture"
	PaymentSucceeded       PaymentStatus = "succeeded"
	PaymentFailed          PaymentStatus = "failed"
	PaymentCanceled        PaymentStatus = "canceled"
)

// Payment is the API's Payment object. Amounts are in the currency's minor
// unit (2000 is $20.00); times are Unix seconds.
type Payment struct {
	ID                  string            `json:"id"`
	Object              string            `json:"object"`
	Amount              int64             `json:"amount"`
	Currency            string            `json:"currency"`
	Status              PaymentStatus     `json:"status"`
	Captured            bool              `json:"captured"`
	AmountCaptured      int64             `json:"amount_captured"`
	AmountRefunded      int64             `json:"amount_refunded"`
	PaymentMethod       string            `json:"payment_method"`
	StripePaymentIntent *string           `json:"stripe_payment_intent"`
	FailureCode         *string           `json:"failure_code"`
	FailureMessage      *string           `json:"failure_message"`
	Description         *string           `json:"description"`
	Metadata            map[string]string `json:"metadata"`
	Created             int64             `json:"created"`
	// Dispute is the payment's chargeback as Stripe reports it; nil until
	// one exists.
	Dispute *Dispute `json:"dispute"`
	// DuplicateCharges are the PaymentIntents Stripe made for the payment
	// beyond the one recorded, each refunded by the service; nil while
	// there is none.
	DuplicateCharges []DuplicateCharge `json:"duplicate_charges"`
	// Replayed is true when the answer was replayed from the key's stored
	// answer (the request was executed once, earlier).
	Replayed bool `json:"-"`
}

// Dispute is a payment's chargeback, Stripe's statuses as they are
// (needs_response, under_review, won, lost, warning_*).
type Dispute struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Amount  int64  `json:"amount"`
	Created int64  `json:"created"`
}

// DuplicateCharge is a second PaymentIntent Stripe made for a payment, and
// where its refund stands (refund_pending, refunded, refund_failed).
type DuplicateCharge struct {
	StripePaymentIntent string `json:"stripe_payment_intent"`
	Amount              int64  `json:"amount"`
	Status              string `json:"status"`
}

// RefundStatus is where a refund stands.
type RefundStatus string

// The statuses of a refund. Stripe decides some refunds later: a pending
// refund becomes succeeded or failed, and a succeeded one may still fail.
const (
	RefundPending   RefundStatus = "pending"
	RefundSucceeded RefundStatus = "succeeded"
	RefundFailed    RefundStatus = "failed"
)

// Refund is the API's Refund object.
type Refund struct {
	ID            string       `json:"id"`
	Object        string       `json:"object"`
	Payment       string       `json:"payment"`
	Amount        int64        `json:"amount"`
	Status        RefundStatus `json:"status"`
	StripeRefund  *string      `json:"stripe_refund"`
	Reason        *string      `json:"reason"`
	FailureReason *string      `json:"failure_reason"`
	// Origin is "api" for a refund made with this API, "external" for one
	// made outside it (Stripe's dashboard), "duplicate" for a second refund
	// Stripe made for one of this API's.
	Origin   string `json:"origin"`
	Created  int64  `json:"created"`
	Replayed bool   `json:"-"`
}

// IdempotencyKey is where a request made with a key stands.
type IdempotencyKey struct {
	Object        string `json:"object"`
	Key           string `json:"key"`
	RecoveryPoint string `json:"recovery_point"` // "started", the flow's own points, "finished"
	Locked        bool   `json:"locked"`         // a request with the key is running
	RequestMethod string `json:"request_method"`
	RequestPath   string `json:"request_path"`
	ResponseCode  *int   `json:"response_code"` // nil until the request finished
	Created       int64  `json:"created"`
	ExpiresAt     *int64 `json:"expires_at"` // nil while unfinished: such a key never expires
	Replayed      bool   `json:"-"`
}

// Event is one event of the merchant's feed: a state change of a payment
// or a refund.
type Event struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	Type   string `json:"type"` // payment.succeeded, payment.failed, payment.captured, payment.canceled, payment.disputed, payment.dispute_closed, payment.duplicate_refunded, refund.succeeded, refund.failed
	Data   struct {
		// Object is the payment or refund as it was when the change
		// committed; decode it with Payment or Refund.
		Object json.RawMessage `json:"object"`
	} `json:"data"`
	Created  int64 `json:"created"`
	Replayed bool  `json:"-"`
}

// Payment decodes the event's object as a payment (for payment.* events).
func (e *Event) Payment() (*Payment, error) {
	var p Payment
	return &p, json.Unmarshal(e.Data.Object, &p)
}

// Refund decodes the event's object as a refund (for refund.* events).
func (e *Event) Refund() (*Refund, error) {
	var r Refund
	return &r, json.Unmarshal(e.Data.Object, &r)
}

// WebhookEndpoint is where the merchant's events are POSTed.
type WebhookEndpoint struct {
	ID            string   `json:"id"`
	Object        string   `json:"object"`
	URL           string   `json:"url"`
	EnabledEvents []string `json:"enabled_events"`
	Description   *string  `json:"description"`
	Status        string   `json:"status"`
	// Secret signs the deliveries (Standard Webhooks). Only the answer that
	// created the endpoint, and its replays, carry it.
	Secret   string `json:"secret,omitempty"`
	Created  int64  `json:"created"`
	Replayed bool   `json:"-"`
}

// DeletedWebhookEndpoint is the answer to DeleteWebhookEndpoint.
type DeletedWebhookEndpoint struct {
	ID       string `json:"id"`
	Object   string `json:"object"`
	Deleted  bool   `json:"deleted"`
	Replayed bool   `json:"-"`
}

// WebhookDelivery is an event's delivery to one endpoint.
type WebhookDelivery struct {
	Object         string  `json:"object"`
	Event          string  `json:"event"`
	Endpoint       string  `json:"endpoint"`
	Status         string  `json:"status"` // pending, succeeded, failed
	Attempts       int     `json:"attempts"`
	LastStatusCode *int    `json:"last_status_code"`
	LastError      *string `json:"last_error"`
	NextAttempt    *int64  `json:"next_attempt"`
	Created        int64   `json:"created"`
}

// List is a page of a list, newest first. HasMore says whether a next page
// exists: ask for it with StartingAfter set to the last item's id.
type List[T any] struct {
	Object   string `json:"object"`
	Data     []T    `json:"data"`
	HasMore  bool   `json:"has_more"`
	Replayed bool   `json:"-"`
}

// The params below follow one rule: an optional field is a pointer (set it
// with Int64, String or Bool), nil leaves it out of the request and lets
// the service's default apply, and a value set is sent as it is, zero
// included (a refund of amount 0 is refused, not taken for "all of it").
// CreatePaymentParams keeps its plain Amount, Currency and PaymentMethod:
// they are required.

// CreatePaymentParams is the body of CreatePayment. Capture nil means
// true; false only authorises (status requires_capture), and CapturePayment
// or CancelPayment finishes the payment.
type CreatePaymentParams struct {
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	PaymentMethod string            `json:"payment_method"`
	Capture       *bool             `json:"capture,omitempty"`
	Description   *string           `json:"description,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
}

// CapturePaymentParams is the body of CapturePayment; Amount nil captures
// all that was authorised.
type CapturePaymentParams struct {
	Amount *int64 `json:"amount,omitempty"`
}

// CreateRefundParams is the body of CreateRefund. Amount nil refunds what
// is left; Reason, when set, is "duplicate", "fraudulent" or
// "requested_by_customer".
type CreateRefundParams struct {
	Payment string  `json:"payment"`
	Amount  *int64  `json:"amount,omitempty"`
	Reason  *string `json:"reason,omitempty"`
}

// CreateWebhookEndpointParams is the body of CreateWebhookEndpoint.
// EnabledEvents nil subscribes to every type ("*").
type CreateWebhookEndpointParams struct {
	URL           string   `json:"url"`
	EnabledEvents []string `json:"enabled_events,omitempty"`
	Description   *string  `json:"description,omitempty"`
}

// ListParams pages a list: Limit 1..100 items a page (nil: the service's
// default, 10), and StartingAfter the id of the last item of the previous
// page (nil: from the newest). The iterators (ListPayments, ...) start
// after StartingAfter and fetch every page after it, Limit items at a time.
type ListParams struct {
	Limit         *int64
	StartingAfter *string
}

// ListEventsParams pages the event feed as ListParams does; Type, when
// set, keeps the events of that type only.
type ListEventsParams struct {
	Limit         *int64
	StartingAfter *string
	Type          *string
}

// Bool returns a pointer to b, for the optional fields of params.
func Bool(b bool) *bool { return &b }

// String returns a pointer to s, for the optional fields of params.
func String(s string) *string { return &s }

// Int64 returns a pointer to n, for the optional fields of params.
func Int64(n int64) *int64 { return &n }
