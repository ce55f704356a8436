package chaostest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/example/payments/internal/stripesim"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Snapshot is everything the checker reads at the end of a run: the
// service's tables and the simulator's objects.
type Snapshot struct {
	Payments   []Payment
	Refunds    []Refund
	Keys       []Key
	Events     []Event
	Receipts   []Receipt
	StagedJobs []StagedJob
	RiverJobs  []RiverJob
	Sim        SimState
	// KeysExpire is set when the run's key TTL was short: a key's row may
	// rightly be gone (reaped), and a payment's key with it.
	KeysExpire bool
	// DatabaseFails is set when the run's database failed under the
	// service (the HA run): a hostile body sent while no commit was
	// possible may rightly be refused 503 service_unavailable before it is
	// read (the API key is checked first, in the database), storing nothing.
	DatabaseFails bool
	// Mail is what the mail server saw.
	Mail MailState
	// Endpoints and Deliveries are the merchants' webhook endpoints and
	// the service's deliveries to them; Arrivals what the merchants'
	// receiver got.
	Endpoints  []Endpoint
	Deliveries []Delivery
	Arrivals   []Arrival
	// Redelivered are the events a merchant asked to redeliver (they may
	// reach endpoints newer than they are); RedeliveryProblems the
	// redeliveries the service refused.
	Redelivered        map[string]bool
	RedeliveryProblems []Violation
}

// MailState is what the run's mail server accepted.
type MailState struct {
	Accepted int // messages accepted, counting duplicates
	Distinct int // distinct Message-IDs accepted
	// Duplicates counts, by Message-ID, the receipts accepted more than once.
	Duplicates map[string]int
	// WorkersKilled is set when the run SIGKILLed workers, or stopped one
	// whose shutdown timeout cut the jobs still running (the run's is 5 s,
	// shorter than a send; the default, 35 s, is longer): a send cut
	// between the server's acceptance and its record sends that receipt
	// again (at least once at that one point; docs/failure-scenarios.md).
	WorkersKilled bool
}

// Payment is a row of payments.
type Payment struct {
	ID                  string
	UserID              int64
	Amount              int64
	Currency            string
	Status              string
	Capture             bool
	AmountCaptured      int64
	AmountRefunded      int64
	PaymentMethod       string
	StripePaymentIntent string // "" when null
	FailureCode         string
	KeyID               string // idempotency_key_id; "" when null
	// ChaosKey is the metadata the chaos clients put on every payment they
	// create: the Idempotency-Key of the create request. Unlike KeyID it
	// outlives the key's row.
	ChaosKey string
	// Dispute is the payment's dispute as the service recorded it (nil:
	// none); DuplicateCharges the PaymentIntents Stripe made for it beyond
	// the recorded one.
	Dispute          *PaymentDispute
	DuplicateCharges []DuplicateCharge
}

// PaymentDispute is a payment's dispute column.
type PaymentDispute struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Amount int64  `json:"amount"`
}

// DuplicateCharge is an entry of a payment's duplicate_charges column.
type DuplicateCharge struct {
	StripePaymentIntent string `json:"stripe_payment_intent"`
	Amount              int64  `json:"amount"`
	Status              string `json:"status"`
}

// Refund is a row of refunds.
type Refund struct {
	ID           string
	PaymentID    string
	Amount       int64
	Status       string
	StripeRefund string
	KeyID        string
	Origin       string // api; external: made at Stripe directly (the workload's dashboard refunds); duplicate: Stripe's second for one of ours
}

// Key is a row of idempotency_keys.
type Key struct {
	ID             string
	UserID         int64
	Key            string
	Flow           string
	Method         string
	Path           string
	RecoveryPoint  string
	ResponseCode   int // 0 when unfinished
	ResponseBody   []byte
	NeedsAttention bool
}

// Event is a row of events (the merchant's feed); ObjectID is the id of the
// payment or refund it carries.
type Event struct {
	ID       string
	UserID   int64
	Type     string
	ObjectID string
	Created  time.Time
}

