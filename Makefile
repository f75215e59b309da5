# Stackflow — see README.md. `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

# Every go command make runs builds without cgo and with -trimpath, as the
# release images' binaries and the substrate's tools are built: the same
# settings let the build, go vet, the test binaries and the images' build
# share one compilation of each package in the Go build cache (a cold make
# test compiled the main module's dependencies once more for the images).
# CGO_ENABLED=1 (e.g. for GO_TEST_FLAGS=-race) is taken from the environment.
export CGO_ENABLED ?= 0
export GOFLAGS := $(strip $(GOFLAGS) -trimpath)

# The go commands that compile (the substrate's builds, make build, go test)
# run with GOGC=$(STACKFLOW_GOGC): the compiler collects garbage less often
# and a cold build takes ~12 % less CPU (the operator binary from an empty
# build cache: 277 CPU-s at GOGC=100, 242 at 400, 251 at GOGC=off with a 3
# GiB limit, 2026-12-03), for ~8 % more peak memory. go test's test processes
# (and the control planes, Pulumi and Argo CD they start) inherit it.
# STACKFLOW_GOGC=100 restores Go's default.
export STACKFLOW_GOGC ?= 400

SUBSTRATE := ./hack/substrate.sh
# PHASE NAME CMD…: runs CMD and prints how long it took.
PHASE := ./hack/phase.sh
CONTROLLER_GEN = $(shell $(SUBSTRATE) dir controller-gen)/controller-gen
CRD_DIR := operator/config/crd/bases
# Tests that start a control plane or Pulumi may take a while on 2 cores,
# the more so on a machine busy with other work: the e2e package, 881 s on a
# quiet machine (2026-12-05), is given room for three times that.
TEST_TIMEOUT ?= 60m
GO_TEST_FLAGS ?=
# go test runs TEST_PACKAGES test binaries at a time (-p; its default is the
# number of cores). The suite's packages spend much of their time waiting on
# processes they started (control planes, Pulumi, Argo CD, Kargo): with 2 at
# a time a cold make test kept 1.5 of 2 cores busy and the other packages
# queued behind the e2e package; with 3 they all ran beside it, and the suite
# took as long as the e2e package (918 s, the e2e package 909 s, 2026-12-03).
TEST_PACKAGES ?= 3
# go test starts packages in the order it is given them (./... sorts them by
# import path). The longest go first,
# longest first (warm figures from CI, DEVELOPMENT.md "Cold and warm times"),
# so that the suite does not end with one long package running alone: the
# e2e package sets its length.
TEST_FIRST := ./operator/test/e2e ./operator/test/argocde2e ./operator/test/verification \
  ./operator/devtools/demo ./operator/devtools/devenv ./operator/internal/agent \
  ./operator/test/kargoe2e ./operator/test/secrets ./images

.PHONY: help
help: ## Show this help
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z0-9_.-]+:.*## /{printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# CLUSTER_TESTS says whether make test builds the cluster substrate and runs
# the real-cluster tests (operator/test/clustere2e): auto (the default) where
# `hack/substrate.sh cluster-check` finds that the machine can run the cluster
# (root, namespaces, cgroups, …; a cheap probe), and elsewhere says which
# requirement is missing; on always (a machine that cannot then fails); off
# never.
CLUSTER_TESTS ?= auto
ifeq ($(filter $(CLUSTER_TESTS),auto on off),)
$(error CLUSTER_TESTS=$(CLUSTER_TESTS): use auto, on or off)
endif
# CLUSTER_SKIP is a shell command printing why make test leaves the cluster
# tests out, and nothing when it runs them.
CLUSTER_SKIP = case '$(CLUSTER_TESTS)' in off) echo 'CLUSTER_TESTS=off' ;; auto) $(SUBSTRATE) cluster-check || true ;; esac

