-- Stripe's evidence is never dropped (issue 38; docs/API.md section 2).
--
-- A payment's chargeback, as Stripe reports it (charge.dispute.*): the
-- API's dispute object ({"id","status","reason","amount","created"}),
-- NULL until one exists, and the time of the latest dispute event whose
-- state it holds, so that an older event never moves it back
-- (ApplyDisputeEventTx, internal/payments/dispute.go).
--
-- The PaymentIntents Stripe made for the payment beyond the one recorded
-- (a late 500's request that Stripe executed after the service charged
-- under a new child key): the API's duplicate_charges list, NULL while
-- there is none. Each entry is refunded in full, once, by the flow
-- refund_duplicate_charge (internal/payments/duplicate.go).
--
-- Neither column is in any index: writing them keeps the payment's update
-- HOT, as its moves are (migration 000024).
ALTER TABLE payments ADD COLUMN dispute jsonb;
ALTER TABLE payments ADD COLUMN dispute_event_at timestamptz;
ALTER TABLE payments ADD COLUMN duplicate_charges jsonb;

-- A second refund Stripe made for one of ours (its metadata names our
-- refund, its id is not the one recorded) is a refund of origin
-- 'duplicate', counted in amount_refunded like any other.
ALTER TABLE refunds DROP CONSTRAINT refunds_origin_check;
ALTER TABLE refunds ADD CONSTRAINT refunds_origin_check CHECK (origin IN ('api', 'external', 'duplicate'));

-- payments_stripe_duplicates_total{object} is read from these rows when
-- Prometheus scrapes (internal/payments/metrics.go): a count of what the
-- database committed, so a transaction run again after a serialization
-- failure never counts one twice. The partial indexes hold only the rare
-- rows it counts. A payment's move never writes duplicate_charges, so its
-- update stays HOT.
CREATE INDEX refunds_duplicate_idx ON refunds (id) WHERE origin = 'duplicate';
CREATE INDEX payments_duplicate_charges_idx ON payments (id) WHERE duplicate_charges IS NOT NULL;
