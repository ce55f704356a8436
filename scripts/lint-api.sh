#!/usr/bin/env bash
# Lints the OpenAPI document (internal/api/openapi.json, served at
# GET /openapi.json) with Redocly CLI, an established OpenAPI linter, under
# the rules of redocly.yaml: `make lint-api`, and CI. Exits non-zero on any
# error or warning.
#
#   1. installs @redocly/cli (pinned) with npm into a cache outside the clone,
#      once, as scripts/demo.sh installs httpyac;
#   2. runs `redocly lint` on the document.
#
# Environment: REDOCLY_VERSION (default below), TOOLS_DIR (the Makefile's
# cache of tools).
set -euo pipefail
cd "$(dirname "$0")/.."

REDOCLY_VERSION="${REDOCLY_VERSION:-2.77.0}"
TOOLS_DIR="${TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/payments-tools}"
REDOCLY_DIR="$TOOLS_DIR/redocly-$REDOCLY_VERSION"
REDOCLY="$REDOCLY_DIR/node_modules/.bin/redocly"
DOCUMENT=internal/api/openapi.json

log() { printf 'lint-api: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

command -v node >/dev/null 2>&1 || die "node is missing: install Node.js 20.19 or newer (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null 2>&1 || die "npm is missing: install it (Debian: apt-get install npm)"

# Redocly asks to send anonymous usage data; CI and a fresh machine say no.
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true

redocly_ok() { [ -x "$REDOCLY" ] && [ "$("$REDOCLY" --version 2>/dev/null | tail -n 1)" = "$REDOCLY_VERSION" ]; }
if ! redocly_ok; then
  log "installing @redocly/cli $REDOCLY_VERSION into $REDOCLY_DIR"
  mkdir -p "$TOOLS_DIR"
  staging=$(mktemp -d "$TOOLS_DIR/.redocly-$REDOCLY_VERSION.XXXXXX")
  # Installed aside, then moved into place: an interrupted install is never
  # mistaken for a finished one.
  if ! npm install --prefix "$staging" --no-save --no-package-lock --no-audit --no-fund \
      --loglevel=error "@redocly/cli@$REDOCLY_VERSION" >&2; then
    rm -rf "$staging"
    die "npm could not install @redocly/cli@$REDOCLY_VERSION"
  fi
  rm -rf "$REDOCLY_DIR"
  mv "$staging" "$REDOCLY_DIR"
  redocly_ok || die "@redocly/cli $REDOCLY_VERSION did not install as expected in $REDOCLY_DIR"
fi

log "redocly $REDOCLY_VERSION: lint $DOCUMENT"
set +e
# (The grep drops Redocly's boxed notices, about Node.js versions and the like.)
"$REDOCLY" lint --config redocly.yaml --format stylish --max-problems 1000 "$DOCUMENT" 2>&1 |
  grep -v -e '║' -e '╔' -e '╚'
lint_status=${PIPESTATUS[0]}
set -e
[ "$lint_status" -eq 0 ] || die "$DOCUMENT has lint problems (above)"
log "$DOCUMENT: no problems"
