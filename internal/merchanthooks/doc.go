// Package merchanthooks owns the webhooks the service sends to merchants
// (API.md section 7): their endpoints, the deliveries of each event to
// each endpoint, and the job that makes one attempt at a delivery.
//
// The shape is the outbox again, as for receipts. The enqueuer (package
// stagedjobs) writes an event, drained from its staged job, and in the same
// transaction one delivery row per endpoint that subscribes to it, so a
// delivery exists if and only if its event does. The row is the delivery's
// job: due at once, and the Dispatcher (dispatch.go) makes the attempts, in
// batches:
//
//  1. a claim of due deliveries with their endpoints and events, in one
//     short statement that leases them, with no transaction kept open;
//  2. the POSTs, signed as the Standard Webhooks specification says
//     (webhook-id is the event's id, the same on every attempt and every
//     redelivery, so the merchant deduplicates by it), with nothing held;
//  3. the attempts recorded in one statement per batch, on a context of
//     their own, so an attempt that happened is recorded even if the
//     dispatcher's context ended meanwhile.
//
// A failed attempt makes its delivery due again after the next delay of
// the retry schedule; after the last one the delivery is failed. A
// redelivery starts a new cycle of attempts, due at once; an attempt of an
// earlier cycle still in flight is only logged.
//
// Endpoint creation and redelivery are flows on the idempotency engine,
// like payments: one local phase each, whose commit writes the rows and
// stores the answer. An endpoint's secret is drawn in that phase, so the
// stored answer, and every replay of it, carries the one secret that was
// committed. That phase takes the user's endpoint lock before it stamps
// the endpoint's created (InsertEndpointTx), and the drain takes it too
// before it reads the endpoints an event goes to: so an endpoint gets every
// event created after it and none created before, even one whose
// transaction is still open while the event is written.
//
// This package must never hold a transaction, or a pool connection, open
// across an HTTP call to a merchant.
package merchanthooks
