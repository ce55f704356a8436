// Package keyfilter is the RAM shield in front of the idempotency-key index:
// before a claim looks a key up in PostgreSQL, the filter answers
// "definitely new" (not added in the last TTL) or "maybe seen". "Definitely
// new" lets the claim go straight to a plain INSERT; "maybe seen" takes the
// careful lookup. It is an accelerator, never an authority: the unique index
// on (user_id, idempotency_key) decides. Each instance has its own filter, so
// a key first seen by another instance is a false "new" the insert catches.
//
// The package owns a time-sliced Bloom filter of (user id, key) pairs, its
// rebuild at start-up, its snapshots and its metrics. It must never answer "definitely new"
// for a key added on this instance within the TTL, and never make a check
// wait for a lock.
//
// # Using it
//
//   - At start-up: New, then Rebuild with the keys still alive, streamed
//     (ScanRows adapts pgx rows). Until Rebuild returns, every check answers
//     "maybe seen". Or, before the filter takes a key, LoadSnapshot with the
//     bits a running filter wrote (Snapshot), then Rebuild with only the keys
//     live from after the time it covers (less a margin for transactions
//     still committing then); see Snapshots below.
//   - In the claim: CheckAndAdd(user, key). On "definitely new", insert
//     without the lookup; should the insert hit the unique index anyway,
//     fall back to the lookup. That happens for a key from another instance,
//     and for rows the filter does not hold: an unfinished key the engine
//     keeps past its TTL, an expired one not yet deleted. On "maybe seen",
//     look the key up, and call ReportFalsePositive when nothing is found.
//   - A nil *Filter, or one made with Config.Disabled, answers "maybe seen"
//     to every check, so callers need no branches.
//
// # Slices
//
// Time is cut into slices of P = ceil(TTL/(Slices-1)); slice g holds the keys
// added during [g*P, (g+1)*P). The filter keeps the newest slice, G (that of
// the latest time its clock has shown), and the Slices-1 before it. A check
// consults them all; an add goes into G, which is never older than the
// clock's slice. Moving to a new slice (lazily, in Add and CheckAndAdd, or in
// Rotate) drops the oldest, whose keys were all added at least
// (Slices-1)*P >= TTL ago. Hence the invariant, tested to the nanosecond with
// an injected clock:
//
//	A key added at time a answers "maybe seen" at every time up to and
//	including a+TTL. It is dropped at the first rotation at or after
//	(floor(a/P)+Slices)*P, which is no later than a+Slices*P.
//
// With the defaults, a 24-hour TTL and 4 slices, P is 8 hours and a key is
// remembered for 24 to 32 hours. Few, wide slices keep a check cheap (it
// consults every slice) at the price of memory: the filter holds
// Slices/(Slices-1) times the keys of one TTL, and each slice is sized for
// FalsePositiveRate/Slices, so that a check of all of them, with all of them
// at their expected load, stays within FalsePositiveRate.
//
// A clock that goes back keeps the newest slice: keys added meanwhile count
// as added in it. Rebuild puts a key created "in the future" (the database's
// clock ahead of ours) in the newest slice too.
//
// # Layouts and concurrency
//
// LayoutBlocked, the default, gives each element one 64-byte cache line per
// slice, the lines of all slices side by side (256 bytes with 4 slices): an
// element picks a group of lines and k bits within a line, the same for
// every slice. A check hashes once (xxhash, with a per-filter seed folded
// in) and reads its group's lines, whose loads the processor issues at once
// and DRAM serves from one row; an add sets bits in one line. Blocking costs
// memory, since some blocks get more keys than others; the sizing computes
// the false-positive rate of a blocked filter exactly (block loads and the
// occupancy of each block) and takes the fewest lines that meet the target.
// Until issue 29 the slices shared one line (128 bits each), one read per
// check, at 4.27 bytes per live key for 0.1 %; at the 0.5 % the issue
// allowed, 128-bit blocks need 3.01 bytes per live key and 512-bit ones
// 2.49, the only blocked layout under its 2.5.
//
// LayoutBloomV3 is github.com/bits-and-blooms/bloom/v3, a filter per slice,
// bit for bit, kept as the baseline: it hashes once too (bloom.Locations) and
// reuses the positions in every slice, but reads up to k lines per slice.
//
// Checks read words with atomic loads and take no lock; adds set bits with
// atomic ORs. A rotation, once per slice period, takes a mutex and clears the
// oldest slice's bits in place before publishing the new slice number, so a
// key never lands in bits being cleared unless it is already past the TTL,
// and nothing is allocated after New. The check counters are striped, so
// that checks on different cores do not write one cache line.
//
// # Snapshots
//
// Reading every live key at start-up took 22 s at ten million keys. A
// snapshot (Snapshot) is the bits, the hash seed, the newest slice's number
// and the time it covers, under a CRC-32C; LoadSnapshot refuses one that is
// corrupt, made for another configuration, older than the TTL or the
// caller's limit, or offered to a filter that took keys (their bits were
// hashed with its own seed), and the caller rebuilds from every key
// instead. The slices of a loaded snapshot sit in their slots as if the
// filter had run all along, and a rotation drops those that ended since.
// Where the snapshot is kept, and the margin of keys read again, are the
// caller's: internal/recovery keeps it in PostgreSQL.
//
// # Cost
//
// With 10 million live keys and a 0.5 % false-positive rate for a whole
// check, on the 2-core development machine (go test -bench, nice'd, beside
// five other sessions' builds and tests: memory latency was about ten times
// a quiet day's), ns per operation, memory in bytes per live key:
//
//	                                    member  non-member  latency  bytes/key
//	blocked, 4 slices (the default)       1367        1437     1579      2.49
//	bloom/v3 layout, 4 slices             1729        5576     2766      2.32
//	one bloom/v3 filter, no slices        1082        1478     1208      1.38
//	a random read of 256 MiB (DRAMRead)      -           -     1305         -
//
// On such a machine the absolute times say little; the ratios in one run
// are what the goals judge (cmd/paymentsbench): a check, one at a time,
// against one random DRAM read that waits for the last (1.21 × here, 1.04
// × in a second run), and against bloom/v3 doing the same job at the same
// rate (0.57 × its latency, 0.26 × its time for non-members). A single
// unsliced bloom/v3 filter, which cannot forget a key, checks in fewer
// lines and less memory; it is a yardstick, not an alternative.
//
// A check costs one DRAM access (its group's lines, fetched together) plus
// the hashing and counting. The loops measure back-to-back checks, which
// the processor overlaps only as far as its window holds them;
// CheckLatency makes each check wait for the previous one, as checks
// between other work do. An add also reads the clock (25 ns on a quiet
// day), and its locked instructions keep it from overlapping anything.
package keyfilter
