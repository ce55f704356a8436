package stripesim

import (
	"crypto/rand"
	"encoding/json"
)

// state is everything the simulator knows; Simulator.mu guards it and Reset
// replaces it whole.
type state struct {
	customers      table[customer]
	paymentIntents table[paymentIntent]
	charges        table[charge]
	refunds        table[refund]
	disputes       table[dispute]
	events         table[event]

	later []laterChange // Stripe's outcomes still to come, by due time
	// lateRequests counts the requests a late_500 answered that Stripe has
	// not executed yet (FaultLate500).
	lateRequests int

	keys     map[keyScope]*keyEntry
	keyOrder []claimedKey // keys' claims, oldest first, for forgetExpiredKeys
	faults   []*Fault
	requests []*RequestRecord
}

func newState() *state {
	return &state{keys: make(map[keyScope]*keyEntry)}
}

// table holds the objects of one type by id and in order of creation.
type table[T any] struct {
	byID  map[string]*T
	order []*T
}

func (t *table[T]) add(id string, v *T) {
	if t.byID == nil {
		t.byID = make(map[string]*T)
	}
	t.byID[id] = v
	t.order = append(t.order, v)
}

func (t *table[T]) get(id string) (*T, bool) {
	v, ok := t.byID[id]
	return v, ok
}

// newID returns a fresh Stripe-looking id such as "pi_3MTQ...".
func newID(prefix string) string {
	return prefix + "_" + rand.Text()
}

// The types below are the JSON shapes of Stripe's objects at API version
// 2023-10-16, reduced to the fields this project reads. Nullable fields are
// pointers so that they encode as null, as Stripe's do.

type customer struct {
	ID          string   `json:"id"`
	Object      string   `json:"object"`
	Created     int64    `json:"created"`
	Description *string  `json:"description"`
	Email       *string  `json:"email"`
	Livemode    bool     `json:"livemode"`
	Metadata    metadata `json:"metadata"`
	Name        *string  `json:"name"`
}

type paymentIntent struct {
	ID                 string          `json:"id"`
	Object             string          `json:"object"`
	Amount             int64           `json:"amount"`
	AmountCapturable   int64           `json:"amount_capturable"`
	AmountReceived     int64           `json:"amount_received"`
	CanceledAt         *int64          `json:"canceled_at"`
	CancellationReason *string         `json:"cancellation_reason"`
	CaptureMethod      string          `json:"capture_method"`
	ClientSecret       string          `json:"client_secret"`
	ConfirmationMethod string          `json:"confirmation_method"`
	Created            int64           `json:"created"`
	Currency           string          `json:"currency"`
	Customer           *string         `json:"customer"`
	Description        *string         `json:"description"`
	LastPaymentError   *apiError       `json:"last_payment_error"`
	LatestCharge       *string         `json:"latest_charge"`
	Livemode           bool            `json:"livemode"`
	Metadata           metadata        `json:"metadata"`
	NextAction         json.RawMessage `json:"next_action"` // nil encodes as null
	PaymentMethod      *string         `json:"payment_method"`
	PaymentMethodTypes []string        `json:"payment_method_types"`
	Status             string          `json:"status"`
}

// Payment intent statuses used by the simulator.
const (
	statusRequiresPaymentMethod = "requires_payment_method"
	statusRequiresConfirmation  = "requires_confirmation"
	statusRequiresAction        = "requires_action"
	statusRequiresCapture       = "requires_capture"
	statusProcessing            = "processing"
	statusSucceeded             = "succeeded"
	statusCanceled              = "canceled"
)

type charge struct {
	ID             string         `json:"id"`
	Object         string         `json:"object"`
	Amount         int64          `json:"amount"`
	AmountCaptured int64          `json:"amount_captured"`
	AmountRefunded int64          `json:"amount_refunded"`
	BillingDetails billingDetails `json:"billing_details"` // a test card's: none
	Captured       bool           `json:"captured"`
	Created        int64          `json:"created"`
	Currency       string         `json:"currency"`
	Customer       *string        `json:"customer"`
	Description    *string        `json:"description"`
	Disputed       bool           `json:"disputed"` // a dispute was opened on it (disputes.go)
	FailureCode    *string        `json:"failure_code"`
	FailureMessage *string        `json:"failure_message"`
	Livemode       bool           `json:"livemode"`
	Metadata       metadata       `json:"metadata"`
	Paid           bool           `json:"paid"`
	PaymentIntent  string         `json:"payment_intent"`
	PaymentMethod  string         `json:"payment_method"`
	Refunded       bool           `json:"refunded"`
	Status         string         `json:"status"` // succeeded or failed

	// released is the part of the authorisation released uncaptured (by a
	// partial capture or a cancel). Stripe counts it in AmountRefunded,
	// though it was never charged, so it is no refund: refundable leaves it
	// out.
	released int64
}

// refundable is what is left to refund on the charge: what was captured,
// less the refunds that have not failed.
func (c *charge) refundable() int64 {
	return c.AmountCaptured - (c.AmountRefunded - c.released)
}

// release releases amount of the authorisation without capturing it.
func (c *charge) release(amount int64) {
	c.released += amount
	c.AmountRefunded += amount
	c.Refunded = c.AmountRefunded == c.Amount
}

// refund counts amount refunded (a negative amount: a refund that failed).
func (c *charge) refund(amount int64) {
	c.AmountRefunded += amount
	c.Refunded = c.AmountRefunded == c.Amount
}

type refund struct {
	ID            string   `json:"id"`
	Object        string   `json:"object"`
	Amount        int64    `json:"amount"`
	Charge        string   `json:"charge"`
	Created       int64    `json:"created"`
	Currency      string   `json:"currency"`
	Metadata      metadata `json:"metadata"`
	PaymentIntent string   `json:"payment_intent"`
	Reason        *string  `json:"reason"`
	Status        string   `json:"status"` // pending, succeeded or failed
	// FailureReason is set once a refund failed. Stripe's refund has no
	// null here: the field is absent until there is a reason.
	FailureReason string `json:"failure_reason,omitempty"`
}

// paymentMethod is the card behind a test payment method, as Stripe embeds
// it in a card error (error.payment_method, and last_payment_error's): a
// payment_method object with the fields Stripe's schema requires.
type paymentMethod struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	BillingDetails billingDetails    `json:"billing_details"`
	Card           paymentMethodCard `json:"card"`
	Created        int64             `json:"created"`
	Customer       *string           `json:"customer"`
	Livemode       bool              `json:"livemode"`
	Metadata       metadata          `json:"metadata"`
	Type           string            `json:"type"`
}

// billingDetails are a payment method's billing details; a test card has
// none, and Stripe sends each as null.
type billingDetails struct {
	Address json.RawMessage `json:"address"` // nil encodes as null
	Email   *string         `json:"email"`
	Name    *string         `json:"name"`
	Phone   *string         `json:"phone"`
}

// paymentMethodCard is a payment method's card.
type paymentMethodCard struct {
	Brand    string  `json:"brand"`
	Country  *string `json:"country"`
	ExpMonth int64   `json:"exp_month"`
	ExpYear  int64   `json:"exp_year"`
	Funding  string  `json:"funding"`
	Last4    string  `json:"last4"`
}

// snapshot encodes v as it is now. Responses and events carry snapshots, so
// later changes to the object never leak into them.
func snapshot(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		// Only plain structs, strings and maps are encoded here.
		panic("stripesim: encoding a snapshot: " + err.Error())
	}
	return b
}

// nullable returns nil for "" so that an absent string encodes as null.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