// Endpoint is a row of webhook_endpoints.
type Endpoint struct {
	ID            string
	UserID        int64
	Name          string // the last part of its URL's path: the receiver's name for it
	EnabledEvents []string
	Created       time.Time
	Deleted       time.Time // zero while it exists
}

// Delivery is a row of webhook_deliveries.
type Delivery struct {
	EventID    string
	EndpointID string
	Status     string
}

// Receipt is a row of receipts.
type Receipt struct {
	PaymentID string
	Kind      string // "payment" or "refund:<refund id>"
	Sent      bool
}

// StagedJob is a row of staged_jobs: one not yet moved into River.
type StagedJob struct {
	ID   int64
	Kind string
}

// RiverJob is one of River's jobs of a staged kind, with the arguments that
// tell what it announces.
type RiverJob struct {
	ID      int64
	Kind    string // merchant_event or receipt_email
	State   string
	Attempt int
	EventID string // merchant_event
	Payment string // receipt_email
	Reason  string // receipt_email: payment or refund
	Refund  string // receipt_email of a refund
	// AttemptedBy is the River client that last fetched the job, and
	// AttemptedAt when, as "15:04:05.000"; "" when never fetched.
	AttemptedBy string
	AttemptedAt string
}

// The staged job kinds (internal/stagedjobs).
const (
	kindMerchantEvent = "merchant_event"
	kindReceiptEmail  = "receipt_email"
)

// SimState is what the simulator ("Stripe") holds.
type SimState struct {
	PaymentIntents []SimPaymentIntent
	Charges        []SimCharge
	Refunds        []SimRefund
	Disputes       []SimDispute
	Requests       []SimRequest
	Events         []SimEvent
}

// SimPaymentIntent is a PaymentIntent at the simulator.
type SimPaymentIntent struct {
	ID               string            `json:"id"`
	Amount           int64             `json:"amount"`
	AmountCapturable int64             `json:"amount_capturable"`
	AmountReceived   int64             `json:"amount_received"`
	Currency         string            `json:"currency"`
	Status           string            `json:"status"`
	Metadata         map[string]string `json:"metadata"`
	LatestCharge     string            `json:"latest_charge"`
	// CancellationReason is "automatic" for an authorisation Stripe
	// canceled because nobody captured it in time.
	CancellationReason string `json:"cancellation_reason"`
	LastPaymentError   *struct {
		Code        string `json:"code"`
		DeclineCode string `json:"decline_code"`
	} `json:"last_payment_error"`
}

// SimCharge is a charge at the simulator.
type SimCharge struct {
	ID             string `json:"id"`
	PaymentIntent  string `json:"payment_intent"`
	Status         string `json:"status"`
	Amount         int64  `json:"amount"`
	Captured       bool   `json:"captured"`
	AmountCaptured int64  `json:"amount_captured"`
	AmountRefunded int64  `json:"amount_refunded"`
}

// released is the part of the authorisation Stripe released uncaptured (by a
// partial capture, or a cancel of the intent pi), which it counts in the
// charge's amount_refunded although it is no refund.
func (ch *SimCharge) released(pi *SimPaymentIntent) int64 {
	switch {
	case ch.Captured:
		return ch.Amount - ch.AmountCaptured
	case ch.Status == "succeeded" && pi.Status == "canceled":
		return ch.Amount
	}
	return 0
}

// SimRefund is a refund at the simulator.
type SimRefund struct {
	ID            string            `json:"id"`
	PaymentIntent string            `json:"payment_intent"`
	Amount        int64             `json:"amount"`
	Status        string            `json:"status"`
	Metadata      map[string]string `json:"metadata"`
}

// SimDispute is a dispute at the simulator.
type SimDispute struct {
	ID            string `json:"id"`
	PaymentIntent string `json:"payment_intent"`
	Amount        int64  `json:"amount"`
	Status        string `json:"status"`
}

// SimRequest is a request the simulator received, as its request log
// (GET /_sim/requests) reports it.
type SimRequest = stripesim.RequestRecord

