#!/usr/bin/env bash
# Runs api.http end to end, every request and every check in it, with httpyac
# against a fresh `payments dev`, so the walkthrough cannot rot: `make demo`,
# and CI after `make test`. Exits non-zero if any check fails.
#
#   1. installs httpyac (pinned) with npm into a cache outside the clone, once;
#   2. builds bin/payments;
#   3. starts `bin/payments dev` on a new temporary data dir, the API and its
#      embedded Stripe simulator on free loopback ports;
#   4. runs `httpyac send --all --bail` on api.http, pointed at those ports;
#   5. stops dev and removes the data dir, whatever happened.
#
# Environment: HTTPYAC_VERSION (default below), TOOLS_DIR (the Makefile's
# cache of tools), DEMO_TIMEOUT (seconds for the whole httpyac run).
set -euo pipefail
cd "$(dirname "$0")/.."

HTTPYAC_VERSION="${HTTPYAC_VERSION:-6.16.7}"
TOOLS_DIR="${TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/payments-tools}"
HTTPYAC_DIR="$TOOLS_DIR/httpyac-$HTTPYAC_VERSION"
HTTPYAC="$HTTPYAC_DIR/node_modules/.bin/httpyac"
DEMO_TIMEOUT="${DEMO_TIMEOUT:-300}"

log() { printf 'demo: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# --- httpyac ----------------------------------------------------------------
command -v node >/dev/null 2>&1 || die "node is missing: install Node.js 18 or newer (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null 2>&1 || die "npm is missing: install it (Debian: apt-get install npm)"
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 18 ] || die "httpyac $HTTPYAC_VERSION needs Node.js 18 or newer; this is $(node --version)"

httpyac_ok() { [ -x "$HTTPYAC" ] && [ "$("$HTTPYAC" --version 2>/dev/null)" = "$HTTPYAC_VERSION" ]; }
if ! httpyac_ok; then
  log "installing httpyac $HTTPYAC_VERSION into $HTTPYAC_DIR"
  mkdir -p "$TOOLS_DIR"
  staging=$(mktemp -d "$TOOLS_DIR/.httpyac-$HTTPYAC_VERSION.XXXXXX")
  # Installed aside, then moved into place: an interrupted install is never
  # mistaken for a finished one.
  if ! npm install --prefix "$staging" --no-save --no-package-lock --no-audit --no-fund \
      --loglevel=error "httpyac@$HTTPYAC_VERSION" >&2; then
    rm -rf "$staging"
    die "npm could not install httpyac@$HTTPYAC_VERSION"
  fi
  rm -rf "$HTTPYAC_DIR"
  mv "$staging" "$HTTPYAC_DIR"
  httpyac_ok || die "httpyac $HTTPYAC_VERSION did not install as expected in $HTTPYAC_DIR"
fi

# --- the service ------------------------------------------------------------
log "building bin/payments"
go build -o bin/payments ./cmd/payments

