// Package recovery is the idempotency-key engine: it executes a request
// carrying an Idempotency-Key exactly once, however often it is retried and
// wherever the process dies, using Brandur Leach's idempotency keys with
// recovery points.
//
// A request runs as a Flow: a state machine whose states are recovery points
// and whose transitions are Phases. Each phase either commits local work in
// one SERIALIZABLE transaction, or makes one external call (outside any
// transaction) and then records its result in a short transaction. The
// commit that records a phase's work also moves the key to its next recovery
// point, so after a crash the next attempt (a retry from the client, or the
// completer) starts exactly where the last commit left off.
//
//	claim (tx) ──> phase at "started" ──> phase at the next point ──> ... ──> "finished": stored response
//
// What keeps it correct:
//
//   - The claim (one transaction) finds or creates the key row (user, key),
//     answers ErrKeyReused if the request differs from the first one, replays
//     a finished response, answers ErrKeyInUse while another holder's lock is
//     live, and otherwise takes the lock with a new lock_token.
//   - Every commit is fenced: it only moves the key if the lock_token is still
//     the one this attempt claimed, so a holder whose lock was taken over
//     cannot write. The database checks it (assert_lock_held raises when the
//     move matches no row), so the move goes with the COMMIT.
//   - While an external call runs, a heartbeat keeps the lock alive; when the
//     lock is lost, the call's context is cancelled.
//   - Serialization failures are retried by db.WithPipelinedTx; an error leaves the
//     key unlocked at its last recovery point. An error the flow marks
//     Transient (say, Stripe unreachable) is reported as such, for a 503.
//   - External calls carry a child key (Key.ChildKey) derived from the key
//     row's random id and the step name, so the remote side deduplicates too.
//     A child key the remote side reports spent (it replays a stored 500:
//     ChildKeySpent) is reconciled and then replaced by its next generation,
//     recorded in the database so that every process agrees (childkeys.go).
//
// What it costs: a request needs one commit before its first external call
// (the claim, which also commits the local phases that follow it) and one
// after each call, with the local phases up to the next call or the answer.
// Each runs in a db.Tx, which sends BEGIN with the first statement and the
// writes nobody reads with the next statement or the COMMIT. A key the
// claim finds new is not looked up (see KeyFilter) and its row is written
// once, at the end of the claim's transaction, where that transaction
// leaves it, with nothing read back: such a claim is one round trip.
//
// So a flow's tables that reference the key (idempotency_key_id) must check
// that reference at commit: DEFERRABLE INITIALLY DEFERRED, as the
// migrations do for payments, refunds, audit records and staged jobs.
//
// The engine knows nothing about payments: a flow is data handed to it.
package recovery
