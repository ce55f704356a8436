// Package payouts is a team's own endpoint, written as a team adopting the
// pattern would write it: POST /v1/payouts pays an amount out to a bank
// account through the team's bank, exactly once, however often the client
// retries and wherever the process dies.
//
//	started
//	  │ tx: insert the payout (pending)
//	  ▼
//	payout_created
//	  │ the bank: POST /transfers, child key "transfer"
//	  │ tx: record the transfer, stage payout.paid, store 201
//	  │     (or the bank's refusal: store 402 payout_refused)
//	  ▼
//	finished
//
// What the team writes is this directory and nothing else: the route,
// declared once (Route), served by the service's router (api.Config.Routes)
// and held by routetest to the team's OpenAPI document (openapi.json),
// README.md's route table and its Go client (Client); the flow (Flow); its
// table (payouts.sql, with its key_references row); and the proof
// (payouts_test.go). TestExample_payoutsIsSmall counts it.
package payouts

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/ids"
	"github.com/example/payments/internal/problem"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/route"
	"github.com/example/payments/internal/stagedjobs"
)

// Migration creates the payouts table. A team applies it with the
// service's migrations (a file of migrations/ of its own number); the
// example's tests apply it to each test's database.
//
//go:embed payouts.sql
var Migration string

// PayoutCreated is the recovery point between the insert and the bank.
const PayoutCreated recovery.RecoveryPoint = "payout_created"

// Refused is the code of the answer to a payout the bank refused: 402,
// stored and replayed like a declined card.
const Refused problem.Code = "payout_refused"

// Route is POST /v1/payouts, declared once.
func Route() route.Route {
	return route.Route{
		Method: http.MethodPost, Path: "/v1/payouts", Summary: "pays an amount out to a bank account",
		Flow: "create_payout", Request: Request{}, Answer: Payout{}, Status: http.StatusCreated,
		Errors: route.Errors(route.Keyed, []route.Error{
			{Status: http.StatusPaymentRequired, Code: Refused},
			{Status: http.StatusServiceUnavailable, Code: problem.PaymentProcessorUnavailable}, // the bank's outage
		}),
		Events: []string{"payout.paid"}, Client: "CreatePayout",
		Params: func(req any) (any, error) { return req.(*Request).check() },
	}
}

// Request is POST /v1/payouts' body; pointers tell a missing field.
type Request struct {
	Amount      *int64  `json:"amount"`
	Currency    *string `json:"currency"`
	Destination *string `json:"destination"`
}

// Params are a checked Request, stored with its key.
type Params struct {
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Destination string `json:"destination"`
}

var (
	currencyCode = regexp.MustCompile(`^[a-z]{3}$`)
	account      = regexp.MustCompile(`^acct_[A-Za-z0-9]{1,60}$`)
)

// check refuses a malformed request before any work: 400, not stored.
func (r *Request) check() (Params, error) {
	switch {
	case r.Amount == nil || *r.Amount < 1 || *r.Amount > 99999999:
		return Params{}, problem.New(http.StatusBadRequest, problem.ValidationFailed, "amount is required: 1 to 99999999 in the currency's minor unit.")
	case r.Currency == nil || !currencyCode.MatchString(*r.Currency):
		return Params{}, problem.New(http.StatusBadRequest, problem.ValidationFailed, "currency is required: a lower-case ISO 4217 code such as \"usd\".")
	case r.Destination == nil || !account.MatchString(*r.Destination):
		return Params{}, problem.New(http.StatusBadRequest, problem.ValidationFailed, "destination is required: a bank account id such as \"acct_123\".")
	}
	return Params{Amount: *r.Amount, Currency: *r.Currency, Destination: *r.Destination}, nil
}

// Payout is the answer.
type Payout struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Destination string `json:"destination"`
	Status      string `json:"status"`
	Transfer    string `json:"transfer"`
}

// Flow is the payout's state machine, calling the bank at bankURL.
func Flow(bankURL string) *recovery.Flow {
	return recovery.NewFlow("create_payout",
		recovery.From(recovery.Started, recovery.LocalPhase(insertPayout), PayoutCreated),
		recovery.From(PayoutCreated, recovery.ExternalPhase("transfer", transfer(bankURL), recordTransfer), recovery.Finished),
	)
}