.PHONY: substrate
# Each substrate target first says what it will take or build and how long a
# cold build takes (hack/substrate.sh plan), then prints progress while it builds.
substrate: ## Obtain what make test needs (kube-apiserver, etcd, pulumi, pulumi-language-yaml, rollouts-controller, Argo CD v3 components, Kargo where ../shared/kargo/src is; the cluster substrate where the cluster tests run, see CLUSTER_TESTS): cached, installed or built
	@why=$$($(CLUSTER_SKIP)); set -- all cluster; \
	if [ -n "$$why" ]; then set -- all; echo "[substrate] the cluster substrate is left out, the cluster tests will not run: $$why"; fi; \
	echo "[substrate] make test needs:"; $(SUBSTRATE) plan "$$@"; \
	echo "$(SUBSTRATE) $$*"; $(SUBSTRATE) "$$@"

.PHONY: substrate-run
substrate-run: ## Obtain only what make run needs (kube-apiserver, etcd, pulumi, pulumi-language-yaml)
	@echo "[substrate] make run needs:"; $(SUBSTRATE) plan run
	$(SUBSTRATE) run

.PHONY: substrate-demo
# --argocd-version 2.14 in DEMO_ARGS needs Argo CD v2.14 besides.
DEMO_TOOLS = demo $(if $(findstring 2.14,$(DEMO_ARGS)),argocd)
substrate-demo: ## Obtain only what make demo needs (kube-apiserver, etcd, pulumi, pulumi-language-yaml, Argo CD v3; rollouts-controller and Kargo where ../shared/kargo/src is)
	@echo "[substrate] make demo needs:"; $(SUBSTRATE) plan $(DEMO_TOOLS)
	$(SUBSTRATE) $(DEMO_TOOLS)

.PHONY: tools
# buf and the protoc plugins are built by hack/gen-proto.sh only when the
# protobuf inputs changed (see generated.sha256 there).
tools: ## Build the code generator every make generate runs (controller-gen)
	$(SUBSTRATE) controller-gen

