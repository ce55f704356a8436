#!/usr/bin/env bash
# Runs the benchmarks and writes docs/BENCHMARKS.md (`make bench`).
#
# 1. go test -bench of the key filter alone (ns per check and per add,
#    bytes per key, at 10 million live keys);
# 2. cmd/paymentsbench: its own PostgreSQL (fsync on) and Stripe simulator,
#    the raw SQL floors (A-naive, A-own) and the service end to end (B to E)
#    at each client count, with the ratios and the issue's goals, which
#    also judges the filter's figures from step 1;
# 3. the cost of a fresh test database (internal/dbtest).
#
# How the cost grows with the key store (10M live keys, start-up, churn) is
# `make bench-scale` (scripts/bench-scale.sh), which writes
# docs/BENCHMARKS-scale.md: a file of its own, since this one is rewritten
# whole; the report links to it.
#
# Machines here are shared and noisy: read the ratios, which come from one
# run. Settings, from the environment:
#   BENCH_CLIENTS   (default 1,4,16,64)   BENCH_DURATION (5s)   BENCH_WARMUP (1s)
#   BENCH_ROUNDS    (default 3: every cell that many times, interleaved; medians)
#   BENCH_GOAL_ROUNDS (default 5: the cells the goals read, 16 and 64 clients;
#                   one run decides, on their medians: issue 40)
#   BENCH_ARGS      more paymentsbench flags, e.g. "-service-conns 16"
#   BENCH_QUICK=1   1s cells at 1 and 4 clients, and short go test runs
#   BENCH_OUT       (default docs/BENCHMARKS.md)
set -euo pipefail
cd "$(dirname "$0")/.."

out=${BENCH_OUT:-docs/BENCHMARKS.md}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$(dirname "$out")"

if [[ ${BENCH_QUICK:-} == 1 ]]; then
  bench_args=(-quick)
  kf_cmd=(go test -run '^$' -bench 'Check(Member|NonMember|Latency)/(blocked|bloomv3)-4$|(Add|CheckAndAdd)/blocked-4$|DRAMRead/latency-256MiB$' -benchmem -benchtime 100ms -count 1 ./internal/keyfilter/)
  db_cmd=(go test -run '^$' -bench . -benchmem -count 1 ./internal/dbtest/)
else
  bench_args=(-clients "${BENCH_CLIENTS:-1,4,16,64}" -duration "${BENCH_DURATION:-5s}" -warmup "${BENCH_WARMUP:-1s}"
    -rounds "${BENCH_ROUNDS:-3}" -goal-rounds "${BENCH_GOAL_ROUNDS:-5}")
  kf_cmd=(go test -run '^$' -bench . -benchmem -benchtime 100ms -count 3 ./internal/keyfilter/)
  db_cmd=(go test -run '^$' -bench . -benchmem -count 5 ./internal/dbtest/)
fi
# shellcheck disable=SC2206 # BENCH_ARGS is a list of flags on purpose
bench_args+=(${BENCH_ARGS:-})

echo "== ${kf_cmd[*]}" >&2
"${kf_cmd[@]}" | tee "$tmp/keyfilter.txt" >&2

pb_cmd=(go run ./cmd/paymentsbench "${bench_args[@]}")
echo "== ${pb_cmd[*]}" >&2
"${pb_cmd[@]}" -command "make bench: ${pb_cmd[*]}" -keyfilter-bench "$tmp/keyfilter.txt" -out "$tmp/report.md"

echo "== ${db_cmd[*]}" >&2
"${db_cmd[@]}" | tee "$tmp/dbtest.txt" >&2

# Where the CPU goes (issue 29: "a profile says where"): the request (B) and
# the background drain (G) at 16 clients, each profiled in a run of its own
# after the measured ones, so that the profiler's cost is in no figure above.
profile_clients=16 # G runs at 16 and 64 clients only
prof_args=(-duration "${BENCH_DURATION:-5s}" -warmup "${BENCH_WARMUP:-1s}")
if [[ ${BENCH_QUICK:-} == 1 ]]; then
  prof_args=(-duration 1s -warmup 500ms -preload 20000) # -quick's cells, at 16 clients
