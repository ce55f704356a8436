#!/usr/bin/env bash
# What tracing costs when it is off (issue 18: "nothing measurable is spent
# when no endpoint is configured"): paymentsbench's B, built from BASE (the
# commit before tracing) and from HEAD, run alternately with no OTEL_*
# variable set, on this machine. Each binary's B is its own process, so the
# comparison is of runs interleaved in time, not of one process: read the
# rows whose "others %" (CPU other processes took) is low.
#
#   scripts/bench-tracing-off.sh [BASE] [PAIRS]   (defaults: bcf5c08, 3)
#
# Writes the reports to $OUT (default /tmp/bench-tracing-off) and prints a
# table of B at 16 clients: req/s (median of 3 rounds), p99, CPU ms per
# request of the benchmark's process and of PostgreSQL, others %.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-bcf5c08}
pairs=${2:-3}
out=${OUT:-/tmp/bench-tracing-off}
mkdir -p "$out"
unset OTEL_EXPORTER_OTLP_ENDPOINT OTEL_EXPORTER_OTLP_TRACES_ENDPOINT

wt=$(mktemp -d)
trap 'git worktree remove --force "$wt" >/dev/null 2>&1 || true' EXIT
git worktree add -q --detach "$wt" "$base"
(cd "$wt" && go build -o "$out/pb-before" ./cmd/paymentsbench)
go build -o "$out/pb-after" ./cmd/paymentsbench

for i in $(seq 1 "$pairs"); do
  for b in before after; do
    echo "== $b, pair $i" >&2
    "$out/pb-$b" -scenarios B -clients 16 -rounds 3 -duration 5s -warmup 1s -out "$out/$b-$i.md" >"$out/$b-$i.log" 2>&1
  done
done

echo "| binary | pair | B req/s | p99 ms | CPU ms here | CPU ms postgres | others % |"
echo "|---|--:|--:|--:|--:|--:|--:|"
for i in $(seq 1 "$pairs"); do
  for b in before after; do
    f="$out/$b-$i.md"
    rate=$(grep -E '^\| B \| 16 \| [0-9]+ \| \*\*' "$f" | awk -F'|' '{gsub(/ /,"",$5); gsub(/\*/,"",$5); sub(/\(.*/,"",$5); print $5}')
    p99=$(grep -E '^\| B \| 16 \| [0-9]+ \| \*\*' "$f" | awk -F'|' '{gsub(/ /,"",$9); print $9}')
    cpu=$(grep -E '^\| B \| 16 \| 12' "$f" | awk -F'|' '{gsub(/ /,"",$12); gsub(/ /,"",$13); gsub(/ /,"",$15); print $12 " | " $13 " | " $15}')
    echo "| $b | $i | $rate | $p99 | $cpu |"
  done
done
