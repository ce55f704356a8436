package payments

import (
	"context"
	"encoding/json"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stripeclient"
)

// Service runs the payment flows on the idempotency engine.
type Service struct {
	pool   *pgxpool.Pool
	stripe *stripeclient.Client

	// The flows, as registered with the engine's builder: each runs on the
	// engine it builds, which knows it.
	create, capture, cancel, refund *recovery.Registered
	refundDuplicate                 *recovery.Registered // refund_duplicate_charge: duplicate.go
	// createIntent is the create flow's Stripe call (WithCreatePaymentIntent).
	createIntent CreatePaymentIntentFunc
}

// Option changes how NewService builds the service.
type Option func(*Service)

// WithCreatePaymentIntent has the create flow make its one Stripe call with
// createIntent instead of the Stripe client's CreatePaymentIntent. Its one
// user is the benchmark's engine floor (cmd/paymentsbench, scenario A-own:
// the engine and the flow's SQL without HTTP or Stripe), which builds the
// service with it and then runs Create as any caller does. Tests never use
// it: they run the flow against the simulator, over HTTP.
func WithCreatePaymentIntent(createIntent CreatePaymentIntentFunc) Option {
	return func(s *Service) { s.createIntent = createIntent }
}

// NewService declares the flows, with their Stripe client, and registers
// them with engine, the builder of the engine they run on: its Build
// refuses a flow declared wrong or one whose name is taken, and the
// service runs once it has built.
func NewService(pool *pgxpool.Pool, engine *recovery.Builder, stripe *stripeclient.Client, opts ...Option) *Service {
	s := &Service{pool: pool, stripe: stripe, createIntent: stripe.CreatePaymentIntent}
	for _, o := range opts {
		o(s)
	}
	s.create = engine.Register(s.createFlow())
	s.capture = engine.Register(s.captureFlow())
	s.cancel = engine.Register(s.cancelFlow())
	s.refund = engine.Register(s.refundFlow())
	s.refundDuplicate = engine.Register(s.refundDuplicateFlow())
	return s
}

// ChildKeyPrefix begins the child key of every Stripe call of the payment
// flows: "payments-<key id>-<step>". Keys in flight carry it: it never changes.
const ChildKeyPrefix = "payments-"

// AfterStripeFailpoint names the failpoint after each Stripe call of the
// payment flows, before its step: after_stripe:payment_intent, as
// docs/API.md section 6 names them for crash tests.
const AfterStripeFailpoint = "after_stripe:"

// Stripe is the payment flows' remote side, as their clients are told of
// it: a Stripe outage answers 503 payment_processor_unavailable, "The
// payment processor could not be reached." (docs/API.md section 2, rule 7).
var Stripe = recovery.Remote{Name: "Stripe", Unavailable: "The payment processor could not be reached."}

// flow declares one of the service's flows, with its child keys' prefix,
// its failpoints' name for a Stripe call, and Stripe as its remote side.
func (s *Service) flow(name string, steps ...recovery.Step) *recovery.Flow {
	f := recovery.NewFlow(name, steps...)
	f.ChildKeyPrefix = ChildKeyPrefix
	f.AfterCallFailpoint = AfterStripeFailpoint
	f.Remote = Stripe
	return f
}

// KeyedRequest is what every mutating request brings besides its parameters:
// who asks, with which key, and the request as received.
type KeyedRequest struct {
	UserID int64
	Key    string
	Method string
	Path   string
	Body   []byte
}

func (s *Service) execute(ctx context.Context, req KeyedRequest, flow *recovery.Registered, params any) (recovery.Response, error) {
	return flow.Execute(ctx, recovery.Request{
		UserID: req.UserID, Key: req.Key, Method: req.Method, Path: req.Path, Body: req.Body, Params: params,
	})
}

// audit records an action of the request k on a payment, inside tx. Nothing
// reads the record back, so it is queued: it reaches the database with the
// transaction's next statement.
func audit(ctx context.Context, tx *db.Tx, k *recovery.Key, action, paymentID string, data any) error {
	raw, err := json.Marshal(data)
	if err != nil {
		return err
	}
	return queries.InsertAuditRecord(ctx, tx.Queued(), dbsqlc.InsertAuditRecordParams{
		UserID: k.UserID, Action: action, ResourceType: "payment", ResourceID: paymentID, Data: raw, IdempotencyKeyID: &k.ID,
	})
}

func keyID(k *recovery.Key) *uuid.UUID { return &k.ID }
