# Copyright The nri-sysctl Authors.
# SPDX-License-Identifier: Apache-2.0
# nri-sysctl
# The one version (the file VERSION, semver), and its form for each format
# (hack/version): make VERSION=0.3.0-rc.1 ... recomputes them all.
VERSION   ?= $(shell cat VERSION)
version_as = $(shell $(HOST_GO) run ./hack/version -version '$(VERSION)' $(1))
DEB_VERSION   = $(call version_as,deb)
RPM_VERSION   = $(call version_as,rpm)
OCI_TAG       = $(call version_as,oci)
CHART_VERSION = $(call version_as,helm)
PREFIX    ?= /usr/local
DESTDIR   ?=
BIN       := bin/nri-sysctl
GO        ?= go
GOFLAGS_BUILD := -trimpath -buildvcs=false -ldflags "-s -w -X main.version=$(VERSION)"

# Architectures (docs/image-and-architectures.md). make build GOARCH=arm64
# cross-builds; the host's binary is bin/nri-sysctl (what install, e2e, the
# VM test and the demo run), another architecture's bin/linux-<GOARCH>/nri-sysctl.
# GOARCH is the build's alone: tools the Makefile runs (go run, go test)
# run on the host, so it is not exported to recipes, and HOST_GO drops it
# from the environment where it came from there (GOARCH=arm64 make ...).
HOST_GO     = env -u GOARCH -u GOOS $(GO)
HOST_GOARCH := $(shell env -u GOARCH -u GOOS $(GO) env GOARCH)
GOARCH      ?= $(HOST_GOARCH)
unexport GOARCH GOOS
IMAGE_ARCHES ?= amd64 arm64
arch_bin = $(if $(filter $(HOST_GOARCH),$(1)),bin/nri-sysctl,bin/linux-$(1)/nri-sysctl)
# BUILD_GOCACHE: a Go build cache for the shipped binary alone (make
# reproduce builds it with one of its own; the tools keep the default).
BUILD_GOCACHE ?=
build_env = CGO_ENABLED=0 GOOS=linux $(if $(BUILD_GOCACHE),GOCACHE=$(abspath $(BUILD_GOCACHE)))
go_build = $(build_env) GOARCH=$(1) $(GO) build $(GOFLAGS_BUILD) -o $(call arch_bin,$(1)) ./plugin/cmd/nri-sysctl

# containerd versions the end-to-end tests run against (see docs/modes-and-runtimes.md).
E2E_CONTAINERD_VERSIONS ?= v2.4.2 v2.3.7 v2.2.10 v2.1.9 v2.0.14 v1.7.36

# The container image (make image): an OCI image layout archive.
IMAGE_NAME ?= localhost/nri-sysctl
IMAGE_TAR  := bin/nri-sysctl-image.tar

comma := ,

# golangci-lint: built once from the Go module proxy into the test cache.
CACHE     ?= /var/cache/nri-sysctl-e2e
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT := $(CACHE)/golangci-lint-$(GOLANGCI_LINT_VERSION)/bin/golangci-lint
# cyclonedx-gomod: the SBOM generator (and licence detection) for the
# notices, built the same way.
CYCLONEDX_GOMOD_VERSION ?= v1.10.0
CYCLONEDX_GOMOD := $(CACHE)/cyclonedx-gomod-$(CYCLONEDX_GOMOD_VERSION)/bin/cyclonedx-gomod
# crane (pushes the image's index: make publish) and cosign (signs: make
# publish, make release; verifies: make verify-published), built the same
# way; test/setup.sh --k8s builds the same versions into the same paths.
CRANE_VERSION ?= v0.22.1
CRANE := $(CACHE)/crane-$(CRANE_VERSION)/bin/crane
COSIGN_VERSION ?= v2.6.5
COSIGN := $(CACHE)/cosign-$(COSIGN_VERSION)/bin/cosign


.PHONY: publish verify-published release reproduce notices notices-update notices-make packages packages-lint all build arch-test chart version test unit vet lint fmt-check fuzz-smoke e2e setup test-all demo install clean manifests image e2e-k8s vm-test vm-setup newer-patches

all: build

## build: the binary for GOARCH (default the host's; see above).
build: build-$(GOARCH)

## build-ARCH: the binary for one architecture, e.g. make build-arm64.
build-%:
	$(HOST_GO) run ./hack/version -version '$(VERSION)' semver >/dev/null
	$(call go_build,$*)