fi
prof_cmds=()
for cell in B G; do
  prof_cmd=(go run ./cmd/paymentsbench "${prof_args[@]}" -scenarios "$cell" -clients "$profile_clients" -rounds 1
    -cpuprofile-cell "$cell:$profile_clients" -cpuprofile "$tmp/$cell.pprof" -out "$tmp/profile-$cell.md")
  echo "== ${prof_cmd[*]}" >&2
  "${prof_cmd[@]}" >&2
  prof_cmds+=("${prof_cmd[*]}")
done

{
  cat "$tmp/report.md"
  echo "## The key filter alone"
  echo
  echo "\`internal/keyfilter\`'s benchmarks: 10 million live keys in each design, 0.5 % false positives for a whole"
  echo "check (its package comment explains the designs; blocked-4 is the default). ns/op per check or add,"
  echo "bytes/key of memory per live key; DRAMRead is the yardstick, random reads of a 256 MiB array (and of one the"
  echo "filter's size), each waiting for the last (latency) or not (independent). The goals above take the medians. Command:"
  echo
  echo '```'
  echo "${kf_cmd[*]}"
  echo '```'
  echo
  echo '```'
  grep -E '^(Benchmark|goos|goarch|cpu|\(internal)' "$tmp/keyfilter.txt" || true
  echo '```'
  echo
  echo "## Where the CPU goes"
  echo
  echo "CPU profiles of the request (B) and of the background drain (G) at $profile_clients clients, each in a run of its"
  echo "own after the measured ones (so that the profiler's cost is in no figure above). The profile is of the whole"
  echo "benchmark process: the clients, the service and the Stripe simulator (PostgreSQL is another process, its"
  echo "share is the *CPU ms postgres* column). \`flat\` is time in the function itself, \`cum\` with what it calls."
  echo "Commands:"
  echo
  echo '```'
  printf '%s\n' "${prof_cmds[@]}"
  echo "go tool pprof -top -nodecount 25 <profile>; go tool pprof -top -cum -nodecount 25 <profile>"
  echo '```'
  for cell in B G; do
    echo
    echo "### $cell at $profile_clients clients: the 25 functions with the most CPU of their own"
    echo
    echo '```'
    go tool pprof -top -nodecount 25 "$tmp/$cell.pprof" 2>/dev/null | sed -n '/^Showing\|^ *flat/,$p'
    echo '```'
    echo
    echo "### $cell at $profile_clients clients: the 25 with the most CPU with what they call"
    echo
    echo '```'
    go tool pprof -top -cum -nodecount 25 "$tmp/$cell.pprof" 2>/dev/null | sed -n '/^Showing\|^ *flat/,$p'
    echo '```'
    echo
    echo "### $cell at $profile_clients clients: by part of the process"
    echo
    echo "\`go tool pprof -tags\`: the share of each part (its \"part\" label, cmd/paymentsbench/parts.go). Unlabelled"
    echo "is the HTTP servers' reading of each request and their last write, pgxpool's own goroutines and the Go runtime."
    echo
    echo '```'
    go tool pprof -tags "$tmp/$cell.pprof" 2>/dev/null
    echo '```'
  done
  echo
  echo "## At scale"
  echo
  echo "How these costs grow with the key store (0 to 10 million live keys), the start-up with the key filter's"
  echo "rebuild, and several TTLs of churn with the reaper: [BENCHMARKS-scale.md](BENCHMARKS-scale.md), written by"
  echo "\`make bench-scale\` (\`scripts/bench-scale.sh\`)."
  echo
  echo "What tracing costs when it is off (B before and after issue 18, alternated):"
  echo "[BENCHMARKS-tracing-off.md](BENCHMARKS-tracing-off.md), by \`scripts/bench-tracing-off.sh\`."
  echo
  echo "## A fresh test database"
  echo
  echo "Every test that touches SQL gets its own database cloned from a migrated template"
  echo "(\`CREATE DATABASE ... TEMPLATE ... STRATEGY = FILE_COPY\`), on a cluster with fsync off. What one clone costs:"
  echo
  echo '```'
  echo "${db_cmd[*]}"
  echo '```'
  echo
  echo '```'
  grep -E '^(Benchmark|goos|goarch|cpu)' "$tmp/dbtest.txt" || true
  echo '```'
} > "$out"
echo "wrote $out" >&2