// SimEvent is an event the simulator emitted (and delivered, when webhooks are on).
type SimEvent struct {
	ID   string `json:"id"`
	Type string `json:"type"`
}

// The queries below inspect a test database, read-only. They are plain
// strings rather than sqlc queries on purpose: they belong to the harness,
// not to the service, and one of them reads River's own table.
const (
	paymentsQuery = `SELECT id, user_id, amount, currency, status, capture, amount_captured, amount_refunded,
	payment_method, coalesce(stripe_payment_intent, ''), coalesce(failure_code, ''), coalesce(idempotency_key_id::text, ''),
	coalesce(metadata->>'chaos_key', ''), coalesce(dispute, 'null'::jsonb), coalesce(duplicate_charges, 'null'::jsonb)
FROM payments ORDER BY created_at, id`
	refundsQuery = `SELECT id, payment_id, amount, status, coalesce(stripe_refund, ''), coalesce(idempotency_key_id::text, ''), origin
FROM refunds ORDER BY created_at, id`
	keysQuery = `SELECT id::text, user_id, idempotency_key, flow, request_method, request_path, recovery_point,
	coalesce(response_code, 0), coalesce(response_body, ''::bytea), needs_attention_at IS NOT NULL
FROM idempotency_keys ORDER BY created_at, id`
	eventsQuery = `SELECT id, user_id, type, coalesce(data->>'id', ''), created_at
FROM events ORDER BY created_at, id`
	endpointsQuery = `SELECT id, user_id, regexp_replace(url, '^.*/', ''), enabled_events, created_at,
	coalesce(deleted_at, 'epoch'::timestamptz)
FROM webhook_endpoints ORDER BY created_at, id`
	deliveriesQuery = `SELECT event_id, endpoint_id, status FROM webhook_deliveries ORDER BY event_id, endpoint_id`
	receiptsQuery   = `SELECT payment_id, kind, sent_at IS NOT NULL FROM receipts ORDER BY payment_id, kind`
	stagedJobsQuery = `SELECT id, kind FROM staged_jobs ORDER BY id`
	riverJobsQuery  = `SELECT id, kind, state::text, attempt, coalesce(args->>'event_id', ''), coalesce(args->>'payment', ''),
	coalesce(args->>'reason', ''), coalesce(args->>'refund', ''),
	coalesce(attempted_by[array_length(attempted_by, 1)], ''), coalesce(to_char(attempted_at, 'HH24:MI:SS.MS'), '')
FROM river_job WHERE kind IN ('merchant_event', 'receipt_email') ORDER BY id`
)

