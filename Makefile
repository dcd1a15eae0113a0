SHELL := /bin/bash
# coastguard — multi-cluster NetworkPolicy for Submariner cluster sets.
#
#   make demo     3 local clusters on real kube-apiservers, coastguardd in each
#   make test     golangci-lint, unit tests (-race) + the real multi-cluster e2e suite
#   make bench    every performance goal, as a table (bench/results.json)

GO          ?= go
# Version stamped into coastguardd (coastguardd version, coastguard_build_info,
# gossip metadata).
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION    ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS     ?= -X github.com/coastguard-mcnp/coastguard/internal/version.Version=$(VERSION) -X github.com/coastguard-mcnp/coastguard/internal/version.Revision=$(REVISION)
# Pinned CLI tools live in their own module (tools/go.mod), so their
# dependencies (helm's client-go, golangci-lint's) never move coastguard's.
TOOL        ?= $(GO) tool -modfile=$(CURDIR)/tools/go.mod
TESTBIN_DIR ?= $(CURDIR)/.cache/bin
BIN         ?= $(CURDIR)/bin
export TESTBIN_DIR

.PHONY: release-snapshot release-check nemesis all build test unit e2e vet testbins generate verify-generate demo demo-down bench bench-quick fuzz clean helm-check lint

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/coastguardd ./cmd/coastguardd

## test: the README's test command; .ci/run calls exactly this. The fast
## checks (generated files, vet, lint, helm) run before the slow tests.
test: verify-generate vet lint helm-check unit e2e

## helm-check: helm lint (strict) and helm template of charts/coastguard, with
## the default values, with every optional feature on, and with bad values
## that must fail to render (hack/helm-check.sh). The e2e test TestPackaging
## compares the output with the kustomize install.
# helm built with `go tool` carries no -ldflags, so its default Kubernetes
# version is v1.20; name the one we test against.
HELM_KUBE_VERSION ?= 1.33.0
helm-check:
	HELM_KUBE_VERSION=$(HELM_KUBE_VERSION) hack/helm-check.sh

## lint: golangci-lint, pinned in tools/go.mod (.golangci.yml; build tag e2e
## included). It must report 0 issues. The first run builds golangci-lint
## (a few minutes); later runs reuse Go's build cache and its own.
lint:
	$(TOOL) golangci-lint run ./...

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
	  if [ $$rc -ne 0 ]; then echo "---- e2e failed: last 400 lines of .cache/e2e.log (test output and daemon logs) ----"; tail -n 400 .cache/e2e.log; \
	    echo "---- e2e failed: what the tests said (hack/e2e-failures.sh .cache/e2e.log) ----"; hack/e2e-failures.sh .cache/e2e.log; fi; exit $$rc

## nemesis: random faults (partitions, kill -9, store loss, leader loss,
## apiserver restarts) over 3 clusters x 2 daemons on the packet dataplane
## while a workload runs, then a checker (leaks, lost updates, final packets).
## DURATION=10m and SEED= (default: a new one; every run prints its seed)
## pick the run. make test runs a 2-minute one with a fixed seed.
DURATION ?= 10m
SEED     ?= random
## OLD_REV=<commit> adds rolling upgrades between coastguardd built at that
## commit and the current one.
OLD_REV  ?=
## FAULTS=upgrade,kill (partition, lossy, kill, disk, clock, upgrade,
## apiserver) injects only those kinds, as often as all of them together.
FAULTS   ?=
## KEEP_LOGS=1 keeps every process log, /debug/state and /metrics in
## .cache/nemesis-logs-<seed>/ for a passing run too (a failed run always).
KEEP_LOGS ?=
nemesis: testbins
	COASTGUARD_NEMESIS_DURATION=$(DURATION) COASTGUARD_NEMESIS_SEED=$(SEED) COASTGUARD_NEMESIS_OLD_REV=$(OLD_REV) \
	  COASTGUARD_NEMESIS_FAULTS=$(FAULTS) COASTGUARD_NEMESIS_KEEP_LOGS=$(KEEP_LOGS) \
	  $(GO) test -tags e2e -count=1 -timeout 120m -v -run '^TestNemesis$$' ./test/e2e/ 2>&1 | tee .cache/nemesis.log \
	  | grep --line-buffered -E '^(=== RUN|--- |PASS|FAIL|ok)|nemesis'; exit $${PIPESTATUS[0]}

testbins:
	@mkdir -p .cache
	hack/build-testbins.sh $(TESTBIN_DIR)

generate:
	hack/generate.sh

## verify-generate: fails when generated deepcopy/CRD files are stale.
verify-generate: generate
	git diff --exit-code -- api deploy/crds charts/coastguard/crds

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

## release-snapshot: every release artifact into $(DIST), nothing published
## (docs/RELEASE.md): coastguardd and kubectl-coastguard for
## $(RELEASE_TARGETS), plugin archives, CycloneDX SBOMs, the filled krew
## manifest and checksums.txt. .github/workflows/release.yaml runs this on a
## tag, then signs (cosign keyless) and publishes.
DIST            ?= $(CURDIR)/dist
RELEASE_TARGETS ?= linux/amd64,linux/arm64,darwin/amd64,darwin/arm64
release-snapshot:
	rm -rf $(DIST) && mkdir -p $(DIST)
	$(GO) run ./hack/release -out $(DIST) -version $(VERSION) -targets $(RELEASE_TARGETS) -ldflags "$(LDFLAGS)" $(RELEASE_FLAGS)
	@# SBOMs from the built binaries' embedded module list (go version -m);
	@# the module set is the same on every target.
	$(TOOL) cyclonedx-gomod bin -json -version $(VERSION) -output $(DIST)/coastguardd.sbom.cdx.json $(DIST)/coastguardd_linux_amd64
	@tar -xzf $(DIST)/kubectl-coastguard_linux_amd64.tar.gz -C $(DIST) kubectl-coastguard
	$(TOOL) cyclonedx-gomod bin -json -version $(VERSION) -output $(DIST)/kubectl-coastguard.sbom.cdx.json $(DIST)/kubectl-coastguard
	@rm -f $(DIST)/kubectl-coastguard
	cd $(DIST) && sha256sum $$(ls | grep -v '^checksums.txt$$') > checksums.txt && sha256sum -c --quiet checksums.txt && ls -l

## release-check: release-snapshot for linux/amd64 only (archives, SBOMs,
## checksums; the krew manifest checked, not written): what .ci/run runs so
## the pipeline never rots without paying for four cross-builds.
release-check:
	$(MAKE) release-snapshot RELEASE_TARGETS=linux/amd64 RELEASE_FLAGS=-partial DIST=$(CURDIR)/.cache/dist-check
