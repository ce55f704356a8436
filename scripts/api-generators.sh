#!/usr/bin/env bash
# Generates Go clients from the OpenAPI document (internal/api/openapi.json,
# the very bytes GET /openapi.json serves) with two strict generators, and
# fails unless both clients build and are fully typed: `make lint-api`, and CI.
#
#   1. ogen generates its client (and server) code; it must generate, with
#      no schema left untyped, and the code must build;
#   2. oapi-codegen generates types and a client; the code must build, and
#      hold no `interface{}` or `any`: every field the document describes
#      gets a Go type of its own.
#
# The generators are pinned in scripts/apigen/go.mod as `go tool` tools, with
# the packages their code imports (go.sum checks them all): the Go module
# proxy installs them once per machine, into Go's own caches, outside the
# clone. The code is generated into a temporary module, removed afterwards.
#
# Environment: API_DOCUMENT, another document to check instead (a path).
set -euo pipefail
API_DOCUMENT=${API_DOCUMENT:+$(realpath "$API_DOCUMENT")}
cd "$(dirname "$0")/.."

DOCUMENT=$(realpath "${API_DOCUMENT:-internal/api/openapi.json}")
TOOLS_MODULE="$PWD/scripts/apigen"

log() { printf 'api-generators: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

command -v go >/dev/null 2>&1 || die "go is missing"

tmp=$(mktemp -d /tmp/payments-api-generators.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# The generated packages build in a copy of the tools' module, so that they
# get exactly the runtime packages pinned beside the generators.
cp "$TOOLS_MODULE/go.mod" "$TOOLS_MODULE/go.sum" "$tmp/"

gen() { (cd "$TOOLS_MODULE" && go tool "$@"); }

log "ogen $(gen ogen -version 2>&1 | awk '{print $3}'): generating"
# ogen logs every choice it makes at INFO and WARN; only its failure matters.
if ! gen ogen -clean -package ogenclient -target "$tmp/ogenclient" "$DOCUMENT" >"$tmp/ogen.log" 2>&1; then
  grep -v -e '^INFO' -e '^WARN' "$tmp/ogen.log" >&2 || true
  die "ogen could not generate a client from $DOCUMENT (above)"
fi
# ogen falls back to an untyped value (jx.Raw) for a schema without a type,
# and says so.
if grep 'Type is not defined, using any' "$tmp/ogen.log" >&2; then
  die "ogen gives untyped values (above): give each schema a type"
fi

log "oapi-codegen $(gen oapi-codegen -version 2>&1 | tail -n 1): generating"
mkdir -p "$tmp/oapiclient"
if ! gen oapi-codegen -generate types,client -package oapiclient \
    -o "$tmp/oapiclient/client.go" "$DOCUMENT" 2>"$tmp/oapi.log"; then
  cat "$tmp/oapi.log" >&2
  die "oapi-codegen could not generate a client from $DOCUMENT (above)"
fi

log "building both clients"
# -trimpath: the temporary directory's name stays out of the build, so Go's
# build cache serves an unchanged client (and, from the second run on, the
# runtime packages) without compiling them again.
(cd "$tmp" && go build -trimpath ./ogenclient ./oapiclient) || die "a generated client does not build (above)"

# Untyped Go in oapi-codegen's output: interface{} or any as a type. Left
# out: comments (they quote the document's prose), and the one method
# oapi-codegen gives every union with a discriminator,
# ValueByDiscriminator() (interface{}, error), which returns whichever typed
# variant the discriminator names (the typed AsPayment, AsRefund... beside it
# are what a caller uses); it is no field of the document.
untyped=$(grep -nE 'interface\{\}|(^|[^[:alnum:]_."])any([^[:alnum:]_"]|$)' "$tmp/oapiclient/client.go" |
  grep -vE '^[0-9]+:[[:space:]]*//' |
  grep -vE '^[0-9]+:func \(t [A-Za-z_]+\) ValueByDiscriminator\(\) \(interface\{\}, error\) \{$' || true)
if [ -n "$untyped" ]; then
  printf '%s\n' "$untyped" >&2
  die "oapi-codegen gives $(printf '%s\n' "$untyped" | wc -l) untyped Go values (above): give each a schema with a type"
fi
log "$DOCUMENT: ogen and oapi-codegen generate clients that build; no interface{} or any in oapi-codegen's"
