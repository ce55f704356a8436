-- A payment's PaymentIntent is found through a table of its own (issue 29,
-- docs/failure-scenarios.md "A young database"), so that no index of
-- payments names a column the record's move of a payment changes: the move
-- (status, stripe_payment_intent, amounts, failure) is then a HOT update,
-- a new row version on the same heap page and no new entry in any of the
-- table's indexes. A move that wrote an entry into every index of payments,
-- on the pages that other requests' records read (by the payment's id), made
-- concurrent records fail to serialize on a young database, where each index
-- is a page or two (SERIALIZABLE's b-tree predicate locks are page-level).
--
-- payments.stripe_payment_intent stays, unindexed, the payment's own copy;
-- the move that sets it (TransitionPayment, TransitionPaymentIfUnchanged)
-- inserts the row here in the same statement, and a PaymentIntent already
-- recorded for another payment fails it on this primary key, as it failed
-- the unique index. Payments are never deleted, so no row here is left
-- without its payment; there is no foreign key, whose check would read the
-- page of payments' primary key that every new payment goes into.
CREATE TABLE payment_intents (
    stripe_payment_intent text PRIMARY KEY,
    payment_id            text NOT NULL
);
INSERT INTO payment_intents (stripe_payment_intent, payment_id)
SELECT stripe_payment_intent, id FROM payments WHERE stripe_payment_intent IS NOT NULL;
ALTER TABLE payments DROP CONSTRAINT payments_stripe_payment_intent_key;

-- Room on each heap page for the moves' new row versions: a HOT update
-- needs free space on the page of the version it replaces. A payment moves
-- once or twice, shortly after its insert (later moves, captures and
-- refunds, are rarer); pruning frees the old versions once nobody can see
-- them.
ALTER TABLE payments SET (fillfactor = 70);
