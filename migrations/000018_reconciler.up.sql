-- The reconciler (issue 27): the service's records converge to Stripe's
-- without any webhook. See internal/payments/reconcile.go.

-- A refund made outside the service (in Stripe's dashboard, or with
-- Stripe's API directly) becomes a refund of its own, origin 'external';
-- the API's refunds are 'api'. The unique stripe_refund (migration 000005)
-- makes it exactly one row, whoever learns of it first: a webhook or the
-- reconciler.
ALTER TABLE refunds ADD COLUMN origin text NOT NULL DEFAULT 'api' CHECK (origin IN ('api', 'external'));

-- When the reconciler next asks Stripe about the payment (its
-- PaymentIntent and its refunds), and how many times it asked. Until the
-- first time (reconcile_checks 0) next_check_at is when the payment was
-- made, or last given back to the reconciler's care, and the payment is
-- due the reconciler's "after" later; then the back-off doubles with each
-- check (ClaimPaymentsToReconcile). A payment Stripe can no longer change
-- is put out of reach, in the year 9999 (RetireUnwatchedPayments).
--
-- Only the reconciler, the charge.refunded webhook and a new refund write
-- these columns, and no column a move writes is in the index: a payment's
-- moves stay HOT updates, which touch no index (a non-HOT update puts new
-- entries in every index of the table, the primary key's too, and on a
-- young database those few pages are where SERIALIZABLE's conflicts are).
ALTER TABLE payments ADD COLUMN next_check_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE payments ADD COLUMN reconcile_checks integer NOT NULL DEFAULT 0;
CREATE INDEX payments_next_check_idx ON payments (next_check_at);

-- The refund reconciler's index (migration 000011) goes with it.
DROP INDEX refunds_pending_since_idx;