## version: the version in each format.
version:
	@for f in semver deb rpm oci helm; do v=$$($(HOST_GO) run ./hack/version -version '$(VERSION)' $$f) || exit 1; printf '%-7s %s\n' $$f "$$v"; done

## image: the Dockerfile's image, built offline as one OCI archive
## (bin/nri-sysctl-image.tar, named $(IMAGE_NAME):$(OCI_TAG)) holding an
## image index with an image for each of IMAGE_ARCHES (linux/amd64,
## linux/arm64); load it with `ctr -n k8s.io images import`, which takes
## the host's platform. The tool is hack/image, a module of its own.
image: $(addprefix build-,$(IMAGE_ARCHES))
	cd hack/image && $(HOST_GO) run . $(foreach a,$(IMAGE_ARCHES),-binary $(a)=$(abspath $(call arch_bin,$(a)))) -name $(IMAGE_NAME):$(OCI_TAG) -out $(abspath $(IMAGE_TAR))

## arch-test: the archive make image wrote (an index naming both platforms,
## each manifest's digest, config and layer, the layer's ELF machine) and
## the other architecture's binary under qemu user emulation
## (qemu-user-static, test/setup.sh) giving the host binary's output for
## version, validate and explain (test/arch). No root needed.
arch-test: image
	cd hack/image && NRI_SYSCTL_IMAGE_ARCHIVE=$(abspath $(IMAGE_TAR)) NRI_SYSCTL_IMAGE_NAME=$(IMAGE_NAME):$(OCI_TAG) \
		NRI_SYSCTL_IMAGE_BINARIES='$(foreach a,$(IMAGE_ARCHES),$(a)=$(abspath $(call arch_bin,$(a))))' \
		$(HOST_GO) test -count=1 -v -run '^TestImageArchive$$' .
	NRI_SYSCTL_ARCH_TEST=1 NRI_SYSCTL_BINARIES='$(foreach a,$(IMAGE_ARCHES),$(a)=$(abspath $(call arch_bin,$(a))))' \
		$(HOST_GO) test -count=1 -v ./test/arch/

## chart: the packaged chart, $(CHART_OUT)/nri-sysctl-$(CHART_VERSION).tgz,
## its version and appVersion the one version (CHART_VERSION); the image tag
## it defaults to is the appVersion as an OCI tag, which is $(OCI_TAG).
## helm is the one test/setup.sh builds. helm stamps each file with the
## time it ran; hack/chartdate sets them to SOURCE_DATE_EPOCH (reproducible).
HELM_VERSION ?= v3.22.0
HELM      ?= $(CACHE)/helm-$(HELM_VERSION)/bin/helm
CHART_DIR := config/helm/nri-sysctl
CHART_OUT ?= bin
CHART_TGZ  = $(CHART_OUT)/nri-sysctl-$(CHART_VERSION).tgz
chart:
	@test -x $(HELM) || { echo "$(HELM) is missing: run test/setup.sh (as root), which builds it"; exit 1; }
	@v='$(CHART_VERSION)'; test -n "$$v" || { echo "make chart: no chart version for VERSION=$(VERSION)"; exit 1; }; \
	mkdir -p $(CHART_OUT) && home=$$(mktemp -d) && \
	HELM_CACHE_HOME=$$home/cache HELM_CONFIG_HOME=$$home/config HELM_DATA_HOME=$$home/data \
		$(HELM) package $(CHART_DIR) --version "$$v" --app-version "$$v" --destination $(CHART_OUT); \
	rc=$$?; rm -rf "$$home"; [ $$rc -eq 0 ] || exit $$rc
	$(HOST_GO) run ./hack/chartdate -epoch $(SOURCE_DATE_EPOCH) $(CHART_TGZ)