func insertPayout(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
	var p Params
	if err := k.DecodeParams(&p); err != nil {
		return recovery.Outcome{}, err
	}
	id := ids.New("po")
	if _, err := tx.Exec(ctx, `INSERT INTO payouts (id, idempotency_key_id, user_id, amount, currency, destination, status)
		VALUES ($1, $2, $3, $4, $5, $6, 'pending')`, id, k.ID, k.UserID, p.Amount, p.Currency, p.Destination); err != nil {
		return recovery.Outcome{}, err
	}
	return recovery.Next(PayoutCreated), audit(ctx, tx, k, "payout.created", id)
}

// bankAnswer is what the bank said: its transfer, or why it refused.
type bankAnswer struct {
	ID      string `json:"id"`
	Refusal string `json:"refusal"`
}

// transfer asks the bank for the transfer, with the step's child key: the
// bank makes one transfer per key. A refusal (4xx) is final; an outage
// (5xx, 409, 429, no answer) is transient: the request resumes, and calls
// again with the same key.
func transfer(bankURL string) func(context.Context, *recovery.Key) (bankAnswer, error) {
	return func(ctx context.Context, k *recovery.Key) (bankAnswer, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, bankURL+"/transfers", bytes.NewReader(k.Params))
		if err != nil {
			return bankAnswer{}, err
		}
		req.Header.Set("Idempotency-Key", k.ChildKey("transfer"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return bankAnswer{}, recovery.Transient(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode >= 500 || resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusTooManyRequests {
			return bankAnswer{}, recovery.Transient(fmt.Errorf("the bank answered %s: %v", resp.Status, err))
		}
		var a bankAnswer
		_ = json.Unmarshal(body, &a) // a refusal may not say why
		switch {
		case resp.StatusCode >= 400 && a.Refusal == "":
			return bankAnswer{Refusal: resp.Status}, nil
		case resp.StatusCode >= 400:
			return bankAnswer{Refusal: a.Refusal}, nil
		case a.ID == "":
			return bankAnswer{}, fmt.Errorf("the bank answered %s without a transfer: %q", resp.Status, body)
		}
		return a, nil
	}
}

func recordTransfer(ctx context.Context, tx *db.Tx, k *recovery.Key, a bankAnswer) (recovery.Outcome, error) {
	var p Payout
	status := map[bool]string{true: "paid", false: "refused"}[a.Refusal == ""]
	err := tx.QueryRow(ctx, `UPDATE payouts SET status = $2, transfer = nullif($3, ''), failure = nullif($4, '')
		WHERE idempotency_key_id = $1 RETURNING id, amount, currency, destination, status, coalesce(transfer, '')`,
		k.ID, status, a.ID, a.Refusal).Scan(&p.ID, &p.Amount, &p.Currency, &p.Destination, &p.Status, &p.Transfer)
	if err == nil {
		err = audit(ctx, tx, k, "payout."+status, p.ID)
	}
	if err != nil {
		return recovery.Outcome{}, err
	}
	if a.Refusal != "" {
		return recovery.Respond(http.StatusPaymentRequired,
			problem.New(http.StatusPaymentRequired, Refused, "The bank refused the payout: %s.", a.Refusal).JSON()), nil
	}
	p.Object = "payout"
	object, err := json.Marshal(p)
	if err != nil {
		return recovery.Outcome{}, err
	}
	event := stagedjobs.Job{Kind: stagedjobs.MerchantEvent, Args: stagedjobs.NewEventArgs(k.UserID, "payout.paid", object)}
	if err := stagedjobs.StageTx(ctx, tx, k.ID, event); err != nil {
		return recovery.Outcome{}, err
	}
	return recovery.Respond(http.StatusCreated, object), nil
}

func audit(ctx context.Context, tx *db.Tx, k *recovery.Key, action, payout string) error {
	_, err := tx.Exec(ctx, `INSERT INTO audit_records (user_id, action, resource_type, resource_id, data, idempotency_key_id)
		VALUES ($1, $2, 'payout', $3, '{}', $4)`, k.UserID, action, payout, k.ID)
	return err
}

// Client calls the route from Go, as the service's client package calls
// the service's: one key per intent, given by the caller.
type Client struct {
	BaseURL, APIKey string
}

// CreatePayout is POST /v1/payouts under key: the payout, or the problem
// the service answered (*problem.Problem).
func (c Client) CreatePayout(ctx context.Context, key string, p Params) (*Payout, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/v1/payouts", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.APIKey)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		var prob problem.Problem
		if err := json.NewDecoder(resp.Body).Decode(&prob); err != nil {
			return nil, fmt.Errorf("%s: %w", resp.Status, err)
		}
		return nil, &prob
	}
	var out Payout
	return &out, json.NewDecoder(resp.Body).Decode(&out)
}