tmp=$(mktemp -d /tmp/payments-demo.XXXXXX)
# As root, `payments dev` runs PostgreSQL as the postgres user, which must
# reach the data dir: mktemp's 0700 would keep it out.
chmod 755 "$tmp"
dev_pid=""
cleanup() {
  local status=$?
  if [ -n "$dev_pid" ] && kill -0 "$dev_pid" 2>/dev/null; then
    kill -TERM "$dev_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$dev_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$dev_pid" 2>/dev/null || true
    wait "$dev_pid" 2>/dev/null || true
  fi
  # PostgreSQL follows dev out (it is told when its parent dies); let it
  # finish before its files are removed.
  for _ in $(seq 1 100); do [ -e "$tmp/data/postgres/postmaster.pid" ] || break; sleep 0.1; done
  if [ "$status" -ne 0 ] && [ -s "$tmp/dev.log" ]; then
    log "the last lines of payments dev's log:"
    tail -n 30 "$tmp/dev.log" >&2 || true
  fi
  rm -rf "$tmp"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Three free loopback ports, found together so that they differ.
read -r api_port sim_port metrics_port < <(node -e '
  const net = require("net");
  const a = net.createServer(), b = net.createServer(), c = net.createServer();
  a.listen(0, "127.0.0.1", () => b.listen(0, "127.0.0.1", () => c.listen(0, "127.0.0.1", () => {
    console.log(a.address().port, b.address().port, c.address().port);
    a.close(); b.close(); c.close();
  })));') || die "could not find three free loopback ports"
base_url="http://127.0.0.1:$api_port"
sim_url="http://127.0.0.1:$sim_port"
metrics_url="http://127.0.0.1:$metrics_port"

log "starting payments dev: API $base_url, Stripe simulator $sim_url, data in $tmp/data"
# dev's own cluster and embedded simulator, whatever this shell's environment
# says: unset what would point it elsewhere.
env -u DATABASE_URL -u STRIPE_API_BASE -u STRIPE_SECRET_KEY -u STRIPE_WEBHOOK_SECRET \
    -u PAYMENTS_FAILPOINTS -u PAYMENTS_DATA_DIR -u PAYMENTS_METRICS_ADDR \
  ./bin/payments dev --data-dir "$tmp/data" --addr "127.0.0.1:$api_port" \
    --stripesim-addr "127.0.0.1:$sim_port" --metrics-addr "127.0.0.1:$metrics_port" >"$tmp/dev.log" 2>&1 &
dev_pid=$!

started=$SECONDS
until node -e 'fetch(process.argv[1]).then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))' \
    "$base_url/healthz" 2>/dev/null; do
  kill -0 "$dev_pid" 2>/dev/null || die "payments dev exited before answering /healthz"
  [ $((SECONDS - started)) -lt 120 ] || die "payments dev did not answer /healthz within 120 s"
  sleep 0.5
done
log "payments dev is up after $((SECONDS - started)) s"

# --- the walkthrough --------------------------------------------------------
# httpyac lets a variable defined in the file win over --var, so the copy it
# runs differs from api.http in the three lines that say where the service is.
for var in baseUrl simUrl metricsUrl; do
  [ "$(grep -c "^@$var = " api.http)" -eq 1 ] || die "api.http must define @$var once, as '@$var = ...'"
done
sed -e "s|^@baseUrl = .*|@baseUrl = $base_url|" -e "s|^@simUrl = .*|@simUrl = $sim_url|" \
  -e "s|^@metricsUrl = .*|@metricsUrl = $metrics_url|" \
  api.http >"$tmp/api.http"

log "httpyac $HTTPYAC_VERSION: send api.http --all --bail"
started=$SECONDS
set +e
# (httpyac only takes files under its working directory.)
(cd "$tmp" && exec timeout "$DEMO_TIMEOUT" "$HTTPYAC" send api.http --all --bail --no-color \
  --output short --output-failed exchange --timeout 30000) 2>&1 | tee "$tmp/httpyac.log"
httpyac_status=${PIPESTATUS[0]}
set -e
elapsed=$((SECONDS - started))

# httpyac closes with "55 requests processed (54 succeeded, 1 failed, ...)".
summary=$(grep -E '^[0-9]+ requests processed' "$tmp/httpyac.log" | tail -n 1 || true)
count() { sed -nE "s/.*[(, ]([0-9]+) $1.*/\1/p" <<<"$summary" | head -n 1; }
total=$(sed -nE 's/^([0-9]+) requests processed.*/\1/p' <<<"$summary")
succeeded=$(count succeeded); failed=$(count failed); errored=$(count errored); skipped=$(count skipped)
checks_ok=$(grep -c '^✓' "$tmp/httpyac.log" || true)
checks_bad=$(grep -c '^✖' "$tmp/httpyac.log" || true)
total=${total:-0}; succeeded=${succeeded:-0}; failed=$(( ${failed:-0} + ${errored:-0} )); skipped=${skipped:-0}

log "api.http: $total requests, $checks_ok checks passed, $checks_bad failed, in $elapsed s (httpyac exit $httpyac_status)"
echo "demo: $succeeded passed, $failed failed, $skipped skipped"
if [ "$httpyac_status" -eq 124 ]; then
  die "httpyac did not finish within $DEMO_TIMEOUT s"
fi
if [ "$httpyac_status" -ne 0 ] || [ "$failed" -ne 0 ] || [ "$skipped" -ne 0 ] || [ "$total" -eq 0 ]; then
  die "the api.http walkthrough failed"
fi