## packages: .deb and .rpm packages for amd64 and arm64 in bin/packages, with
## the CycloneDX SBOM of each architecture's binary beside them
## (DEB_VERSION, RPM_VERSION; docs/packages.md), built with nfpm by
## hack/packages, a module of its own. The binaries are built here, one per
## architecture (bin/<arch>/nri-sysctl). PACKAGE_ARCHES and PACKAGE_FORMATS
## narrow it (the VM test builds amd64 deb only); PACKAGES_DIR and
## PACKAGE_BIN_DIR move the output.
PACKAGE_ARCHES  ?= amd64 arm64
PACKAGE_FORMATS ?= deb rpm
PACKAGES_DIR    ?= bin/packages
PACKAGE_BIN_DIR ?= bin
PACKAGE_CONFIG  ?=
# File times and the changelog date: the commit's time, so that the same
# tree gives the same packages.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
packages: notices-make
	$(HOST_GO) run ./hack/version -version '$(VERSION)' semver >/dev/null
	rm -f $(PACKAGES_DIR)/nri-sysctl_*.deb $(PACKAGES_DIR)/nri-sysctl-*.rpm $(PACKAGES_DIR)/nri-sysctl-linux-*.cdx.json
	mkdir -p $(PACKAGES_DIR)
	cp bin/sbom/nri-sysctl-linux-*.cdx.json $(PACKAGES_DIR)/
	@for arch in $(PACKAGE_ARCHES); do \
		echo "CGO_ENABLED=0 GOARCH=$$arch go build -o $(PACKAGE_BIN_DIR)/$$arch/nri-sysctl ./plugin/cmd/nri-sysctl"; \
		$(build_env) GOARCH=$$arch $(GO) build $(GOFLAGS_BUILD) -o $(abspath $(PACKAGE_BIN_DIR))/$$arch/nri-sysctl ./plugin/cmd/nri-sysctl || exit 1; \
	done
	cd hack/packages && $(HOST_GO) run . -repo $(abspath .) -bin-dir $(abspath $(PACKAGE_BIN_DIR)) -out $(abspath $(PACKAGES_DIR)) \
		-deb-version '$(DEB_VERSION)' -rpm-version '$(RPM_VERSION)' -source-date-epoch '$(SOURCE_DATE_EPOCH)' \
		-arches '$(subst $(eval) ,$(comma),$(strip $(PACKAGE_ARCHES)))' -formats '$(subst $(eval) ,$(comma),$(strip $(PACKAGE_FORMATS)))' \
		$(if $(PACKAGE_CONFIG),-config $(abspath $(PACKAGE_CONFIG)))

## release: every artifact of VERSION in RELEASE_DIR (bin/release/VERSION):
## both architectures' binaries and SBOMs, the .deb and .rpm packages, the
## image archive, the chart, LICENSE, THIRD_PARTY_NOTICES, CHANGELOG.md's
## section as RELEASE_NOTES.md, and SHA256SUMS, checked with sha256sum -c
## (hack/release.sh; docs/releasing.md). With COSIGN_KEY=cosign.key
## (COSIGN_PASSWORD its password), SHA256SUMS.sig too (hack/sign-sums.sh;
## hack/verify-sums.sh checks it).
RELEASE_DIR ?= bin/release/$(VERSION)
release: image packages chart notices $(if $(COSIGN_KEY),$(COSIGN))
	$(if $(COSIGN_KEY),COSIGN_KEY='$(COSIGN_KEY)' COSIGN=$(COSIGN)) hack/release.sh $(RELEASE_DIR) '$(VERSION)' '$(OCI_TAG)' $(IMAGE_TAR) $(CHART_TGZ) $(PACKAGES_DIR) \
		$(foreach a,$(IMAGE_ARCHES),$(a)=$(call arch_bin,$(a)))

## publish: push the image archive's whole index (linux/amd64 and
## linux/arm64) to REGISTRY/nri-sysctl:<OCI tag> and the chart to
## oci://REGISTRY/charts, and read both back (hack/publish.sh;
## docs/releasing.md). Log in first (crane auth login, helm registry
## login); PLAIN_HTTP=1 for a registry without TLS; COSIGN_KEY=cosign.key
## (COSIGN_PASSWORD its password) signs both there with that key, and
## attaches each architecture's SBOM to its platform's image as a signed
## attestation; nothing goes to a transparency log. make e2e-k8s's two-node test
## publishes to its local registry with the same script.
## verify-published: what a user runs before installing: both signatures,
## checked with COSIGN_PUB (hack/verify-published.sh).
publish: image chart $(CRANE) $(if $(COSIGN_KEY),$(COSIGN) notices-make)
	@test -n '$(REGISTRY)' || { echo 'make publish: REGISTRY=host[:port][/path] is required' >&2; exit 2; }
	$(if $(COSIGN_KEY),COSIGN_KEY='$(COSIGN_KEY)' COSIGN=$(COSIGN) SBOM_DIR=bin/sbom) hack/publish.sh '$(REGISTRY)' '$(OCI_TAG)' $(IMAGE_TAR) $(CHART_TGZ) $(CRANE) $(HELM) $(if $(PLAIN_HTTP),--plain-http)

