#!/usr/bin/env bash
# install-deps.sh [run|test|all]: installs what the project needs and the
# machine lacks, so that `make run` and `make test` work on a fresh Debian or
# Ubuntu machine that has only Go. Each mode installs only what it needs:
#   run   PostgreSQL's server binaries (initdb, postgres), from Debian's
#         packages; the Go modules come with `go build` (make run), which
#         downloads only those bin/payments needs;
#   test  those, Debian's chromium (the console's browser tests drive it)
#         and every Go module of go.mod (the tests' too);
#   all   the same as test (the default); `make deps` runs it, then installs
#         sqlc (pinned by the Makefile's SQLC_VERSION) into TOOLS_DIR, for
#         make check and make generate.
# It prints a line per step, saying what it found or what it installs, and
# a line every 15 s while a step takes long (scripts/with-progress.sh). It
# changes nothing when everything is already there.
set -euo pipefail

log() { printf 'install-deps: %s\n' "$*" >&2; }
progress() { "$(dirname "$0")/with-progress.sh" install-deps "$@"; }

mode=${1:-all}
case "$mode" in
  run|test|all) ;;
  *) log "unknown mode $mode: give run, test or all"; exit 2 ;;
esac

have_pg_server() {
  if [ -n "${PAYMENTS_PG_BINDIR:-}" ]; then
    [ -x "$PAYMENTS_PG_BINDIR/postgres" ] && [ -x "$PAYMENTS_PG_BINDIR/initdb" ]
    return
  fi
  if command -v postgres >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1; then
    return 0
  fi
  compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null
}

install_pg_server() {
  if [ "$(id -u)" -ne 0 ]; then
    log "PostgreSQL's server binaries are missing; install them with: sudo apt-get install postgresql"
    exit 1
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    log "PostgreSQL's server binaries are missing and this is not a Debian-like system; install PostgreSQL 13 or newer"
    exit 1
  fi
  # The project runs its own clusters; the package's default cluster would
  # only be a second server nobody uses. Keep an existing setting if any.
  if [ ! -e /etc/postgresql-common/createcluster.conf ]; then
    mkdir -p /etc/postgresql-common
    echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf
  fi
  export DEBIAN_FRONTEND=noninteractive
  log "PostgreSQL's server binaries are missing; installing them (apt-get update; apt-get install postgresql)"
  progress "apt-get update" apt-get update -qq
  progress "apt-get install postgresql" apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-confold postgresql >/dev/null
}

# pg_found says where PostgreSQL's server binaries are.
pg_found() {
  if [ -n "${PAYMENTS_PG_BINDIR:-}" ]; then
    echo "$PAYMENTS_PG_BINDIR"
  elif command -v postgres >/dev/null 2>&1; then
    dirname "$(command -v postgres)"
  else
    compgen -G '/usr/lib/postgresql/*/bin/postgres' | head -n1 | xargs dirname
  fi
}

if ! command -v go >/dev/null 2>&1; then
  log "Go is missing: install Go (see go.mod for the version) and run this again"
  exit 1
fi
log "Go: $(go env GOVERSION) ($(command -v go))"
if have_pg_server; then
  log "PostgreSQL's server binaries: found in $(pg_found)"
else
  install_pg_server
  log "PostgreSQL's server binaries: installed in $(pg_found)"
fi
# PostgreSQL refuses to run as root; as root the project runs it as "postgres".
if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
  log "creating the postgres OS user (PostgreSQL refuses to run as root)"
  useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash postgres
fi
if [ "$mode" = run ]; then
  exit 0
fi
# The console's browser tests (internal/console) drive Debian's chromium
# through chromedp; in CI (CI=true) they fail without it.
if command -v chromium >/dev/null 2>&1; then
  log "chromium (for the console's browser tests): found at $(command -v chromium)"
elif [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  log "chromium (for the console's browser tests) is missing; installing it (apt-get update; apt-get install chromium)"
  progress "apt-get update" apt-get update -qq
  progress "apt-get install chromium" apt-get install -y -qq chromium >/dev/null
else
  log "chromium is missing: the console's browser tests need it (sudo apt-get install chromium)"
fi
log "Go modules: go mod download (every module of go.mod, the tests' too, into $(go env GOMODCACHE))"
progress "Go modules" go mod download
