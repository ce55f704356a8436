# The set-up is two commands, and each installs what it is missing first
# (only that: make run needs neither chromium nor sqlc):
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
	@echo "  make run          build and start payments dev on PAYMENTS_ADDR (default 127.0.0.1:8080; e.g. PAYMENTS_ADDR=127.0.0.1:9090 make run)"
	@echo "                   (installs PostgreSQL's server first if missing; the Go modules come with the build)"
	@echo "  make test         every test, with -race (installs PostgreSQL's server, chromium and the Go modules first if missing); about 10 minutes on 2 cores"
	@echo "Also:"
	@echo "  make deps         install what all of them need (PostgreSQL's server binaries; chromium; Go modules; sqlc, pinned, into TOOLS_DIR)"
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
	@./scripts/install-deps.sh all
	@$(MAKE) -s --no-print-directory $(SQLC)

build: deps
	$(GO) build -o bin/payments ./cmd/payments

# Only what running needs: PostgreSQL's server binaries, and the modules
# bin/payments needs, which go build downloads. A line per step, and one
# every 15 s while a step takes long (scripts/with-progress.sh).
run:
	@echo "make run: installing what is missing (scripts/install-deps.sh run), building bin/payments, starting payments dev"
	@./scripts/install-deps.sh run
	@echo "make run: building bin/payments (go build: a first build downloads the modules it needs and compiles them, minutes; then a second)"
	@./scripts/with-progress.sh "make run" "building bin/payments" $(GO) build -o bin/payments ./cmd/payments
	@echo "make run: starting bin/payments dev (PostgreSQL in PAYMENTS_DATA_DIR, default .data; the API on PAYMENTS_ADDR, default 127.0.0.1:8080)"
	./bin/payments dev

# go test -json through scripts/testprogress: a line per package as it
# finishes, with its time, the whole output of a failing package, and every
# 20 s what is still running or, before the tests begin, that go test is
# still building. pipefail: a failing go test fails make test even if the
# printer did not see why. It installs what the tests need (no sqlc: that
# is make check's, through make deps).
test:
	@echo "make test: installing what is missing (scripts/install-deps.sh test), then every package with -race, against real PostgreSQL clusters: about 10 minutes on 2 cores (cmd/payments, the slowest, takes about 6)"
	@./scripts/install-deps.sh test
	@./scripts/with-progress.sh "make test" "building the progress printer (scripts/testprogress)" $(GO) build -o bin/testprogress ./scripts/testprogress
	@set -o pipefail; $(GO) test -race -count=1 -json ./... 2>&1 | ./bin/testprogress

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

# A highly available PostgreSQL on this machine (docs/API.md section 11,
# deploy/ha): three etcd members, three PostgreSQL nodes under Patroni
# (synchronous_mode_strict), haproxy in front. make ha installs Patroni,
# etcd and haproxy from Debian's packages if missing (scripts/ha-install.sh),
# starts cmd/hasupervisor in the background, waits for a commit through
# haproxy and prints the DATABASE_URL; make ha-down stops it by its PIDs.
# HA_DIR (data, logs, formation.json) and HA_PORT_BASE (the first port).
HA_DIR       ?= .ha
HA_PORT_BASE ?= 26000
export HA_DIR HA_PORT_BASE
.PHONY: ha ha-down chaos-ha
ha: deps
	@./scripts/ha-install.sh
	$(GO) build -o bin/hasupervisor ./cmd/hasupervisor
	./bin/hasupervisor up

ha-down:
	@if [ -x bin/hasupervisor ]; then ./bin/hasupervisor down; else $(GO) run ./cmd/hasupervisor down; fi

# The chaos suite against make ha's formation (cmd/payments/chaos_ha_test.go):
# kill -9 of the primary's postmaster, of the leader's Patroni, and a paused
# primary (SIGSTOP 30 s), each during load; writes docs/CHAOS-HA.md, whose
# table judges each promise of docs/API.md section 11, and fails on any that
# fails. It starts the formation if none runs, and then stops it again.
CHAOS_HA_TIMEOUT ?= 20m
chaos-ha: deps
	@./scripts/ha-install.sh
	@$(GO) build -o bin/hasupervisor ./cmd/hasupervisor
	@# A formation already running in HA_DIR is used as it is; else one is
	@# started in a directory of /tmp that the postgres user can reach (a
	@# clone in a directory only root may enter, as a CI's temporary one, is
	@# not: Patroni and etcd run as postgres), and removed afterwards.
	@if [ -f '$(HA_DIR)/formation.json' ]; then dir='$(abspath $(HA_DIR))'; running=yes; \
	else dir=$$(mktemp -d /tmp/payments-chaos-ha.XXXXXX) && chmod 755 "$$dir" || exit 1; running=; fi; \
	HA_DIR="$$dir" ./bin/hasupervisor up || exit 1; status=0; \
	HA_FORMATION="$$dir/formation.json" CHAOS_HA_REPORT='$(CURDIR)/docs/CHAOS-HA.md' \
	  $(GO) test -tags chaos -run '^TestChaosHA$$' -count=1 -v -timeout $(CHAOS_HA_TIMEOUT) ./cmd/payments/ || status=$$?; \
	if [ -z "$$running" ]; then HA_DIR="$$dir" ./bin/hasupervisor down; rm -rf "$$dir"; fi; exit $$status
