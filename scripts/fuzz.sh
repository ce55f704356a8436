#!/usr/bin/env bash
# Runs each fuzz target (make fuzz): scripts/fuzz.sh FUZZTIME PKG:FUNC...
#
# A target fails when it finds an input that fails: go test writes it to the
# package's testdata/fuzz/FUNC/ and exits non-zero. Go 1.26's fuzzing
# coordinator can also exit non-zero with a bare "context deadline exceeded"
# at the end of -fuzztime when a worker is slow to stop (a loaded machine):
# go.dev/issue/75804, fixed in Go 1.27. That run found nothing and wrote
# nothing, so it is run once more, and said so; a second failure, or any
# failure that wrote an input, fails the target.
set -uo pipefail
fuzztime=$1
shift
go=${GO:-go}

corpus_files() { find "$1/testdata/fuzz/$2" -type f 2>/dev/null | sort; }

run() { # pkg fn: go test's status, its output in $out
  out=$("$go" test -run '^$' -fuzz "^$2\$" -fuzztime "$fuzztime" "$1" 2>&1)
  local status=$?
  printf '%s\n' "$out"
  return $status
}

for target in "$@"; do
  pkg=${target%%:*}
  fn=${target##*:}
  echo "fuzz $pkg $fn ($fuzztime)"
  before=$(corpus_files "$pkg" "$fn")
  if run "$pkg" "$fn"; then
    continue
  fi
  after=$(corpus_files "$pkg" "$fn")
  if [[ $before == "$after" ]] && grep -q 'context deadline exceeded' <<<"$out" && ! grep -q 'Failing input written' <<<"$out"; then
    echo "fuzz $pkg $fn: the run ended with Go's fuzztime deadline race (go.dev/issue/75804) and wrote no input; once more"
    run "$pkg" "$fn" && continue
  fi
  echo "fuzz $pkg $fn: FAILED" >&2
  exit 1
done