// TakeSnapshot reads the database and the simulator at simURL.
func TakeSnapshot(ctx context.Context, pool *pgxpool.Pool, simURL string) (*Snapshot, error) {
	s := &Snapshot{}
	var err error
	if s.Payments, err = queryAll(ctx, pool, paymentsQuery, func(r pgx.Rows, p *Payment) error {
		var dispute, duplicates []byte
		if err := r.Scan(&p.ID, &p.UserID, &p.Amount, &p.Currency, &p.Status, &p.Capture, &p.AmountCaptured, &p.AmountRefunded,
			&p.PaymentMethod, &p.StripePaymentIntent, &p.FailureCode, &p.KeyID, &p.ChaosKey, &dispute, &duplicates); err != nil {
			return err
		}
		if err := json.Unmarshal(dispute, &p.Dispute); err != nil {
			return fmt.Errorf("payment %s's dispute: %w", p.ID, err)
		}
		if err := json.Unmarshal(duplicates, &p.DuplicateCharges); err != nil {
			return fmt.Errorf("payment %s's duplicate charges: %w", p.ID, err)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if s.Refunds, err = queryAll(ctx, pool, refundsQuery, func(r pgx.Rows, re *Refund) error {
		return r.Scan(&re.ID, &re.PaymentID, &re.Amount, &re.Status, &re.StripeRefund, &re.KeyID, &re.Origin)
	}); err != nil {
		return nil, err
	}
	if s.Keys, err = queryAll(ctx, pool, keysQuery, func(r pgx.Rows, k *Key) error {
		return r.Scan(&k.ID, &k.UserID, &k.Key, &k.Flow, &k.Method, &k.Path, &k.RecoveryPoint, &k.ResponseCode, &k.ResponseBody, &k.NeedsAttention)
	}); err != nil {
		return nil, err
	}
	if s.Events, err = queryAll(ctx, pool, eventsQuery, func(r pgx.Rows, e *Event) error {
		return r.Scan(&e.ID, &e.UserID, &e.Type, &e.ObjectID, &e.Created)
	}); err != nil {
		return nil, err
	}
	if s.Endpoints, err = queryAll(ctx, pool, endpointsQuery, func(r pgx.Rows, e *Endpoint) error {
		if err := r.Scan(&e.ID, &e.UserID, &e.Name, &e.EnabledEvents, &e.Created, &e.Deleted); err != nil {
			return err
		}
		if e.Deleted.Equal(time.Unix(0, 0)) {
			e.Deleted = time.Time{}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if s.Deliveries, err = queryAll(ctx, pool, deliveriesQuery, func(r pgx.Rows, d *Delivery) error {
		return r.Scan(&d.EventID, &d.EndpointID, &d.Status)
	}); err != nil {
		return nil, err
	}
	if s.Receipts, err = queryAll(ctx, pool, receiptsQuery, func(r pgx.Rows, re *Receipt) error {
		return r.Scan(&re.PaymentID, &re.Kind, &re.Sent)
	}); err != nil {
		return nil, err
	}
	if s.StagedJobs, err = queryAll(ctx, pool, stagedJobsQuery, func(r pgx.Rows, j *StagedJob) error {
		return r.Scan(&j.ID, &j.Kind)
	}); err != nil {
		return nil, err
	}
	if s.RiverJobs, err = queryAll(ctx, pool, riverJobsQuery, func(r pgx.Rows, j *RiverJob) error {
		return r.Scan(&j.ID, &j.Kind, &j.State, &j.Attempt, &j.EventID, &j.Payment, &j.Reason, &j.Refund, &j.AttemptedBy, &j.AttemptedAt)
	}); err != nil {
		return nil, err
	}
	if s.Sim, err = readSimulator(ctx, simURL); err != nil {
		return nil, err
	}
	return s, nil
}

func queryAll[T any](ctx context.Context, pool *pgxpool.Pool, query string, scan func(pgx.Rows, *T) error) ([]T, error) {
	rows, err := pool.Query(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("chaos: snapshot: %w", err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := scan(rows, &v); err != nil {
			return nil, fmt.Errorf("chaos: snapshot: %w", err)
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// readSimulator reads the simulator's objects and request log through its
// control surface.
func readSimulator(ctx context.Context, simURL string) (SimState, error) {
	var st SimState
	for _, part := range []struct {
		path string
		into any
	}{
		{"/_sim/objects?type=payment_intent", &st.PaymentIntents},
		{"/_sim/objects?type=charge", &st.Charges},
		{"/_sim/objects?type=refund", &st.Refunds},
		{"/_sim/objects?type=dispute", &st.Disputes},
		{"/_sim/objects?type=event", &st.Events},
		{"/_sim/requests", &st.Requests},
	} {
		if err := simGet(ctx, simURL+part.path, part.into); err != nil {
			return st, err
		}
	}
	return st, nil
}

var controlClient = &http.Client{Timeout: 30 * time.Second}

func simGet(ctx context.Context, url string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := controlClient.Do(req)
	if err != nil {
		return fmt.Errorf("chaos: reading the simulator: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("chaos: reading the simulator: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("chaos: GET %s: %s: %s", url, resp.Status, body)
	}
	if err := json.Unmarshal(body, into); err != nil {
		return fmt.Errorf("chaos: decoding %s: %w", url, err)
	}
	return nil
}
