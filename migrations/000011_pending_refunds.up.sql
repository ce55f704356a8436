-- Stripe settles some refunds later (pending, then succeeded or failed) and
-- says so with charge.refund.updated. A lost webhook must not leave a refund
-- pending forever, so a periodic reconciler asks Stripe about refunds that
-- have been pending too long (ListStalePendingRefunds). This index holds
-- only those refunds, oldest change first, so that the reconciler never
-- reads the settled ones, which are nearly all of them.
CREATE INDEX refunds_pending_since_idx ON refunds (updated_at)
    WHERE status = 'pending' AND stripe_refund IS NOT NULL;