verify-published: $(COSIGN) $(CRANE)
	@test -n '$(REGISTRY)' -a -n '$(COSIGN_PUB)' || { echo 'make verify-published: REGISTRY=host[:port][/path] and COSIGN_PUB=cosign.pub are required' >&2; exit 2; }
	hack/verify-published.sh '$(REGISTRY)' '$(OCI_TAG)' '$(CHART_VERSION)' $(COSIGN) $(CRANE) '$(COSIGN_PUB)' $(if $(PLAIN_HTTP),--plain-http)

$(COSIGN):
	mkdir -p $(dir $@)
	cd / && GOBIN=$(abspath $(dir $@)) CGO_ENABLED=0 $(GO) install -ldflags "-s -w" github.com/sigstore/cosign/v2/cmd/cosign@$(COSIGN_VERSION)

$(CRANE):
	mkdir -p $(dir $@)
	cd / && GOBIN=$(abspath $(dir $@)) CGO_ENABLED=0 $(GO) install -ldflags "-s -w" github.com/google/go-containerregistry/cmd/crane@$(CRANE_VERSION)

## reproduce: make release twice on HEAD (or a commit of the working tree
## when it differs), in two local clones of different depths, the second
## building the binaries with a Go build cache of its own
## (REPRODUCE_GOCACHE), and compare every artifact's digest
## (hack/reproduce.sh; docs/releasing.md).
REPRODUCE_GOCACHE ?= $(CACHE)/reproduce-gocache
reproduce:
	MAKE="$(MAKE)" REPRODUCE_GOCACHE=$(REPRODUCE_GOCACHE) hack/reproduce.sh

## packages-lint: make packages, then lintian on each .deb (any error or
## warning fails; the package's lintian overrides, each with its reason, are
## hack/packages/files/lintian-overrides) and rpm -K, rpm -qpl on each .rpm
## (lintian and rpm from test/setup.sh).
packages-lint: packages
	hack/packages/lint.sh $(PACKAGES_DIR)

## test: unit tests (with the race detector), go vet, golangci-lint, the gofmt check and the notices' licence check.
test: fmt-check vet lint unit notices

## notices: THIRD_PARTY_NOTICES, the licence of each Go module compiled
## into the binary (from a CycloneDX SBOM per architecture, bin/sbom/) and
## the texts they ship, made anew in bin/; fails on a licence unknown or
## not allowed (hack/notices, its overrides in hack/notices/overrides.txt),
## or when the committed file differs (go.mod changed: make notices-update).
notices: notices-make
	@cmp -s bin/THIRD_PARTY_NOTICES THIRD_PARTY_NOTICES || { echo "THIRD_PARTY_NOTICES is not what the build's modules give: run make notices-update and commit it" >&2; diff bin/THIRD_PARTY_NOTICES THIRD_PARTY_NOTICES | head -20 >&2; exit 1; }

## notices-update: write THIRD_PARTY_NOTICES anew.
notices-update: notices-make
	cp bin/THIRD_PARTY_NOTICES THIRD_PARTY_NOTICES

SBOM_ARCHES := amd64 arm64
notices-make: $(CYCLONEDX_GOMOD) $(addprefix build-,$(SBOM_ARCHES))
	mkdir -p bin/sbom
	for arch in $(SBOM_ARCHES); do \
		GOOS=linux GOARCH=$$arch CGO_ENABLED=0 $(CYCLONEDX_GOMOD) app -json -licenses -assert-licenses -std -noserial -notimestamp \
			-output bin/sbom/nri-sysctl-linux-$$arch.cdx.json -main plugin/cmd/nri-sysctl . || exit 1; \
	done
	$(HOST_GO) run ./hack/notices -overrides hack/notices/overrides.txt -out bin/THIRD_PARTY_NOTICES \
		$(foreach a,$(SBOM_ARCHES),bin/sbom/nri-sysctl-linux-$(a).cdx.json:$(call arch_bin,$(a)))

$(CYCLONEDX_GOMOD):
	mkdir -p $(dir $@)
	cd / && GOBIN=$(abspath $(dir $@)) $(GO) install github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@$(CYCLONEDX_GOMOD_VERSION)

