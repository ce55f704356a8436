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
//     live, and otherwise takes the lock with a new lock_token. An existing
//     key always gets this careful answer, even when the key filter took it
//     for new: a new key's row is written before any of its first phase's
//     work, and the unique index decides.
//   - A lock lasts the lifetime its holder gave it: the holder writes
//     lock_expires_at (now + its own Config.LockTimeout) at the claim, at
//     every move and at every heartbeat, and every judge (a claim, the
//     completer, Lookup) reads it against the one clock. No process judges
//     another's lock by its own timeout, so processes configured with
//     different lock timeouts never take over each other's live requests.
//   - Every commit is fenced: it only moves the key if the lock_token is still
//     the one this attempt claimed, so a holder whose lock was taken over
//     cannot write. The database checks it (assert_lock_held raises when the
//     move matches no row), so the move goes with the COMMIT.
//   - While an external call runs, a heartbeat keeps the lock alive; when the
//     lock is lost, the call's context is cancelled.
//   - Serialization failures are retried by db.WithTx; an error leaves the
//     key unlocked at its last recovery point. An error the flow marks
//     Transient (say, Stripe unreachable) is reported as such, for a 503.
//   - External calls carry a child key (Key.ChildKey) derived from the key
//     row's random id and the step name, so the remote side deduplicates too.
//     A child key the remote side reports spent (it replays a stored 500:
//     ChildKeySpent) is reconciled and then replaced by its next generation,
//     recorded in the database so that every process agrees (childkeys.go).
//   - Time comes from one clock: the injected Config.Now, passed into SQL,
//     or else the database's now(). Whatever compares with a time the
//     database wrote (a lock's lifetime, a key's expiry, whether a key is
//     older than the remote side's idempotency window) is judged in SQL.
//
// What it costs: a request needs one commit before its first external call
// (the claim, which also commits the local phases that follow it) and one
// after each call, with the local phases up to the next call or the answer.
// Each runs in a db.Tx, which sends BEGIN with the first statement and the
// writes nobody reads with the next statement or the COMMIT. A key the
// claim finds new is not looked up (see KeyFilter): its row is inserted
// first, queued ahead of the first phase's statements, and the phase's
// move of it is queued with the COMMIT, with nothing read back: such a
// claim is one round trip.
//
// Why the key row goes first: each instance has its own key filter, so a
// key another instance finished is "new" here. The unique index must
// decide before the first phase's work runs (its insert fails the
// transaction, which aborts the statements queued behind it, and the claim
// takes the careful path), or that work (a row lock it waits for, an
// error, a serialization failure) would be the answer where the replay, or
// 422, is right. A claim that failed before its insert was even sent (all
// its statements were queued) asks whether the key exists before it
// answers. The rows a flow writes that reference the key therefore always
// follow the key's row, and their foreign keys are plain (migration 000013).
//
// The engine knows nothing about payments: a flow is data handed to it.
package recovery
