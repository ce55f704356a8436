// Package keyfilter is the RAM shield in front of the idempotency-key index:
// before a claim looks a key up in PostgreSQL, the filter answers
// "definitely new" (not added in the last TTL) or "maybe seen". "Definitely
// new" lets the claim go straight to a plain INSERT; "maybe seen" takes the
// careful lookup. It is an accelerator, never an authority: the unique index
// on (user_id, idempotency_key) decides. Each instance has its own filter, so
// a key first seen by another instance is a false "new" the insert catches.
//
// The package owns a time-sliced Bloom filter of (user id, key) pairs, its
// rebuild at start-up and its metrics. It must never answer "definitely new"
// for a key added on this instance within the TTL, and never make a check
// wait for a lock.
//
// # Using it
//
//   - At start-up: New, then Rebuild with the keys still alive, streamed
//     (ScanRows adapts pgx rows). Until Rebuild returns, every check answers
//     "maybe seen".
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
// LayoutBlocked, the default, keeps an element's bits for every slice in one
// 64-byte cache line: the line is split among the slices (128 bits each, with
// 4 slices), and an element picks a line and k bits within a slice's share,
// the same for every slice. A check hashes once (hash/maphash, seeded per
// process) and reads one line, however many slices there are; an add sets
// bits in one or two words of it. Blocking costs memory, since some lines get
// more keys than others; the sizing computes the false-positive rate of a
// blocked filter exactly (block loads and the occupancy of each block) and
// takes the fewest lines that meet the target.
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
// # Cost
//
// With 10 million live keys and a 0.1 % false-positive rate for a whole
// check, on the 2-core development machine (AMD EPYC, 32 MiB L3; go test
// -bench . -benchtime 2s, one run, ns per operation, memory in bytes per
// live key):
//
//	                                member  non-member  latency  add  check+add  bytes/key
//	blocked, 4 slices (the default)    178         184      204  225        218       4.27
//	blocked, 3 slices                  205         218      227  237        266       3.47
//	bloom/v3 layout, 4 slices          449         483      477  281        415       2.88
//	bloom/v3 layout, 24 slices         848        1175        -  250        855       2.74
//	24 bloom/v3 filters, naive        2848        6520        -  167       2135       2.62
//	one bloom/v3 filter, no slices     276         250      281  391        606       1.80
//
// The machine is shared and its memory latency varies by a factor of two
// from hour to hour; in a quiet hour the same benchmarks ran the default at
// 111 to 156 ns per check and about 200 ns per add, and the single bloom/v3
// filter at 114 to 159 ns per check. The ratios hold: the default checks four
// slices in less time than bloom/v3 checks one filter, and 15 to 35 times
// faster than the naive 24 filters, which hash once per filter.
//
// A check costs one cache miss (a random read in 40 MiB, 130 to 150 ns on a
// quiet day) plus about 35 ns of hashing and counting. The loops measure
// back-to-back checks, whose misses the processor overlaps; CheckLatency
// makes each check wait for the previous one, as checks between other work
// do. An add also reads the clock (25 ns here), and its locked instructions
// keep it from overlapping anything. The naive add is cheap only because it
// writes a one-megabyte filter that stays in cache.
package keyfilter