## lint: golangci-lint (.golangci.yml), built on first use; also on hack/alerts.
lint: $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) run --max-issues-per-linter 0 --max-same-issues 0 ./...
	cd hack/alerts && $(GOLANGCI_LINT) run --max-issues-per-linter 0 --max-same-issues 0 ./...

$(GOLANGCI_LINT):
	mkdir -p $(dir $@)
	cd / && GOBIN=$(abspath $(dir $@)) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

## unit: also hack/alerts (a module of its own), which checks the chart's
## alerts and dashboard against plugin/testdata/metrics.txt, and
## hack/packages (the packages' contents).
unit:
	$(GO) test -race -count=1 ./pkg/... ./plugin/... ./hack/version/ ./hack/chartdate/ ./test/install/ ./test/testall/ ./test/chart/ ./test/internal/... ./test/project/ ./hack/notices/
	cd hack/image && $(GO) test -count=1 ./...
	cd hack/alerts && $(GO) test -count=1 ./...
	cd hack/packages && $(GO) test -count=1 ./...

## manifests: config/kubernetes/nri-sysctl.yaml from the Helm chart (helm from test/setup.sh).
manifests:
	$(GO) test -count=1 -run '^TestPlainManifestsMatchChart$$' ./test/chart/ -update

vet:
	$(GO) vet ./...
	cd hack/image && $(GO) vet ./...
	cd hack/alerts && $(GO) vet ./...
	cd hack/packages && $(GO) vet ./...

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

## fuzz-smoke: each fuzz target for a number of inputs (about 7 s each on
## a 2-core machine), not a duration: Go 1.26's fuzzing coordinator can fail
## a duration run at its end on a loaded machine ("context deadline
## exceeded", no failing input; golang/go#75804, fixed in Go 1.27).
## FUZZTIME (e.g. 10m, or 5000000x) overrides all three. Seed corpora live
## in testdata/fuzz.
FUZZTIME ?=
fuzz_budget = $(or $(FUZZTIME),$(1))
fuzz-smoke:
	$(GO) test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(call fuzz_budget,100000x) ./pkg/config/
	$(GO) test -run '^$$' -fuzz '^FuzzNormalize$$' -fuzztime $(call fuzz_budget,150000x) ./pkg/sysctl/
	$(GO) test -run '^$$' -fuzz '^FuzzDecide$$' -fuzztime $(call fuzz_budget,100000x) ./pkg/policy/

## newer-patches: ask the Go module proxy, by number, for releases newer
## than the suite tests (the next patches of each containerd line, the next
## line, the tools test/setup.sh pins); prints them, never fails.
newer-patches:
	@hack/newer-patches.sh $(E2E_CONTAINERD_VERSIONS)

## setup: install what the end-to-end tests need (apt packages, containerd, crictl, helm).
setup:
	test/setup.sh $(E2E_CONTAINERD_VERSIONS) $(E2E_NRI_PREVIEW)

