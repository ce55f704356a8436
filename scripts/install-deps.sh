#!/usr/bin/env bash
# Installs what the project needs and the machine lacks, so that `make run` and
# `make test` work on a fresh Debian or Ubuntu machine that has only Go:
#   - PostgreSQL's server binaries (initdb, postgres), from Debian's packages;
#   - Debian's chromium, which the console's browser tests drive;
#   - the Go modules of go.mod.
# It changes nothing when everything is already there. `make deps` runs it,
# then installs sqlc (pinned by the Makefile's SQLC_VERSION) into TOOLS_DIR,
# for make check and make generate.
set -euo pipefail

log() { printf 'install-deps: %s\n' "$*" >&2; }

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
  log "installing PostgreSQL's server binaries (apt-get install postgresql)"
  # The project runs its own clusters; the package's default cluster would
  # only be a second server nobody uses. Keep an existing setting if any.
  if [ ! -e /etc/postgresql-common/createcluster.conf ]; then
    mkdir -p /etc/postgresql-common
    echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-confold postgresql >/dev/null
}

if ! command -v go >/dev/null 2>&1; then
  log "Go is missing: install Go (see go.mod for the version) and run this again"
  exit 1
fi
have_pg_server || install_pg_server
# PostgreSQL refuses to run as root; as root the project runs it as "postgres".
if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
  log "creating the postgres OS user"
  useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash postgres
fi
# The console's browser tests (internal/console) drive Debian's chromium
# through chromedp; in CI (CI=true) they fail without it.
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing chromium for the console's browser tests (apt-get install chromium)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq chromium >/dev/null
  else
    log "chromium is missing: the console's browser tests need it (sudo apt-get install chromium)"
  fi
fi
go mod download
