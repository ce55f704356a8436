// Package recovery is the idempotency-key engine: it executes a request
// carrying an Idempotency-Key exactly once, however often it is retried and
// wherever the process dies, using Brandur Leach's idempotency keys with
// recovery points.
//
// A request is a row, the row's recovery point names where it stands, and a
// Flow (flow.go) is the request's state machine, declared in one place and
// in order: its steps, each naming the recovery point it starts from, the
// Phase to run there, and the recovery points it may move to (NewFlow,
// From). The engine is built with its flows, once (New, or a Builder that
// gathers them from the packages declaring them), and refuses there what
// would otherwise surface at request time: a flow whose moves do not lead
// from "started" to "finished", two flows of one name, a failpoint that no
// flow fires (Config.Failpoints, named from the declarations:
// Flow.Failpoints). A request runs with a flow value the engine was built
// with (Builder.Register's handle, Registered), never a name; the
// completer resumes keys by the names of those same flows. Package
// recoverytest proves a flow exactly-once from its failpoints, killing a
// process of the test at each. A phase is a function from one
// recovery point to the next: it either commits local work in one
// SERIALIZABLE transaction (LocalPhase), or makes one external call outside
// any transaction and then records its result in a short transaction
// (ExternalPhase). The commit that records a phase's work also moves the
// key to its next recovery point, so after a crash the next attempt (a
// retry from the client, or the completer) starts exactly where the last
// commit left off.
//
// Engine.Execute (engine.go) reads in the order a request runs:
//
//	claim (claim.go) ──> phase at "started" ──> phase at the next point ──> ... ──> "finished": the stored answer
//
// and commit.go says what every transaction of an attempt does. trace.go
// makes the claim and each phase a span, when tracing is on (API.md
// section 9): a trace then reads in the same order.
//
// What keeps it correct:
//
//   - The claim (one transaction) inserts the key row (user, key), or finds
//     it and answers ErrKeyReused if the request differs from the first
//     one, replays a finished response, answers ErrKeyInUse while another
//     holder's lock is live, and otherwise takes the lock with a new
//     lock_token. The key's row is the transaction's first write, so the
//     unique index decides before any phase's work runs: an existing key
//     always gets this careful answer, even when the key filter took it for
//     new.
//   - A lock lasts the lifetime its holder gave it: the holder writes
//     lock_expires_at (now + its own Config.LockTimeout) at the claim, at
//     every move and at every heartbeat, and every judge (a claim, the
//     completer, Lookup) reads it against the one clock. No process judges
//     another's lock by its own timeout, so processes configured with
//     different lock timeouts never take over each other's live requests.
//   - Every commit is fenced: it only moves the key if the lock_token is still
//     the one this attempt claimed, so a holder whose lock was taken over
//     cannot write. The database checks it (assert_lock_held raises when the
//     move matches no row: db.ErrLockNotHeld, here ErrLockLost), so the move
//     goes with the COMMIT.
//   - While an external call runs, a heartbeat keeps the lock alive; when the
//     lock is lost, the call's context is cancelled.
//   - Serialization failures are retried by db.WithTx. Only a failure that
//     a later attempt may not meet leaves the key unlocked at its last
//     recovery point, for a retry or the completer: a serialization
//     failure or deadlock past its retries, the database out of reach, the
//     attempt's context ending, an error the flow marks Transient (say,
//     Stripe unreachable, reported as such for a 503, in the words of the
//     flow's Remote: RemoteOf). Any other error of
//     a phase (a constraint the flow's write violates, a bug) fails the
//     key once (ErrFailed, failsTheKey): marked as needing attention with
//     the error, answered so to every retry without running anything,
//     left alone by the completer, until an operator re-drives it.
//   - External calls carry a child key (Key.ChildKey) derived from the key
//     row's random id and the step name, so the remote side deduplicates too.
//     A child key the remote side reports spent (it replays a stored 500:
//     ChildKeySpent) is reconciled and then replaced by its next generation,
//     recorded in the database so that every process agrees (childkeys.go).
//   - A reconcile is told when the phase's calls may have been executed:
//     the key's call windows (callwindows.go), one per attempt at the
//     phase's recovery point, from the commit that made the call possible
//     (the move to that point, or the claim that resumed the key) to the
//     attempt's recorded end (its unlock; for a holder that died, the end
//     of the lock it last wrote; for the attempt reconciling, now), plus
//     SpentKeyGrace. The statements that already write the key row record
//     them, so a remote side that can only list what it made by time is
//     asked about those minutes, not about everything since the key was
//     created.
//   - Time comes from one clock: the injected Config.Now, passed into SQL,
//     or else the database's now(). Whatever compares with a time the
//     database wrote (a lock's lifetime, a key's expiry, whether a key is
//     older than the remote side's idempotency window) is judged in SQL.
//   - Nothing untyped passes between phases. A phase that hands a value to
//     the phases after it declares a typed Handoff, whose lifetime the
//     engine owns: kept only once its transaction commits, dropped when a
//     transaction runs again and on a resumed attempt, which read instead.
//
// What it costs, and the named mechanisms that keep it low (each with its
// measured gain in docs/architecture.md):
//
//   - Shared commit (commit.go): recovery points with no external call
//     between them share a transaction, so a request needs one commit
//     before its first external call (the claim's, with the local phases
//     that follow it) and one after each call.
//   - Pipelining (db.Tx): BEGIN goes with the first statement, and writes
//     nobody reads go with the next statement or the COMMIT. The claim of a
//     new key and its first phase read nothing back: one round trip.
//   - The key filter (keyfilter.go): a key the filter has never seen is
//     inserted without a lookup; the unique index stays the authority.
//   - Hand-offs (Handoff): the create flow's payment, handed from the claim
//     to the record of Stripe's answer instead of read again.
//
// The engine knows nothing about payments: a flow is data handed to it.
package recovery
