#!/usr/bin/env bash
# with-progress.sh PREFIX WHAT CMD...: runs CMD, says "PREFIX: WHAT" as it
# starts, "PREFIX: WHAT: still at it (N s)" every PROGRESS_EVERY seconds
# (default 15) while it runs, and "PREFIX: WHAT: done in N s" (or failed)
# when it ends, so that a long step (a first build, an apt-get install) is
# never minutes of silence. Exits with CMD's status.
set -uo pipefail
prefix=$1 what=$2
shift 2
every=${PROGRESS_EVERY:-15}
start=$SECONDS
printf '%s: %s\n' "$prefix" "$what" >&2
(
  while sleep "$every"; do
    printf '%s: %s: still at it (%d s)\n' "$prefix" "$what" $((SECONDS - start)) >&2
  done
) &
ticker=$!
"$@"
rc=$?
kill "$ticker" 2>/dev/null
wait "$ticker" 2>/dev/null
if [ "$rc" -eq 0 ]; then
  printf '%s: %s: done in %d s\n' "$prefix" "$what" $((SECONDS - start)) >&2
else
  printf '%s: %s: FAILED (exit %d) after %d s\n' "$prefix" "$what" "$rc" $((SECONDS - start)) >&2
fi
exit "$rc"
