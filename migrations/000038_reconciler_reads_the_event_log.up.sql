-- The reconciler reads Stripe's event log (issue 38, internal/payments/reconcile.go):
-- it no longer asks Stripe about every payment for 30 days.

-- Where the reading of Stripe's event log (GET /v1/events) stopped: the
-- created time and id of the newest event a complete pass read (Stripe's
-- clock), and when that pass ended (the database's clock). One row; the
-- reader of a pass holds it FOR UPDATE (SKIP LOCKED: a second reader
-- finds it taken and skips the pass), so one instance reads at a time.
CREATE TABLE stripe_event_cursor (
    name       text PRIMARY KEY CHECK (name = 'events'),
    created    timestamptz,
    event_id   text,
    read_at    timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO stripe_event_cursor (name) VALUES ('events');

-- The payments the service itself is unsure of, and only those: a
-- PaymentIntent Stripe answered "processing" (or another status the
-- service does not act on). The event log says where it ends up; a
-- payment still unsure next_check_at later is asked about by a retrieve,
-- with back-off. The reconciler reads this table by next_check_at: its
-- cost is bounded by how many such payments there are, never by all
-- payments. A row goes once its payment is no longer processing.
CREATE TABLE payments_awaiting_stripe (
    payment_id            text PRIMARY KEY,
    stripe_payment_intent text        NOT NULL,
    next_check_at         timestamptz NOT NULL,
    checks                integer     NOT NULL DEFAULT 0
);
CREATE INDEX payments_awaiting_stripe_due_idx ON payments_awaiting_stripe (next_check_at);

-- A processing payment whose PaymentIntent an earlier version did not
-- record stays for the completer (it has none); one with a PaymentIntent
-- is unsure.
INSERT INTO payments_awaiting_stripe (payment_id, stripe_payment_intent, next_check_at)
SELECT id, stripe_payment_intent, now() FROM payments
WHERE status = 'processing' AND stripe_payment_intent IS NOT NULL;

-- The per-payment watch (migration 000018) goes: the event log tells what
-- it asked Stripe about, payment by payment, for 30 days.
DROP INDEX payments_next_check_idx;
ALTER TABLE payments DROP COLUMN reconcile_checks;
ALTER TABLE payments DROP COLUMN next_check_at;
