package recovery_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/failpoint"
	"github.com/example/payments/internal/recovery"
)

// The tutorial: a two-phase flow that saves a signup and sends its welcome
// email once, however often the request is retried and wherever the
// process dies.
//
//	started
//	  │ tx: insert the signup
//	  ▼
//	signup_saved
//	  │ the mailer: send the welcome, child key "welcome"
//	  │ tx: record the message's id, store 201
//	  ▼
//	finished
const signupSaved recovery.RecoveryPoint = "signup_saved"

// signup is the request's parameters, stored with its key.
type signup struct {
	Email string `json:"email"`
}

// mailer stands in for an external service that deduplicates by
// idempotency key, as Stripe does: a call repeated with a key gets the
// first call's answer, and nothing is sent twice.
type mailer struct{ sent map[string]string } // child key -> message id

func (m *mailer) sendWelcome(_ context.Context, k *recovery.Key) (string, error) {
	child := k.ChildKey("welcome") // the same on every attempt, in every process
	if id, ok := m.sent[child]; ok {
		return id, nil
	}
	id := fmt.Sprintf("msg_%d", len(m.sent)+1)
	m.sent[child] = id
	return id, nil
}

// signupFlow is the flow's state machine, in order: at each recovery point,
// the phase that runs there and where it may move the key.
func signupFlow(m *mailer) *recovery.Flow {
	return recovery.NewFlow("signup",
		// started -> signup_saved: local work, in one transaction.
		recovery.From(recovery.Started, recovery.LocalPhase(func(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
			var p signup
			if err := k.DecodeParams(&p); err != nil {
				return recovery.Outcome{}, err
			}
			_, err := tx.Exec(ctx, "INSERT INTO signups (idempotency_key_id, email) VALUES ($1, $2)", k.ID, p.Email)
			return recovery.Next(signupSaved), err
		}), signupSaved),
		// signup_saved -> finished: the call, outside any transaction, then
		// a transaction that records what it answered.
		recovery.From(signupSaved, recovery.ExternalPhase("welcome", m.sendWelcome,
			func(ctx context.Context, tx *db.Tx, k *recovery.Key, messageID string) (recovery.Outcome, error) {
				_, err := tx.Exec(ctx, "UPDATE signups SET welcome_message = $1 WHERE idempotency_key_id = $2", messageID, k.ID)
				return recovery.Respond(201, fmt.Appendf(nil, `{"welcome_message":%q}`, messageID)), err
			}), recovery.Finished),
	)
}

// tutorial is what the examples run on: a fresh database with the
// example's table and user, the mailer, and an engine built with the flow.
type tutorial struct {
	pool   *pgxpool.Pool
	engine *recovery.Engine
	signup *recovery.Registered // the flow, as the engine's builder registered it
	mailer *mailer
	drop   func()
}

func setupTutorial() tutorial {
	pool, drop := dbtest.NewExamplePool()
	// The flow's table carries the key that made each row, with no foreign
	// key to idempotency_keys (migration 000023 says why): one row of
	// key_references declares it, and the rows let go of a key once it is
	// deleted (migration 000045).
	_, err := pool.Exec(context.Background(), `
		CREATE TABLE signups (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, idempotency_key_id uuid UNIQUE,
			email text NOT NULL, welcome_message text);
		INSERT INTO key_references (table_name, on_key_deleted) VALUES ('signups', 'let_go');
		INSERT INTO users (email) VALUES ('owner@example.com');`)
	if err != nil {
		panic(err)
	}
	m := &mailer{sent: map[string]string{}}
	t := tutorial{pool: pool, mailer: m, drop: drop}
	t.engine, t.signup = buildEngine(recovery.Config{Pool: pool}, m)
	return t
}

// buildEngine builds an engine of cfg that runs the signup flow, and
// returns the flow's handle: the one way to run it, on that engine. Build
// refuses a flow declared wrong, two flows of one name, and a failpoint in
// cfg that no flow fires (a typo), before any request runs.
func buildEngine(cfg recovery.Config, m *mailer) (*recovery.Engine, *recovery.Registered) {
	flows := recovery.NewBuilder(cfg)
	signup := flows.Register(signupFlow(m))
	engine, err := flows.Build()
	if err != nil {
		panic(err)
	}
	return engine, signup
}

func signupRequest() recovery.Request {
	return recovery.Request{
		UserID: 1, Key: "signup-ada", Method: "POST", Path: "/v1/signups",
		Body: []byte(`{"email":"ada@example.com"}`), Params: signup{Email: "ada@example.com"},
	}
}

// A request runs claim -> phases -> stored answer; its retry gets the
// stored answer again, and nothing runs twice.
func Example() {
	tut := setupTutorial()
	defer tut.drop()
	ctx, signup := context.Background(), tut.signup

	resp, err := signup.Execute(ctx, signupRequest())
	fmt.Println(resp.Status, string(resp.Body), "replayed:", resp.Replayed, "error:", err)

	resp, err = signup.Execute(ctx, signupRequest()) // the client did not get the answer, and retries
	fmt.Println(resp.Status, string(resp.Body), "replayed:", resp.Replayed, "error:", err)
	fmt.Println("welcome emails sent:", len(tut.mailer.sent))
	// Output:
	// 201 {"welcome_message":"msg_1"} replayed: false error: <nil>
	// 201 {"welcome_message":"msg_1"} replayed: true error: <nil>
	// welcome emails sent: 1
}

// A process dies after the mailer sent the email and before the answer was
// recorded. (The failpoint after_call:welcome, one of those the
// flow's declaration names (Flow.Failpoints), stands in for the crash:
// with the action "error" the attempt stops there, as a crash would stop
// it; "crash" would kill this example's process.) The key stays at its
// last committed recovery point, and the retry resumes there: it calls
// the mailer again with the same child key, gets the first call's answer,
// and records it. One email.
func Example_resumeAfterACrash() {
	tut := setupTutorial()
	defer tut.drop()
	ctx := context.Background()

	crashes, _ := failpoint.Parse("after_call:welcome=error")
	_, dying := buildEngine(recovery.Config{Pool: tut.pool, Failpoints: crashes}, tut.mailer) // another process
	_, err := dying.Execute(ctx, signupRequest())
	fmt.Println("first attempt stopped:", errors.Is(err, failpoint.ErrInjected))

	k, _ := tut.engine.Lookup(ctx, 1, "signup-ada")
	fmt.Println("the key is at:", k.RecoveryPoint, "locked:", k.Locked)

	resp, err := tut.signup.Execute(ctx, signupRequest()) // the client's retry, to a healthy process
	fmt.Println(resp.Status, string(resp.Body), "replayed:", resp.Replayed, "error:", err)
	fmt.Println("welcome emails sent:", len(tut.mailer.sent))
	// Output:
	// first attempt stopped: true
	// the key is at: signup_saved locked: false
	// 201 {"welcome_message":"msg_1"} replayed: false error: <nil>
	// welcome emails sent: 1
}