## e2e: end-to-end tests against a real containerd (root): every case on
## E2E_FULL_VERSIONS (the newest line of each mode: 2.4.2 spec, 2.2.9
## namespace); on the other lines, the cases whose behaviour depends on the
## line (its NRI, its mode, its config format, its user namespaces):
## E2E_LINE_CASES. docs/testing.md says which case runs where, and why.
## Every case on every line: make e2e E2E_FULL_VERSIONS="$(E2E_CONTAINERD_VERSIONS)".
## E2E_JOBS=2 (the default) runs the FULL lines and the others as two
## streams at once, E2E_JOBS=1 one line after another (test/e2e.sh says why).
E2E_FULL_VERSIONS ?= v2.4.2 v2.2.10
E2E_LINE_CASES = ^(TestHarness|TestVendoredNRIMatchesTheDocs|TestFailurePolicyOnAStalledPlugin|TestNodeDefaults|TestAutoModeKeepsContainerdRunning|TestForcedSpecModeRefusedWhereItCrashes|TestSpecModeIsDroppedByOldContainerd|TestServicePreinstalled|TestServiceContainerdRestart|TestServiceFailClosed|TestPluginStoppedMidRequestFailClosed|TestPluginStoppedBetweenRequestsFailClosed|TestProfilesAnnotationAttack|TestPodStartedWhilePluginDownIsHealed|TestPluginKilledDuringBurst|TestKeyFromLowerIndexPluginIsKept|TestUserNamespacePod|TestUserNamespacePodStartsWithEveryKeyClass|TestConvergeStoppedPodWritesNothing|TestConvergeListAcrossRestarts|TestConvergeFirstWriteKeepsAnEarlierWriter|TestNextContainerKeepsAnotherWritersValue)$$
E2E_JOBS ?= 2
## E2E_NRI_PREVIEW: a release built with a newer NRI than it vendors (not
## a release: what a later one will vendor), for E2E_NRI_PREVIEW_CASES,
## which need that NRI; empty skips it.
E2E_NRI_PREVIEW ?= v2.4.2+nri.v0.12.5
E2E_NRI_PREVIEW_CASES = ^(TestHarness|TestVendoredNRIMatchesTheDocs|TestFailurePolicyOnAStalledPlugin)$$
e2e: build
	GO='$(GO)' E2E_JOBS='$(E2E_JOBS)' test/e2e.sh '$(E2E_CONTAINERD_VERSIONS)' '$(E2E_FULL_VERSIONS)' '$(E2E_LINE_CASES)'
	@if [ -n '$(E2E_NRI_PREVIEW)' ]; then \
		echo "=== end-to-end tests against containerd $(E2E_NRI_PREVIEW) (not a release): $(E2E_NRI_PREVIEW_CASES)"; \
		NRI_SYSCTL_CONTAINERD_VERSION='$(E2E_NRI_PREVIEW)' $(GO) test -count=1 -timeout 10m -v -run '$(E2E_NRI_PREVIEW_CASES)' ./test/e2e/; \
	fi

## e2e-k8s: the chart on Kubernetes v1.37.2 (etcd, API server, controller
## manager, scheduler, kubelets; built by test/setup.sh --k8s); the image
## from make image, the chart from make chart (the .tgz; root), the SBOMs
## from make notices-make (the two-node stage attaches them). Two stages:
##  - TestK8sFleet: a single node on the harness's containerd, one run per
##    E2E_K8S_CONTAINERD_VERSIONS (2.4.2: the chart's spec mode; before
##    2.3: its auto mode, and the plugin chooses namespace mode);
##  - TestK8sTwoNodes: one release in mode auto on a cluster of two nodes
##    on this machine, each with its own containerd and kubelet, both
##    fail-closed: E2E_K8S_TWO_NODES is node 1's version and node 2's
##    (2.4.2, where the plugin chooses spec mode, and 2.2.9, namespace
##    mode). docs/testing-kubernetes.md describes the harness.
## Namespace mode on 2.1.9 under Kubernetes: E2E_K8S_CONTAINERD_VERSIONS="v2.4.2 v2.1.9".
E2E_K8S_CONTAINERD_VERSIONS ?= v2.4.2
E2E_K8S_TWO_NODES ?= v2.4.2 v2.2.10
e2e-k8s: image notices-make
	test/setup.sh --k8s $(sort $(E2E_K8S_CONTAINERD_VERSIONS) $(E2E_K8S_TWO_NODES))
	$(MAKE) --no-print-directory chart
	@for v in $(E2E_K8S_CONTAINERD_VERSIONS); do \
		echo "=== the chart on Kubernetes, one node, containerd $$v"; \
		NRI_SYSCTL_E2E_K8S=1 NRI_SYSCTL_E2E_CHART=$(abspath $(CHART_TGZ)) NRI_SYSCTL_CONTAINERD_VERSION=$$v $(GO) test -count=1 -timeout 30m -v -run '^TestK8sFleet$$' ./test/e2e/ || exit 1; \
	done
	@set -- $(E2E_K8S_TWO_NODES); \
	echo "=== the chart on Kubernetes, two nodes: containerd $$1 and $$2"; \
	NRI_SYSCTL_E2E_K8S=1 NRI_SYSCTL_E2E_CHART=$(abspath $(CHART_TGZ)) NRI_SYSCTL_CONTAINERD_VERSION=$$1 NRI_SYSCTL_E2E_NODE2_CONTAINERD_VERSION=$$2 \
		$(GO) test -count=1 -timeout 30m -v -run '^TestK8sTwoNodes$$' ./test/e2e/