.PHONY: generate
generate: tools ## Regenerate deepcopy code, CRDs, RBAC, the Helm chart's CRDs and operator rules, the API reference (docs/api), and generated go.mod replace blocks
	./hack/kube-staging-replace.sh .
	./hack/gen-tools-kube.sh
	./hack/gen-tools-pulumi.sh
	./hack/gen-tools-argocd.sh
	./hack/gen-tools-argo-kargo.sh
	./hack/gen-tools-netpol.sh
	$(CONTROLLER_GEN) object paths=./operator/api/...
	$(CONTROLLER_GEN) crd paths=./operator/api/... output:crd:artifacts:config=$(CRD_DIR)
	go run ./hack/crdtrim $(CRD_DIR)/*.yaml
	$(CONTROLLER_GEN) rbac:roleName=stackflow-operator paths=./operator/internal/... output:rbac:artifacts:config=operator/config/rbac
	go run ./hack/chartgen
	./hack/gen-proto.sh
	go run ./argocd-health/cmd/gen
	go run ./hack/apidocs

.PHONY: verify-generate
verify-generate: generate ## Fail when generated files differ from what is committed
	@if [ -n "$$(git status --porcelain -- operator/api operator/proto operator/config operator/charts argocd-health/install docs/api hack/tools go.mod go.sum)" ]; then \
	  git status --porcelain -- operator/api $(CRD_DIR) operator/charts docs/api hack/tools; git --no-pager diff --stat -- operator/api operator/proto operator/config operator/charts argocd-health/install docs/api; \
	  echo "generated files are stale: run 'make generate' and commit the result" >&2; exit 1; fi

.PHONY: chart
chart: ## Regenerate the Helm chart's CRDs and operator rules (operator/charts/stackflow) from operator/config
	go run ./hack/chartgen

.PHONY: argocd-health
argocd-health: ## Regenerate argocd-health/install (argocd-cm Component, Helm values) from the Lua scripts
	go run ./argocd-health/cmd/gen

.PHONY: health-fixtures
health-fixtures: substrate-run ## Re-capture argocd-health/testdata/captured from a real operator run
	eval "$$($(SUBSTRATE) env)" && STACKFLOW_UPDATE_FIXTURES=1 go test -count=1 -run TestCaptureHealthFixtures ./operator/test/e2e/

.PHONY: build
# The cluster tests (build tag cluster) are vetted on every machine, also
# where they cannot run.
build: ## Build every package and vet it (the cluster tests too)
	GOGC=$(STACKFLOW_GOGC) go build ./...
	GOGC=$(STACKFLOW_GOGC) go vet ./...
	GOGC=$(STACKFLOW_GOGC) go vet -tags cluster ./operator/test/clustere2e/

.PHONY: test
# The phases print their durations ([phase] lines), so a cold run shows
# where its time goes. The cluster tests (see CLUSTER_TESTS) run beside go
# test ./..., as a phase of their own: the suite mostly waits on the processes
# it starts, and so does the cluster (DEVELOPMENT.md, "A real single-node
# cluster"). Where they do not run, the phase line says why.
# go test runs with -vet=off: the build phase ran go vet ./..., which checks
# every package and its tests with more analyzers than go test's own subset.
test: ## Obtain the substrate, then run the whole test suite, the cluster tests beside it where the machine can run them (CLUSTER_TESTS)
	$(PHASE) substrate $(MAKE) substrate
	$(PHASE) tools $(MAKE) tools
	$(PHASE) build $(MAKE) build
	$(PHASE) verify-generate $(MAKE) verify-generate
	@why=$$($(CLUSTER_SKIP)); pids=(); rc=0; \
	if [ -n "$$why" ]; then echo "[phase] test-cluster: skipped: $$why"; \
	else $(PHASE) test-cluster $(MAKE) --no-print-directory test-cluster-run & pids+=($$!); fi; \
	eval "$$($(SUBSTRATE) env)" && $(PHASE) 'go test ./...' env GOGC=$(STACKFLOW_GOGC) go test -vet=off -p $(TEST_PACKAGES) -timeout $(TEST_TIMEOUT) $(GO_TEST_FLAGS) $(TEST_FIRST) ./... || rc=$$?; \
	for pid in "$${pids[@]}"; do wait "$$pid" || { [ $$rc -ne 0 ] || rc=1; }; done; exit $$rc

.PHONY: test-argocd-2.14
# Argo CD v2.14 is past end of life and left out of make test's substrate (19
# CPU-minutes cold); make test still runs these tests on it when it is cached.
test-argocd-2.14: ## Build Argo CD v2.14 (~19 CPU-min cold) and run the Argo CD tests on it and on v3
	$(SUBSTRATE) all argocd
	eval "$$($(SUBSTRATE) env)" && go test -count=1 -timeout $(TEST_TIMEOUT) $(GO_TEST_FLAGS) ./test/framework/argocd/ ./operator/test/argocde2e/

.PHONY: screenshots
# The pictures of Argo CD's UI in the README and docs/argocd.md are taken by
# the browser test, which make test runs too (checking the page and the docs
# against each other, its screenshots left in a temporary directory).
screenshots: ## Take the docs' screenshots of Argo CD's UI again (docs/images), with the browser test
	$(SUBSTRATE) all
	eval "$$($(SUBSTRATE) env)" && STACKFLOW_SCREENSHOTS=$(CURDIR)/docs/images go test -count=1 -timeout 15m $(GO_TEST_FLAGS) -run '^TestStackInArgoCDUI$$' ./operator/test/argocde2e/

.PHONY: test-images
# make test builds the release images for linux/amd64 only (and a small
# program for both platforms): the arm64 cross-compilation of every release
# binary is ~8 CPU-minutes cold and tests nothing more.
test-images: ## Build the release images for linux/amd64 and linux/arm64, as make images publishes them, and test them
	go test -count=1 -timeout $(TEST_TIMEOUT) $(GO_TEST_FLAGS) -run 'TestStackflowImages|TestMultiPlatformIndex' ./images/ -args -images.platforms=linux/amd64,linux/arm64

.PHONY: images
# REGISTRY=ghcr.io/x pushes <registry>/<name>:<version>; VERSION overrides
# git describe; PLATFORMS and IMAGES narrow the build (comma-separated).
REGISTRY ?=
VERSION ?=
PLATFORMS ?= linux/amd64,linux/arm64
IMAGES ?=
images: ## Build the OCI images (operator+agent, analysis, kargo; amd64+arm64) into _build/images without Docker; REGISTRY=… pushes them
	go run ./images/cmd/stackflow-images --out _build/images --platforms '$(PLATFORMS)' \
	  $(if $(IMAGES),--images '$(IMAGES)') $(if $(VERSION),--version '$(VERSION)') $(if $(REGISTRY),--registry '$(REGISTRY)')

.PHONY: cluster-images
cluster-images: ## Build the test cluster's pause and test workspace images (linux/amd64) as OCI archives for ctr import into _build/cluster-images
	$(SUBSTRATE) pulumi && $(SUBSTRATE) pulumi-yaml
	eval "$$($(SUBSTRATE) env)" && go run ./images/cmd/stackflow-images --set cluster --platforms linux/amd64 \
	  --out _build/cluster-images/layouts --archives _build/cluster-images $(if $(VERSION),--version '$(VERSION)')

.PHONY: cluster
# Built, then exec'd, like run, so that Ctrl-C reaches it and it tears down.
cluster: ## Start a single-node cluster from real components (root; hack/substrate.sh cluster) and print its kubeconfig; Ctrl-C stops it
	$(SUBSTRATE) cluster && $(SUBSTRATE) pulumi && $(SUBSTRATE) pulumi-yaml
	go build -o bin/stackflow-cluster ./operator/devtools/cmd/stackflow-cluster
	eval "$$($(SUBSTRATE) env)" && exec ./bin/stackflow-cluster $(CLUSTER_ARGS)

.PHONY: test-cluster test-cluster-run
# make test runs these tests too, where the machine can (CLUSTER_TESTS).
test-cluster: ## Run the end-to-end tests on a real single-node cluster (root; builds the cluster substrate first)
	$(SUBSTRATE) cluster && $(SUBSTRATE) pulumi && $(SUBSTRATE) pulumi-yaml
	go vet -tags cluster ./operator/test/clustere2e/
	$(MAKE) --no-print-directory test-cluster-run

test-cluster-run: ## Run the cluster tests on the substrate already obtained (as make test does, beside go test ./...)
	eval "$$($(SUBSTRATE) env)" && GOGC=$(STACKFLOW_GOGC) go test -tags cluster -count=1 -timeout $(TEST_TIMEOUT) $(GO_TEST_FLAGS) ./operator/test/clustere2e/

.PHONY: bench-analysis
# It needs no cluster (a target-specific variable holds for its prerequisites).
bench-analysis: CLUSTER_TESTS = off
bench-analysis: substrate ## Load benchmark of the analysis service: 1,000 Stacks, 1,000 req/s, p50/p99 latency and RSS
	eval "$$($(SUBSTRATE) env)" && go test -run XXX -bench BenchmarkVerificationLoad -benchtime 1x ./analysis/test/load/

.PHONY: demo
# Built, then exec'd, like run. DEMO_ARGS="--yes --exit" runs it unattended.
demo: substrate-demo ## Roll a release out dev → test → prod with the real operator, analysis service, Argo CD v3 and (where built) Kargo, offline (DEMO_ARGS=-h lists options; --argocd-version 2.14 runs v2.14)
	go build -o bin/stackflow-demo ./operator/devtools/cmd/stackflow-demo
	exec ./bin/stackflow-demo $(DEMO_ARGS)

.PHONY: run
# Built, then exec'd (not `go run`, which dies of SIGTERM without passing it on):
# make passes SIGTERM to the recipe's process, which then is stackflow-dev
# itself, and Ctrl-C or SIGTERM stops the control plane and agents it started.
run: substrate-run ## Run Stackflow locally: control plane, operator (local runtime), file backend, a sample Stack (RUN_ARGS=-h lists options)
	go build -o bin/stackflow-dev ./operator/devtools/cmd/stackflow-dev
	exec ./bin/stackflow-dev $(RUN_ARGS)
