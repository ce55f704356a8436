-- An endpoint's deliveries, for the operator's console: its page lists them
-- newest first, and the list of endpoints counts each one's pending and
-- failed deliveries. No index led with endpoint_id (the primary key is
-- (event_id, endpoint_id)), so each of those read every delivery of every
-- endpoint, and deliveries are kept: one per event and endpoint, for ever.
--
-- The first index gives the page its order; a delivery writes it when it
-- is staged and when its attempt is recorded (that update was not HOT
-- already: status is in the predicates of webhook_deliveries_due_idx and
-- webhook_deliveries_pending_idx). The pending are counted through those
-- two, which hold only the pending. The second index holds only the
-- deliveries that failed for good, so a delivery that succeeds never
-- writes it. (An index of every delivery not succeeded, which a delivery
-- enters when it is staged, cost G's drain about 0.15 ms a payment more
-- with the first: paymentsbench -scenarios G,F, 2026-11-27.)
CREATE INDEX webhook_deliveries_endpoint_idx ON webhook_deliveries (endpoint_id, created_at DESC, event_id DESC);
CREATE INDEX webhook_deliveries_failed_idx ON webhook_deliveries (endpoint_id) WHERE status = 'failed';