## test-all: everything CI runs, from a fresh Debian 12 machine (root):
## these targets in this order, with what vm-test and e2e-k8s need from
## test/setup.sh (the kubelet; Kubernetes' control plane, etcd, the
## registry, crane and cosign) built in the background meanwhile, at nice 19
## (test/test-all.sh says when and why; exec, so that a SIGTERM to make
## reaches it).
TEST_ALL_FIRST = setup test arch-test fuzz-smoke packages-lint reproduce e2e bench-smoke soak
TEST_ALL_KUBELET = vm-test
TEST_ALL_LAST = e2e-k8s
test-all:
	MAKE="$(MAKE)" exec test/test-all.sh "$(TEST_ALL_FIRST)" "$(TEST_ALL_KUBELET)" "$(TEST_ALL_LAST)"
# setup builds helm first, so the chart and alert checks must not skip here
# for want of it (they do under a plain go test on a machine without it).
test-all: export NRI_SYSCTL_REQUIRE_HELM = 1

## vm-setup: what the VM test needs (qemu, mmdebstrap, containerd, kubelet).
VM_CONTAINERD_VERSIONS ?= v2.4.2 v2.2.10
vm-setup:
	test/vm/setup.sh $(VM_CONTAINERD_VERSIONS)

## vm-test: a real node under qemu (systemd as PID 1, containerd,
## nri-sysctl.service, kubelet with static pods), built as a Debian 12 image
## and cached in /var/cache/nri-sysctl-e2e/vm (test/vm, docs/testing.md "The VM test").
## VM_TEST_RUN selects tests (a go test -run pattern).
VM_TEST_RUN ?= .
vm-test: build vm-setup
	NRI_SYSCTL_VM=1 $(GO) test -count=1 -timeout 120m -v -run '$(VM_TEST_RUN)' ./test/vm/

## demo: a throwaway containerd (v2.4.2), the plugin with config/config.yaml,
## one pod, and the sysctls inside it beside the kernel's and the host's.
## It prints the table, or on failure the test's whole output.
demo: build
	test/setup.sh --demo v2.4.2
	@out=$$(mktemp -d); \
	if NRI_SYSCTL_DEMO_OUT=$$out/table.txt NRI_SYSCTL_CONTAINERD_VERSION=v2.4.2 $(GO) test -count=1 -run '^TestDemo$$' ./test/e2e/ >$$out/test.log 2>&1; then \
		echo; cat $$out/table.txt; rm -rf $$out; \
	else \
		cat $$out/test.log; rm -rf $$out; echo "make demo failed: the output above says why"; exit 1; \
	fi

