#!/usr/bin/env bash
# Runs the benchmarks and writes their figures to docs/BENCHMARKS.md, with
# the command that produced them. Machines here are shared and noisy: read
# ratios against a baseline measured in the same run where one exists.
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/BENCHMARKS.md
cmd=(go test -run '^$' -bench . -benchmem -count 5 ./internal/dbtest/)
mkdir -p docs
raw=$("${cmd[@]}")
echo "$raw"
{
  echo "# Benchmarks"
  echo
  echo "Written by \`make bench\` ($(date -u +%Y-%m-%d), $(nproc) cores, $(go version | cut -d' ' -f3))."
  echo "Command:"
  echo
  echo '```'
  echo "${cmd[*]}"
  echo '```'
  echo
  echo "## A fresh test database"
  echo
  echo "Every test that touches SQL gets its own database cloned from a migrated template"
  echo "(\`CREATE DATABASE ... TEMPLATE ... STRATEGY = FILE_COPY\`). What one clone costs:"
  echo
  echo '```'
  echo "$raw" | grep -E '^(Benchmark|goos|goarch|cpu)'
  echo '```'
} > "$out"
echo "wrote $out" >&2
