-- The events about a payment, for the operator's console (a payment's page):
-- a payment's own events hold the payment in their data (its id is the
-- data's id), and its refunds' events hold the refund (whose payment is the
-- data's payment). Without an index the console read every event of the
-- payment's user, through events_user_created_idx, to find the few about
-- one payment: a merchant's whole history on every view of one of its
-- payments. Payment ids are time-ordered (a millisecond prefix, internal/ids),
-- so the worker's inserts land at the index's right-hand edge.
CREATE INDEX events_payment_idx ON events ((coalesce(data->>'payment', data->>'id')));

-- The console's list of receipts: those not sent (pending, or given up)
-- first, then the sent ones, each newest first. It sorted every receipt,
-- joined to its payment, for each view; now each part is read from an
-- index in its order, and a view reads two pages of rows. The receipts not
-- sent are few, and the worker's send takes a receipt out of that index
-- (the send's update was not HOT already: it changes next_attempt_at, which
-- receipts_due_idx names).
CREATE INDEX receipts_created_idx ON receipts (created_at);
CREATE INDEX receipts_unsent_created_idx ON receipts (created_at) WHERE sent_at IS NULL;
