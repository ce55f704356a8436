# The set-up is two commands, and each installs what is missing first:
#   make run    build and start `payments dev` (PostgreSQL, API, demo users)
#   make test   the whole test suite, against real PostgreSQL clusters
.DEFAULT_GOAL := help
SHELL := bash
GO    ?= go

# Tools are built once per machine, outside the clone, pinned by version.
TOOLS_DIR    ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/payments-tools
SQLC_VERSION := v1.30.0
SQLC         := $(TOOLS_DIR)/sqlc-$(SQLC_VERSION)/sqlc

.PHONY: help deps build run test check generate bench bench-scale bench-reconcile

help:
	@echo "The set-up (each installs what is missing first):"
	@echo "  make run          build and start payments dev on http://127.0.0.1:8080"
	@echo "  make test         every test, with -race (installs PostgreSQL's server first if missing); about 10 minutes on 2 cores"
	@echo "Also:"
	@echo "  make deps         install what the others need (Go modules; PostgreSQL's server binaries; sqlc, pinned, into TOOLS_DIR)"
	@echo "  make build        build bin/payments"
	@echo "  make check        gofmt, go vet, generated code up to date, no links outside the repository"
	@echo "  make generate     regenerate internal/db/dbsqlc from the queries (sqlc, installed once into TOOLS_DIR)"
	@echo "  make fuzz         each fuzz target for FUZZTIME (default 10s)"
	@echo "  make chaos        the chaos suite against the real binary for CHAOS_DURATION (default 60s)"
	@echo "  make demo         every request of api.http, end to end, against a fresh payments dev (needs Node.js and the npm registry)"
	@echo "  make lint-api     lint the OpenAPI document (Redocly CLI, Spectral) and generate Go clients from it (ogen, oapi-codegen) (needs Node.js and the npm registry)"
	@echo "  make bench        run the benchmarks and write docs/BENCHMARKS.md"
	@echo "  make bench-scale  B, C, E at 0 to 10M live keys, start-up, churn: docs/BENCHMARKS-scale.md (~25 min)"
	@echo "  make bench-reconcile  the reconciler over a month of Stripe's events: docs/BENCHMARKS-reconcile.md (BENCH_RECONCILE_QUICK=1: a minute)"

# sqlc too, pinned (SQLC_VERSION), once per machine: make check and
# make generate need it, and a fresh clone's set-up is make deps.
deps:
	@./scripts/install-deps.sh
	@$(MAKE) -s --no-print-directory $(SQLC)

build: deps
	$(GO) build -o bin/payments ./cmd/payments

run: build
	./bin/payments dev

# go test -json through scripts/testprogress: a line per package as it
# finishes, with its time, the whole output of a failing package, the
# packages still running every minute. pipefail: a failing go test fails
# make test even if the printer did not see why.
test: deps
	@echo "make test: every package with -race, against real PostgreSQL clusters: about 10 minutes on 2 cores (cmd/payments, the slowest, takes about 6)"
	@set -o pipefail; $(GO) test -race -count=1 -json ./... 2>&1 | $(GO) run ./scripts/testprogress

check: deps $(SQLC)
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags chaos ./cmd/payments/
	$(SQLC) diff
	@# The repository stands alone: no tracked file may point at a checkout's
	@# sibling folders (cite docs/API.md and docs/architecture.md instead).
	@if git grep -nE '[.][.]/shared|/work[/]shared' -- .; then echo "make check: the lines above point outside the repository"; exit 1; fi

generate: $(SQLC)
	$(SQLC) generate

bench: deps
	./scripts/bench.sh

# How the cost grows with the key store (issue 19): scripts/bench-scale.sh
# says what it runs; it writes docs/BENCHMARKS-scale.md and docs/churn.svg.
bench-scale: deps
	./scripts/bench-scale.sh

# The reconciler's cost against Stripe's events (issue 38): scripts/bench-reconcile.sh
bench-reconcile: deps
	./scripts/bench-reconcile.sh

$(SQLC):
	@echo "installing sqlc $(SQLC_VERSION) into $(dir $(SQLC)) (once)"
	GOBIN=$(dir $(SQLC)) $(GO) install github.com/sqlc-dev/sqlc/cmd/sqlc@$(SQLC_VERSION)

# Each fuzz target for FUZZTIME (CI: a short run; locally: as long as you like);
# scripts/fuzz.sh says how it tells a finding from Go 1.26's deadline race.
FUZZTIME ?= 10s
FUZZ_TARGETS := \
	./internal/api:FuzzParseIdempotencyKey \
	./internal/api:FuzzDecodeCreatePayment \
	./internal/api:FuzzHandler \
	./internal/recovery:FuzzCanonicalJSON \
	./internal/webhooks:FuzzVerify \
	./internal/webhooks:FuzzUnprocessable \
	./client/webhook:FuzzVerify

.PHONY: fuzz
fuzz: deps
	GO='$(GO)' ./scripts/fuzz.sh $(FUZZTIME) $(FUZZ_TARGETS)

# The OpenAPI document (internal/api/openapi.json, served at GET /openapi.json)
# through Redocly CLI's linter and Spectral's (installed once, pinned, into
# TOOLS_DIR), under redocly.yaml's and .spectral.yaml's rules, then through
# two strict Go client generators, ogen and oapi-codegen (pinned in
# scripts/apigen/go.mod): both clients must build, oapi-codegen's without
# interface{} (scripts/api-generators.sh). The tests hold the service to the
# document; this holds the document to the usual rules of OpenAPI documents
# and to what generators need of it.
.PHONY: lint-api
lint-api:
	TOOLS_DIR='$(TOOLS_DIR)' ./scripts/lint-api.sh

# api.http, every request and check, run end to end by httpyac (installed
# once, pinned, into TOOLS_DIR) against a fresh `payments dev` on free ports.
.PHONY: demo
demo: deps
	TOOLS_DIR='$(TOOLS_DIR)' ./scripts/demo.sh

# The chaos suite (cmd/payments/chaostest, run by cmd/payments/chaos_test.go): the real binary under faults, crashes and
# retrying clients, then the invariant checker; non-zero exit on any violation.
# make chaos CHAOS_DURATION=600s for a long run; all CHAOS_* settings: cmd/payments/chaos_test.go
CHAOS_DURATION ?= 60s
CHAOS_TIMEOUT  ?= 60m
.PHONY: chaos
chaos: deps
	CHAOS_DURATION=$(CHAOS_DURATION) $(GO) test -tags chaos -run '^TestChaos$$' -count=1 -v -timeout $(CHAOS_TIMEOUT) ./cmd/payments/
