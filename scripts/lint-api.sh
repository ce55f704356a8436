#!/usr/bin/env bash
# Lints the OpenAPI document (internal/api/openapi.json, served at
# GET /openapi.json) as the tools a team would point at it do: `make lint-api`,
# and CI. Exits non-zero on any error or warning of any of them.
#
#   1. installs @redocly/cli and @stoplight/spectral-cli (pinned) with npm
#      into a cache outside the clone, once each, as scripts/demo.sh installs
#      httpyac;
#   2. runs `redocly lint` on the document, under redocly.yaml's rules;
#   3. runs `spectral lint` on it, under .spectral.yaml's (Spectral's `oas`
#      ruleset), failing on warnings too;
#   4. runs scripts/api-generators.sh: ogen and oapi-codegen must generate Go
#      clients from it that build, oapi-codegen's without interface{}.
#
# Environment: REDOCLY_VERSION, SPECTRAL_VERSION (defaults below), TOOLS_DIR
# (the Makefile's cache of tools).
set -euo pipefail
cd "$(dirname "$0")/.."

REDOCLY_VERSION="${REDOCLY_VERSION:-2.77.0}"
SPECTRAL_VERSION="${SPECTRAL_VERSION:-6.16.3}"
TOOLS_DIR="${TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/payments-tools}"
REDOCLY="$TOOLS_DIR/redocly-$REDOCLY_VERSION/node_modules/.bin/redocly"
SPECTRAL="$TOOLS_DIR/spectral-$SPECTRAL_VERSION/node_modules/.bin/spectral"
DOCUMENT=internal/api/openapi.json

log() { printf 'lint-api: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

command -v node >/dev/null 2>&1 || die "node is missing: install Node.js 20.19 or newer (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null 2>&1 || die "npm is missing: install it (Debian: apt-get install npm)"

# Redocly asks to send anonymous usage data; CI and a fresh machine say no.
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true

# tool_ok BIN VERSION: BIN is installed and says it is VERSION.
tool_ok() { [ -x "$1" ] && [ "$("$1" --version 2>/dev/null | tail -n 1)" = "$2" ]; }

# npm_tool NAME PACKAGE VERSION BIN: installs PACKAGE@VERSION into
# TOOLS_DIR/NAME-VERSION unless BIN there already says VERSION.
npm_tool() {
  local name=$1 package=$2 version=$3 bin=$4 dir staging
  tool_ok "$bin" "$version" && return
  dir="$TOOLS_DIR/$name-$version"
  log "installing $package $version into $dir"
  mkdir -p "$TOOLS_DIR"
  staging=$(mktemp -d "$TOOLS_DIR/.$name-$version.XXXXXX")
  # Installed aside, then moved into place: an interrupted install is never
  # mistaken for a finished one.
  if ! npm install --prefix "$staging" --no-save --no-package-lock --no-audit --no-fund \
      --loglevel=error "$package@$version" >&2; then
    rm -rf "$staging"
    die "npm could not install $package@$version"
  fi
  rm -rf "$dir"
  mv "$staging" "$dir"
  tool_ok "$bin" "$version" || die "$package $version did not install as expected in $dir"
}
npm_tool redocly @redocly/cli "$REDOCLY_VERSION" "$REDOCLY"
npm_tool spectral @stoplight/spectral-cli "$SPECTRAL_VERSION" "$SPECTRAL"

log "redocly $REDOCLY_VERSION: lint $DOCUMENT"
set +e
# (The grep drops Redocly's boxed notices, about Node.js versions and the like.)
"$REDOCLY" lint --config redocly.yaml --format stylish --max-problems 1000 "$DOCUMENT" 2>&1 |
  grep -v -e '║' -e '╔' -e '╚'
lint_status=${PIPESTATUS[0]}
set -e
[ "$lint_status" -eq 0 ] || die "$DOCUMENT has lint problems (above)"
log "$DOCUMENT: no problems for redocly"

log "spectral $SPECTRAL_VERSION: lint $DOCUMENT"
"$SPECTRAL" lint --ruleset .spectral.yaml --fail-severity warn --display-only-failures "$DOCUMENT" ||
  die "$DOCUMENT has Spectral warnings or errors (above)"

./scripts/api-generators.sh
