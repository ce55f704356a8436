-- The reconciler (issue 27): the service's records converge to Stripe's
-- without any webhook. See internal/payments/reconcile.go.

-- A refund made outside the service (in Stripe's dashboard, or with
-- Stripe's API directly) becomes a refund of its own, origin 'external';
-- the API's refunds are 'api'. The unique stripe_refund (migration 000005)
-- makes it exactly one row, whoever learns of it first: a webhook or the
-- reconciler.
ALTER TABLE refunds ADD COLUMN origin text NOT NULL DEFAULT 'api' CHECK (origin IN ('api', 'external'));

-- When the reconciler next asks Stripe about the payment (its
-- PaymentIntent and its refunds), and how many times it asked since with
-- nothing to correct: the back-off doubles with each. NULL: not asked yet,
-- so it is due once the payment has gone the reconciler's "after" without
-- a change (updated_at). A charge.refunded webhook sets it to now: the
-- charge names no refund, so the reconciler lists them.
ALTER TABLE payments ADD COLUMN next_check_at timestamptz;
ALTER TABLE payments ADD COLUMN reconcile_checks integer NOT NULL DEFAULT 0;

-- The payments the reconciler may still have to ask about are those Stripe
-- could still change: not failed, not canceled. The two indexes serve the
-- two ways a payment falls due (ClaimPaymentsToReconcile).
CREATE INDEX payments_reconcile_unchecked_idx ON payments (updated_at)
    WHERE next_check_at IS NULL AND status IN ('processing', 'requires_capture', 'succeeded');
CREATE INDEX payments_reconcile_next_idx ON payments (next_check_at)
    WHERE next_check_at IS NOT NULL AND status IN ('processing', 'requires_capture', 'succeeded');

-- The refund reconciler's index (migration 000011) is replaced by the above.
DROP INDEX refunds_pending_since_idx;