## install: the layout image builders bake into a node (DESTDIR, PREFIX).
install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/nri-sysctl
	install -D -m 0600 config/config.yaml $(DESTDIR)/etc/nri-sysctl/config.yaml
	install -D -m 0644 systemd/nri-sysctl.service $(DESTDIR)/etc/systemd/system/nri-sysctl.service
	install -D -m 0644 systemd/nri-sysctl-reload.path $(DESTDIR)/etc/systemd/system/nri-sysctl-reload.path
	install -D -m 0644 systemd/nri-sysctl-reload.service $(DESTDIR)/etc/systemd/system/nri-sysctl-reload.service
	install -D -m 0644 config/systemd/metrics.conf $(DESTDIR)$(PREFIX)/share/nri-sysctl/systemd/metrics.conf
	sed -i 's#/usr/local/bin/nri-sysctl#$(PREFIX)/bin/nri-sysctl#g' $(DESTDIR)$(PREFIX)/share/nri-sysctl/systemd/metrics.conf
	for f in config/containerd/*.toml; do \
		install -D -m 0644 $$f $(DESTDIR)$(PREFIX)/share/nri-sysctl/containerd/$$(basename $$f) || exit 1; \
	done
	install -d $(DESTDIR)$(PREFIX)/share/doc/nri-sysctl
	install -m 0644 LICENSE THIRD_PARTY_NOTICES $(DESTDIR)$(PREFIX)/share/doc/nri-sysctl/
	$(BIN) --help > $(DESTDIR)$(PREFIX)/share/doc/nri-sysctl/nri-sysctl.txt 2>&1
	install -m 0644 README.md $(DESTDIR)$(PREFIX)/share/doc/nri-sysctl/README.md
	install -m 0644 CHANGELOG.md $(DESTDIR)$(PREFIX)/share/doc/nri-sysctl/CHANGELOG.md
	install -d $(DESTDIR)$(PREFIX)/share/doc/nri-sysctl/docs
	install -m 0644 docs/*.md $(DESTDIR)$(PREFIX)/share/doc/nri-sysctl/docs/
	sed -i 's#/usr/local/bin/nri-sysctl#$(PREFIX)/bin/nri-sysctl#g' $(DESTDIR)/etc/systemd/system/nri-sysctl.service
	$(DESTDIR)$(PREFIX)/bin/nri-sysctl validate --skip-kernel-check --config $(DESTDIR)/etc/nri-sysctl/config.yaml

clean:
	rm -rf bin

# Benchmarks (docs/benchmarks.md). Sizes come from the environment or the
# make command line: NRI_SYSCTL_BENCH_PODS (default 100 per configuration),
# NRI_SYSCTL_BENCH_CHURN_PODS (default 2000). Reports: bin/bench/.
BENCH_CONTAINERD_VERSIONS ?= v2.4.2 v2.1.9
.PHONY: bench bench-smoke bench-churn bench-converge soak

## bench: Go micro-benchmarks, then the create-path benchmark (no plugin,
## no-op plugin, nri-sysctl, nri-sysctl with metrics; interleaved) against each containerd (root).
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/... ./plugin/
	@for v in $(BENCH_CONTAINERD_VERSIONS); do \
		echo "=== create-path benchmark against containerd $$v"; \
		NRI_SYSCTL_BENCH=1 NRI_SYSCTL_CONTAINERD_VERSION=$$v $(GO) test -count=1 -timeout 60m -v -run '^TestBenchCreatePath$$' ./test/e2e/ || exit 1; \
	done

## bench-smoke: a 10-pod create-path benchmark that checks the benchmark works
## (every nri-sysctl pod got its defaults, a report was written); no timing
## checks. Then the metrics listener under 10,000 idle connections: peak RSS
## under 32 MiB and /healthz within 1 s.
bench-smoke: build
	NRI_SYSCTL_BENCH=1 NRI_SYSCTL_BENCH_PODS=10 $(GO) test -count=1 -timeout 10m -v -run '^TestBenchCreatePath$$' ./test/e2e/
	NRI_SYSCTL_BENCH=1 $(GO) test -count=1 -timeout 5m -v -run '^TestBenchIdleConnections$$' ./test/e2e/

## soak: figures under faults on a fail-closed containerd 2.4.2 for
## SOAK_DURATION (default 2m; docs/benchmarks.md has a 30-minute run): pods
## created throughout, the plugin SIGTERMed and SIGKILLed under a
## supervisor, containerd restarted twice, good and refused reloads, the
## profiles attacker (test/e2e/soak_test.go). Fails on a container with
## wrong values, one started bare after a SIGTERM, or a bare one no SIGKILL
## explains. Part of test-all; its failures are restated at the end of its
## output.
SOAK_DURATION ?= 2m
soak: build
	NRI_SYSCTL_SOAK=$(SOAK_DURATION) NRI_SYSCTL_CONTAINERD_VERSION=v2.4.2 $(GO) test -count=1 -timeout 90m -v -run '^TestSoak$$' ./test/e2e/

## bench-converge: with 200 pods running on containerd 2.4.2, the time from
## a reload to the last of them converged, and pod create+start while they
## converge against idle, in alternating blocks (docs/benchmarks.md).
## The per-pod cost against a minimal setns-and-write loop is the Go
## benchmark pair BenchmarkConvergeReload / BenchmarkConvergeMinimalLoop.
## BENCH_CONVERGE_TIMEOUT: raise it for a powered run (more blocks or pods).
BENCH_CONVERGE_TIMEOUT ?= 30m
bench-converge: build
	$(GO) test -run '^$$' -bench '^BenchmarkConverge' -benchtime 20x -count 3 ./plugin/
	NRI_SYSCTL_BENCH=1 NRI_SYSCTL_CONTAINERD_VERSION=v2.4.2 $(GO) test -count=1 -timeout $(BENCH_CONVERGE_TIMEOUT) -v -run '^TestBenchConvergeCreatePath$$' ./test/e2e/

## bench-churn: create and remove many pods under one plugin process; its
## memory along the way, and its per-pod state once every pod is gone.
bench-churn: build
	NRI_SYSCTL_BENCH=1 $(GO) test -count=1 -timeout 90m -v -run '^TestBenchChurn$$' ./test/e2e/
