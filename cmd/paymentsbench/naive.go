package main

import (
	"context"
	"math/rand/v2"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payments/internal/db"
)

// naiveSchema is the schema of the baseline (the pgbench measurement of
// plain PostgreSQL on this kind of machine that the project started from)
// without its replay table: bigserial keys everywhere, as in Brandur's
// Rocket Rides.
const naiveSchema = `
CREATE TABLE idempotency_keys (
    id             bigserial   PRIMARY KEY,
    key            text        NOT NULL,
    user_id        bigint      NOT NULL,
    recovery_point text        NOT NULL DEFAULT 'started',
    locked_at      timestamptz DEFAULT now(),
    request_params jsonb       NOT NULL,
    response_code  int,
    response_body  jsonb,
    UNIQUE (user_id, key)
);

CREATE TABLE payments (
    id                 bigserial   PRIMARY KEY,
    idempotency_key_id bigint      NOT NULL REFERENCES idempotency_keys(id),
    user_id            bigint      NOT NULL,
    amount_cents       bigint      NOT NULL,
    currency           text        NOT NULL,
    charge_id          text,
    created_at         timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE audit_records (
    id            bigserial   PRIMARY KEY,
    action        text        NOT NULL,
    data          jsonb       NOT NULL,
    origin_ip     text        NOT NULL,
    resource_id   bigint      NOT NULL,
    resource_type text        NOT NULL,
    user_id       bigint      NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE staged_jobs (
    id       bigserial PRIMARY KEY,
    job_name text      NOT NULL,
    job_args jsonb     NOT NULL
);
`

// The baseline's request4.sql, statement for statement; pgbench's
// variables become parameters, as with its -M prepared.
const (
	naiveTx1 = `INSERT INTO idempotency_keys (key, user_id, recovery_point, locked_at, request_params)
VALUES (gen_random_uuid()::text, $1, 'started', now(),
        jsonb_build_object('amount_cents', $2::bigint, 'currency', 'usd'))
RETURNING id`
	naiveTx2Payment = `INSERT INTO payments (idempotency_key_id, user_id, amount_cents, currency)
VALUES ($1, $2, $3, 'usd')
RETURNING id`
	naiveTx2Audit = `INSERT INTO audit_records (action, data, origin_ip, resource_id, resource_type, user_id)
VALUES ('payment.created', jsonb_build_object('amount_cents', $1::bigint, 'currency', 'usd'),
        '127.0.0.1', $2, 'payment', $3)`
	naiveTx2Key      = `UPDATE idempotency_keys SET recovery_point = 'payment_created' WHERE id = $1`
	naiveTx3Payment  = `UPDATE payments SET charge_id = 'ch_' || md5($1::bigint::text) WHERE id = $1`
	naiveTx3Key      = `UPDATE idempotency_keys SET recovery_point = 'charge_created' WHERE id = $1`
	naiveTx4Job      = `INSERT INTO staged_jobs (job_name, job_args) VALUES ('send_receipt', jsonb_build_object('payment_id', $1::bigint))`
	naiveTx4Finished = `UPDATE idempotency_keys
   SET locked_at = NULL, recovery_point = 'finished', response_code = 201,
       response_body = jsonb_build_object('id', $1::bigint, 'amount_cents', $2::bigint,
                                          'currency', 'usd', 'status', 'succeeded')
 WHERE id = $3`
)

// naiveRequest is one new request of the baseline: four SERIALIZABLE
// transactions. Each goes through db.WithTx, the helper the engine uses, so
// a serialization failure retries that transaction alone, with the
// engine's backoff (pgbench restarted the whole script, with a new key).
// Each sends BEGIN alone (beginAlone), and every statement on its own, as
// pgbench does: none of db.Tx's pipelining.
// naiveTx is how A-naive runs its transactions: five attempts, as the
// service itself did when the baseline was first measured (the service now
// retries for a time budget, db.TxOptions.RetryFor), so that the baseline
// stays the same yardstick across runs.
var naiveTx = db.TxOptions{Attempts: 5}

func naiveRequest(ctx context.Context, pool *pgxpool.Pool, rng *rand.Rand) (string, error) {
	uid := rng.Int64N(100000) + 1
	amount := rng.Int64N(100000-100+1) + 100
	var keyID, paymentID int64
	err := db.WithTx(ctx, pool, naiveTx, func(ctx context.Context, tx *db.Tx) error {
		if err := beginAlone(ctx, tx); err != nil {
			return err
		}
		return tx.QueryRow(ctx, naiveTx1, uid, amount).Scan(&keyID)
	})
	if err != nil {
		return "", err
	}
	err = db.WithTx(ctx, pool, naiveTx, func(ctx context.Context, tx *db.Tx) error {
		if err := beginAlone(ctx, tx); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, naiveTx2Payment, keyID, uid, amount).Scan(&paymentID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, naiveTx2Audit, amount, paymentID, uid); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, naiveTx2Key, keyID)
		return err
	})
	if err != nil {
		return "", err
	}
	err = db.WithTx(ctx, pool, naiveTx, func(ctx context.Context, tx *db.Tx) error {
		if err := beginAlone(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, naiveTx3Payment, paymentID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, naiveTx3Key, keyID)
		return err
	})
	if err != nil {
		return "", err
	}
	err = db.WithTx(ctx, pool, naiveTx, func(ctx context.Context, tx *db.Tx) error {
		if err := beginAlone(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, naiveTx4Job, paymentID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, naiveTx4Finished, paymentID, amount, keyID)
		return err
	})
	if err != nil {
		return "", err
	}
	return "ok", nil
}

// beginAlone sends BEGIN in a round trip of its own, as pgbench does.
func beginAlone(ctx context.Context, tx *db.Tx) error { return tx.Flush(ctx) }
