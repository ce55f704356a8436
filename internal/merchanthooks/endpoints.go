package merchanthooks

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/ids"
	"github.com/example/payments/internal/recovery"
)

// Errors of this package, turned into answers by internal/api.
var (
	ErrEndpointNotFound = errors.New("webhook endpoint not found")
	// ErrInvalid wraps input that fails validation (400).
	ErrInvalid = errors.New("invalid webhook endpoint")
)

// Service runs the webhook flows (endpoint creation, redelivery) on the
// idempotency engine, and reads endpoints and deliveries.
type Service struct {
	pool *pgxpool.Pool

	// The flows, as registered with the engine's builder: each runs on the
	// engine it builds, which knows it.
	create, redeliver *recovery.Registered
}

// NewService declares the flows and registers them with engine, the
// builder of the engine they run on: its Build refuses a flow declared
// wrong or one whose name is taken, and the service runs once it has
// built.
func NewService(pool *pgxpool.Pool, engine *recovery.Builder) *Service {
	s := &Service{pool: pool}
	s.create = engine.Register(s.createFlow())
	s.redeliver = engine.Register(s.redeliverFlow())
	return s
}

var queries = dbsqlc.New()

// Endpoint is a merchant's webhook endpoint.
type Endpoint struct {
	ID            string
	URL           string
	EnabledEvents []string
	Description   *string
	Status        string
	Created       time.Time
	// Secret is shown in the answer to the request that made the endpoint
	// only; "" everywhere else.
	Secret string
}

// MarshalJSON renders the API's WebhookEndpoint object; "secret" only when
// the endpoint carries it.
func (e Endpoint) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		ID            string   `json:"id"`
		Object        string   `json:"object"`
		URL           string   `json:"url"`
		EnabledEvents []string `json:"enabled_events"`
		Description   *string  `json:"description"`
		Status        string   `json:"status"`
		Secret        string   `json:"secret,omitempty"`
		Created       int64    `json:"created"`
	}{e.ID, "webhook_endpoint", e.URL, e.EnabledEvents, e.Description, e.Status, e.Secret, e.Created.Unix()})
}

func toEndpoint(r dbsqlc.WebhookEndpoint) Endpoint {
	e := Endpoint{ID: r.ID, URL: r.Url, EnabledEvents: r.EnabledEvents, Status: r.Status, Created: r.CreatedAt}
	if r.Description.Valid {
		e.Description = &r.Description.String
	}
	return e
}

// CreateParams are a new endpoint's fields, validated (ValidateURL,
// ValidateEnabledEvents).
type CreateParams struct {
	URL           string   `json:"url"`
	EnabledEvents []string `json:"enabled_events"`
	Description   *string  `json:"description"`
}

// MaxURLLength is the longest endpoint URL accepted.
const MaxURLLength = 2048

