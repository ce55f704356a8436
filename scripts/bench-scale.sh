#!/usr/bin/env bash
# Runs the scale benchmarks and writes docs/BENCHMARKS-scale.md and
# docs/churn.svg (`make bench-scale`; about 25 minutes on the 2-core
# development machine, and some 30 GB of disk for the 10M database).
#
# One run of cmd/paymentsbench -scale, on its own PostgreSQL cluster
# (fsync on) and Stripe simulator:
# 1. builds a database per size (0: the young one, 100k, 1M, 10M finished
#    requests spread over the users and the last TTL), with COPY FREEZE
#    into tables stripped of their indexes, built again after;
# 2. runs B, C and E on each size at 16 clients, rounds interleaved: req/s,
#    p50/p99, statements, shared-buffer hits and reads, table and index sizes;
# 3. starts the real binary (`payments serve`) on the 1M and 10M databases,
#    key filter on and off: time to /readyz and to the filter rebuilt, RSS;
# 4. churn: `payments serve` and `payments worker` with a 45 s key TTL under a
#    fixed rate of new payments for 5 TTLs, sampled every second (rows, dead
#    tuples, table and index sizes, reaper lag), plotted into docs/churn.svg;
#    every user has a webhook endpoint, so deliveries pile up as in production;
#    twice: as migrated, and with migration 000017 run down, for the comparison.
#
# It writes a file of its own because `make bench` rewrites
# docs/BENCHMARKS.md whole (which links to it). Settings, from the environment:
#   BENCH_SCALE_SIZES    (default 0,100000,1000000,10000000)
#   BENCH_SCALE_STARTUP  (default 1000000,10000000: sizes whose start-up is timed)
#   BENCH_SCALE_CLIENTS  (default 16)   BENCH_SCALE_DURATION (5s)   BENCH_SCALE_ROUNDS (3)
#   BENCH_SCALE_CHURN    (default "-churn-ttl 45s -churn-ttls 5 -churn-rate 150")
#   BENCH_SCALE_ARGS     more paymentsbench flags, e.g. "-startup-baseline-bin /tmp/payments-main"
#   BENCH_SCALE_QUICK=1  0 and 100k keys, 1s cells, one round, 2 TTLs of 10 s of churn
#   BENCH_SCALE_OUT      (default docs/BENCHMARKS-scale.md)
set -euo pipefail
cd "$(dirname "$0")/.."

out=${BENCH_SCALE_OUT:-docs/BENCHMARKS-scale.md}
svg="$(dirname "$out")/churn.svg"
mkdir -p "$(dirname "$out")" bin

# The start-up and the churn run the real binary, built from this tree.
go build -o bin/payments-bench ./cmd/payments

if [[ ${BENCH_SCALE_QUICK:-} == 1 ]]; then
  args=(-scale 0,100000 -clients 16 -duration 1s -warmup 500ms -rounds 1 -startup 100000
    -churn-ttl 10s -churn-ttls 2 -churn-rate 100 -churn-variants as-migrated)
else
  # shellcheck disable=SC2206 # BENCH_SCALE_CHURN is a list of flags on purpose
  args=(-scale "${BENCH_SCALE_SIZES:-0,100000,1000000,10000000}" -clients "${BENCH_SCALE_CLIENTS:-16}"
    -duration "${BENCH_SCALE_DURATION:-5s}" -warmup 1s -rounds "${BENCH_SCALE_ROUNDS:-3}"
    -startup "${BENCH_SCALE_STARTUP:-1000000,10000000}"
    ${BENCH_SCALE_CHURN:--churn-ttl 45s -churn-ttls 5 -churn-rate 150} -churn-variants as-migrated,before-000017)
fi
# shellcheck disable=SC2206 # BENCH_SCALE_ARGS is a list of flags on purpose
args+=(-payments-bin bin/payments-bench -churn-svg "$svg" ${BENCH_SCALE_ARGS:-})

pb_cmd=(go run ./cmd/paymentsbench "${args[@]}")
echo "== ${pb_cmd[*]}" >&2
"${pb_cmd[@]}" -command "make bench-scale: ${pb_cmd[*]}" -out "$out"
echo "wrote $out and $svg" >&2
