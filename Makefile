SHELL := /bin/bash
# coastguard — multi-cluster NetworkPolicy for Submariner cluster sets.
#
#   make demo     3 local clusters on real kube-apiservers, coastguardd in each
#   make test     unit tests (-race) + the real multi-cluster e2e suite
#   make bench    every performance goal, as a table (bench/results.json)

GO          ?= go
TESTBIN_DIR ?= $(CURDIR)/.cache/bin
BIN         ?= $(CURDIR)/bin
export TESTBIN_DIR

.PHONY: all build test unit e2e vet testbins generate verify-generate demo demo-down bench bench-quick fuzz clean

all: build

build:
	$(GO) build -o $(BIN)/coastguardd ./cmd/coastguardd

## test: the README's test command; .ci/run calls exactly this.
test: verify-generate vet unit e2e

vet:
	$(GO) vet ./...
	$(GO) vet -tags e2e ./test/...

unit:
	$(GO) test -race -count=1 -timeout 20m ./...

## e2e: real etcd + kube-apiservers + coastguardd processes (builds test binaries once, cached).
e2e: testbins
	@mkdir -p .cache
	@set -o pipefail; $(GO) test -tags e2e -count=1 -timeout 60m -v ./test/e2e/... 2>&1 | tee .cache/e2e.log \
	  | grep --line-buffered -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|e2e summary'; rc=$${PIPESTATUS[0]}; \
	  if [ $$rc -ne 0 ]; then echo "---- e2e failed: last 400 lines of .cache/e2e.log (test output and daemon logs) ----"; tail -n 400 .cache/e2e.log; fi; exit $$rc

testbins:
	@mkdir -p .cache
	hack/build-testbins.sh $(TESTBIN_DIR)

generate:
	hack/generate.sh

## verify-generate: fails when generated deepcopy/CRD files are stale.
verify-generate: generate
	git diff --exit-code -- api deploy/crds

fuzz:
	hack/fuzz.sh 20s

## bench: every performance goal; writes bench/results.json, bench/results.md and plots.
bench: testbins
	$(GO) run ./cmd/coastguard-bench -out bench

## bench-quick: a ~2-minute subset (CI runs it so the harness never rots; asserts no absolute times).
bench-quick: testbins
	$(GO) run ./cmd/coastguard-bench -out .cache/bench-quick -quick

clean:
	rm -rf $(BIN) .cache/e2e.log

## demo: 3 local clusters with coastguard; leaves them running (make demo-down stops them).
demo: testbins
	$(GO) run ./test/demo up

demo-down:
	$(GO) run ./test/demo down
