// Package chaostest is the chaos suite of the payments service: it runs the real
// binary against the Stripe simulator while many clients retry their
// requests, the simulator injects faults and the service is crashed and
// restarted, and then proves that every customer was charged exactly once.
//
// A run (Run) has four parts:
//
//   - cluster.go: the processes. One `payments stripesim` (it is Stripe, and
//     outlives every crash), two `payments serve` instances on one database,
//     one `payments worker`, and a small in-process webhook relay that hands
//     the simulator's signed events to whichever instance is up (sometimes
//     twice, as Stripe may).
//   - client.go and workload.go: the clients. Each logical request gets its
//     own Idempotency-Key and is sent by the service's Go client (package
//     client, the client half of the pattern), which retries it with the
//     same key and body (exponential backoff with full jitter, at least the
//     Retry-After) until a final answer; its observer puts every attempt's
//     raw answer into the Ledger.
//   - faults.go and crashes.go: the chaos. Simulator faults of every kind;
//     restarts with a PAYMENTS_FAILPOINTS crash, error or sleep; SIGKILLs of
//     the instances and of the worker; graceful restarts.
//   - settle.go, snapshot.go and check.go: the proof. After the clients
//     finished and the background work settled, Check compares the Ledger,
//     the database and the simulator and reports every Violation with the key
//     or object that shows it; report.go prints the counts.
//
// Check is a pure function of a Snapshot and the Ledger's records, so its own tests
// (check_test.go) feed it hand-built inconsistent worlds and prove that it
// can fail.
//
// The package is a test harness: the service never imports it. It talks to
// 127.0.0.1 only, bounds every loop in time and count, and never writes to
// the database except to seed the demo users; everything else goes through
// the service's HTTP API, as a client's would.
package chaostest
