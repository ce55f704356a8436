#!/usr/bin/env bash
# Runs the reconciler's scenario and writes docs/BENCHMARKS-reconcile.md
# (`make bench-reconcile`): cmd/paymentsbench -reconcile, on its own
# PostgreSQL cluster and an in-process Stripe simulator. A month of
# history (payments, lost webhooks, dashboard refunds, disputes) is made in bulk on
# the simulator's clock, one PAYMENTS_RECONCILE_INTERVAL at a time, and the
# reconciler makes a pass after each; the report judges itself.
#
# The simulator holds every object and event of the month in memory, about
# 3.7 kB of live heap a payment (BenchmarkSeed_memoryPerPayment), and the
# scenario runs at GOGC 100: the default million peaked at 6.7 GiB resident
# (docs/BENCHMARKS-reconcile.md). Settings, from the environment:
#   BENCH_RECONCILE_PAYMENTS  (default 1000000)  BENCH_RECONCILE_DAYS (30)
#   BENCH_RECONCILE_INTERVAL  (default 30s)
#   BENCH_RECONCILE_QUICK=1   20,000 payments over one simulated day (about a minute)
#   BENCH_RECONCILE_ARGS      more paymentsbench flags (-reconcile-drop, -reconcile-dashboard, ...)
#   BENCH_RECONCILE_OUT       (default docs/BENCHMARKS-reconcile.md)
set -euo pipefail
cd "$(dirname "$0")/.."

out=${BENCH_RECONCILE_OUT:-docs/BENCHMARKS-reconcile.md}
mkdir -p "$(dirname "$out")"
if [[ ${BENCH_RECONCILE_QUICK:-} == 1 ]]; then
  args=(-reconcile 20000 -reconcile-days 1)
else
  args=(-reconcile "${BENCH_RECONCILE_PAYMENTS:-1000000}" -reconcile-days "${BENCH_RECONCILE_DAYS:-30}")
fi
# shellcheck disable=SC2206 # BENCH_RECONCILE_ARGS is a list of flags on purpose
args+=(-reconcile-interval "${BENCH_RECONCILE_INTERVAL:-30s}" ${BENCH_RECONCILE_ARGS:-})

pb_cmd=(go run ./cmd/paymentsbench "${args[@]}")
echo "== ${pb_cmd[*]}" >&2
"${pb_cmd[@]}" -command "make bench-reconcile: ${pb_cmd[*]}" -out "$out"
echo "wrote $out" >&2