// ValidateURL checks an endpoint URL's syntax: an absolute http or https
// URL with a host, of at most MaxURLLength characters, without user
// information (a secret in a URL would be shown wherever the URL is).
// Whether its host is a public address is the caller's check, made when
// it resolves the host (internal/safehttp).
func ValidateURL(raw string) error {
	if raw == "" || len(raw) > MaxURLLength {
		return fmt.Errorf("%w: url is required: an absolute http or https URL of at most %d characters", ErrInvalid, MaxURLLength)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("%w: url does not parse: %v", ErrInvalid, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%w: url must be an absolute http or https URL, not %q", ErrInvalid, raw)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("%w: url has no host", ErrInvalid)
	case u.User != nil:
		return fmt.Errorf("%w: url must not carry a user name or password", ErrInvalid)
	}
	return nil
}

// ValidateEnabledEvents checks enabled_events and gives its default, ["*"]:
// each entry is one of types (the event types the routes emit: the API's
// own, events.Types, and a team's routes'), a prefix of them such as
// "refund.*", or "*".
func ValidateEnabledEvents(enabled, types []string) ([]string, error) {
	if enabled == nil {
		return []string{"*"}, nil
	}
	if len(enabled) == 0 {
		return nil, fmt.Errorf("%w: enabled_events must not be empty; leave it out to receive every event", ErrInvalid)
	}
	for _, e := range enabled {
		if !isSubscription(e, types) {
			return nil, fmt.Errorf("%w: enabled_events: %q is not an event type (%s), a prefix such as \"refund.*\", or \"*\"",
				ErrInvalid, e, strings.Join(types, ", "))
		}
	}
	return enabled, nil
}

func isSubscription(pattern string, types []string) bool {
	if pattern == "*" || slices.Contains(types, pattern) {
		return true
	}
	prefix, ok := strings.CutSuffix(pattern, ".*")
	if !ok {
		return false
	}
	for _, t := range types {
		if strings.HasPrefix(t, prefix+".") {
			return true
		}
	}
	return false
}

// The create flow, POST /v1/webhook_endpoints: one local phase.
//
//	started
//	  │ tx: draw the id and the secret, insert the endpoint, store 201 with the secret
//	  ▼
//	finished
//
// The secret is drawn inside the phase that inserts the row: a phase run
// again (a serialization failure, a retry after a crash before the commit)
// draws another, and only the committed one is in the stored answer.
func (s *Service) createFlow() *recovery.Flow {
	return recovery.NewFlow("create_webhook_endpoint",
		recovery.From(recovery.Started, recovery.LocalPhase(s.insertEndpoint),
			recovery.Finished),
	)
}

// CreateEndpoint runs the create flow for req (whose Params and Flow it sets).
func (s *Service) CreateEndpoint(ctx context.Context, req recovery.Request, p CreateParams) (recovery.Response, error) {
	req.Params = p
	return s.create.Execute(ctx, req)
}

func (s *Service) insertEndpoint(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
	var p CreateParams
	if err := k.DecodeParams(&p); err != nil {
		return recovery.Outcome{}, err
	}
	e, err := InsertEndpointTx(ctx, tx, k.UserID, p, &k.ID)
	if err != nil {
		return recovery.Outcome{}, err
	}
	return recovery.RespondJSON(201, e)
}

// InsertEndpointTx inserts a new endpoint of userID's in tx, with a new id
// and secret, and returns it with its secret. It first takes the user's
// endpoint lock, which tx holds until it ends, and stamps the endpoint's
// created once it holds it: the drain, which takes the lock before it
// reads the endpoints an event goes to, then sees the endpoint if and only
// if it is older than the event (LockEndpointsOfUser in
// internal/db/queries/webhooks_out.sql).
func InsertEndpointTx(ctx context.Context, tx dbsqlc.DBTX, userID int64, p CreateParams, keyID *uuid.UUID) (Endpoint, error) {
	if err := queries.LockEndpointsOfUser(ctx, tx, userID); err != nil {
		return Endpoint{}, fmt.Errorf("locking the endpoints of user %d: %w", userID, err)
	}
	row, err := queries.InsertWebhookEndpoint(ctx, tx, dbsqlc.InsertWebhookEndpointParams{
		ID: ids.New("we"), UserID: userID, Url: p.URL, EnabledEvents: p.EnabledEvents,
		Description: textOrNull(p.Description), Secret: newSecret(), IdempotencyKeyID: keyID,
	})
	if err != nil {
		return Endpoint{}, fmt.Errorf("inserting the webhook endpoint: %w", err)
	}
	e := toEndpoint(row)
	e.Secret = row.Secret
	return e, nil
}

// newSecret returns "whsec_" and the base64 of 32 random bytes, the form
// of the Standard Webhooks specification: the key is the decoded part.
func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

func textOrNull(s *string) pgtype.Text {
	if s == nil {
		return pgtype.Text{}
	}
	return pgtype.Text{String: *s, Valid: true}
}

// GetEndpoint returns the user's endpoint id, without its secret.
func GetEndpoint(ctx context.Context, conn dbsqlc.DBTX, userID int64, id string) (Endpoint, error) {
	row, err := queries.GetWebhookEndpoint(ctx, conn, dbsqlc.GetWebhookEndpointParams{ID: id, UserID: userID})
	if errors.Is(err, pgx.ErrNoRows) {
		return Endpoint{}, ErrEndpointNotFound
	}
	if err != nil {
		return Endpoint{}, err
	}
	return toEndpoint(row), nil
}

// ListEndpoints returns up to limit of the user's endpoints, newest first,
// after the endpoint startingAfter ("" for the first page), and whether
// more follow.
func ListEndpoints(ctx context.Context, conn dbsqlc.DBTX, userID int64, limit int, startingAfter string) ([]Endpoint, bool, error) {
	before, beforeID := db.EndOfTime, ""
	if startingAfter != "" {
		cursor, err := queries.GetWebhookEndpoint(ctx, conn, dbsqlc.GetWebhookEndpointParams{ID: startingAfter, UserID: userID})
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, false, ErrEndpointNotFound
		}
		if err != nil {
			return nil, false, err
		}
		before, beforeID = cursor.CreatedAt, cursor.ID
	}
	rows, err := queries.ListWebhookEndpoints(ctx, conn, dbsqlc.ListWebhookEndpointsParams{
		UserID: userID, BeforeCreated: before, BeforeID: beforeID, RowLimit: int32(limit + 1),
	})
	if err != nil {
		return nil, false, err
	}
	rows, hasMore := db.TrimPage(rows, limit)
	page := make([]Endpoint, len(rows))
	for i, r := range rows {
		page[i] = toEndpoint(r)
	}
	return page, hasMore, nil
}

// DeleteEndpoint deletes the user's endpoint id: nothing more is sent to
// it (a delivery job that finds it deleted stops unsent), and its
// deliveries keep their history. An endpoint already deleted is not found.
func DeleteEndpoint(ctx context.Context, conn dbsqlc.DBTX, userID int64, id string) error {
	n, err := queries.DeleteWebhookEndpoint(ctx, conn, dbsqlc.DeleteWebhookEndpointParams{ID: id, UserID: userID})
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrEndpointNotFound
	}
	return nil
}
