#!/usr/bin/env bash
# Copyright The nri-sysctl Authors.
# SPDX-License-Identifier: Apache-2.0
# Prepare this machine for the nri-sysctl end-to-end tests (test/e2e).
#
# Usage: test/setup.sh [--k8s] [--kubelet] [--demo] [CONTAINERD_VERSION...]      (default: v2.4.2)
#        test/setup.sh --k8s-only
#
# Installs, only when missing:
#   - Debian packages: runc, containernetworking-plugins, busybox-static, iproute2,
#     systemd (systemd-analyze, for test/install); qemu-user-static (make
#     arch-test runs the arm64 binary under it) and lintian and rpm (make
#     packages-lint: lintian on the .debs, rpm -K/-qpl on the .rpms), not with --demo
#   - containerd, containerd-shim-runc-v2 and ctr of each requested version,
#     built from the Go module proxy into $CACHE/containerd-<version>/bin
#   - crictl into $CACHE/crictl-<CRICTL_VERSION>/bin
#   - runc $USERNS_RUNC_VERSION into $CACHE/runc-<version>/bin, for user-namespace pods
#   - helm $HELM_VERSION into $CACHE/helm-<version>/bin (the chart checks, test/chart)
#   - with --k8s (make e2e-k8s): the single-node Kubernetes of the e2e-k8s test: kubelet, kube-apiserver,
#     kube-controller-manager and kube-scheduler $K8S_VERSION from one throwaway
#     module into $CACHE/kubernetes-<version>/bin, etcd $ETCD_VERSION into
#     $CACHE/etcd-<version>/bin; the local OCI registry the two-node test
#     pulls from (the CNCF distribution registry $REGISTRY_VERSION, filesystem storage only) into
#     $CACHE/registry-<version>-filesystem/bin, and crane $CRANE_VERSION (pushes the
#     image index to it; make publish) into $CACHE/crane-<version>/bin, and
#     cosign $COSIGN_VERSION (signs there and verifies) into $CACHE/cosign-<version>/bin
#   - with --kubelet (make vm-test): only that kubelet, the same binary
#   - with --demo (make demo): nothing the demo does not use, so neither
#     the user-namespace runc nor helm
#   - with --k8s-only: what --k8s adds (Kubernetes, etcd, the registry, crane, cosign) and nothing else,
#     not even apt packages; with --kubelet-only: only the kubelet. make
#     test-all runs each in the background (test/test-all.sh)
# where CACHE=${NRI_SYSCTL_CACHE:-/var/cache/nri-sysctl-e2e}.
#
# Idempotent: a second run only checks and reuses. Needs root. Works without a
# terminal or stdin (CI=true).
set -euo pipefail

CACHE=${NRI_SYSCTL_CACHE:-/var/cache/nri-sysctl-e2e}
CRICTL_VERSION=${NRI_SYSCTL_CRICTL_VERSION:-v1.37.0}
# A runc newer than Debian 12's 1.1.5, for user-namespace pods only: they
# need id-mapped mounts. Built with cgo (runc's nsenter is C), no seccomp.
USERNS_RUNC_VERSION=v1.5.3
# make e2e-k8s: a single-node cluster and the helm that installs the chart.
K8S_VERSION=${NRI_SYSCTL_K8S_VERSION:-v1.37.2}
ETCD_VERSION=${NRI_SYSCTL_ETCD_VERSION:-v3.7.3}
HELM_VERSION=${NRI_SYSCTL_HELM_VERSION:-v3.22.0}
REGISTRY_VERSION=${NRI_SYSCTL_REGISTRY_VERSION:-v3.1.2}
CRANE_VERSION=${NRI_SYSCTL_CRANE_VERSION:-v0.22.1}
COSIGN_VERSION=${NRI_SYSCTL_COSIGN_VERSION:-v2.6.5}
BUILD_TAGS="no_btrfs no_devmapper no_zfs"
# Test tools carry no symbol table or DWARF: linking containerd's three
# binaries took 7.8 s with them and 3.0 s without, on each of six lines.
STRIP="-s -w"
APT_PACKAGES=(runc containernetworking-plugins busybox-static iproute2 systemd)

export DEBIAN_FRONTEND=noninteractive

WANT_K8S=
WANT_KUBELET=
DEMO_ONLY=
K8S_ONLY=
VERSIONS=()
for arg in "$@"; do
	case $arg in
	--k8s) WANT_K8S=1 ;;
	--kubelet) WANT_KUBELET=1 ;;
	--demo) DEMO_ONLY=1 ;;
	--k8s-only) K8S_ONLY=1 ;;
	--kubelet-only) K8S_ONLY=kubelet ;;
	*) VERSIONS+=("$arg") ;;
	esac
done
if [[ -n $K8S_ONLY && $# -ne 1 ]]; then
	echo "usage: $0 --k8s-only | --kubelet-only (alone: it builds what make e2e-k8s or the kubelet make vm-test needs, nothing else)" >&2
	exit 2
fi
if [[ ${#VERSIONS[@]} -eq 0 ]]; then
	VERSIONS=(v2.4.2)
fi
# make arch-test: the other architecture's binary under qemu user emulation;
# make packages-lint: lintian and rpm.
if [[ -z $DEMO_ONLY ]]; then
	APT_PACKAGES+=(qemu-user-static lintian rpm)
fi

log() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Temporary build dirs, removed on any exit (a killed build leaves no half binary
# in the cache: binaries are moved into place only once all are built).
TMPDIRS=()
cleanup_tmp() { if [[ ${#TMPDIRS[@]} -gt 0 ]]; then rm -rf "${TMPDIRS[@]}"; fi; }
trap cleanup_tmp EXIT

# step NAME CMD...: run CMD and print how long it took.
step() {
	local name=$1 start end
	shift
	start=$(date +%s)
	log "start: $name"
	"$@"
	end=$(date +%s)
	log "done:  $name ($((end - start))s)"
}

[[ $(id -u) -eq 0 ]] || die "must run as root (containerd, runc and CNI need it)"
command -v go >/dev/null || die "go is not in PATH"

install_packages() {
	local missing=() p
	for p in "${APT_PACKAGES[@]}"; do
		if ! dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed'; then
			missing+=("$p")
		fi
	done
	if [[ ${#missing[@]} -eq 0 ]]; then
		log "apt packages already installed: ${APT_PACKAGES[*]}"
		return
	fi
	log "installing apt packages: ${missing[*]}"
	apt-get update -q </dev/null
	apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
}

# version_ge A B: true when version A >= B (both vX.Y.Z).
version_ge() {
	[[ "$(printf '%s\n%s\n' "${1#v}" "${2#v}" | sort -V | head -n1)" == "${2#v}" ]]
}

have_containerd() {
	local bin=$1
	[[ -x $bin/containerd && -x $bin/containerd-shim-runc-v2 && -x $bin/ctr ]]
}

# build_containerd VERSION: build the three binaries into a temporary dir and
# move them into place only when all three are built. VERSION+nri.vX.Y.Z
# builds that release with a newer NRI (a throwaway module requiring it:
# not a release, for what a later release will vendor).
build_containerd() {
	local v=$1 bin="$CACHE/containerd-$1/bin" tmp cmd mod nri=""
	if [[ $v == *+nri.* ]]; then
		nri=${v#*+nri.}
		v=${v%%+nri.*}
	fi
	mkdir -p "$bin"
	tmp=$(mktemp -d "$CACHE/.build-containerd-$1.XXXXXX")
	TMPDIRS+=("$tmp")

	if [[ -z $nri ]] && version_ge "$v" v2.2.0; then
		# containerd >= 2.2 has no exclude/replace directives: go install works.
		GOBIN="$tmp/out" go install -tags "$BUILD_TAGS" -ldflags "$STRIP" \
			"github.com/containerd/containerd/v2/cmd/containerd@$v" \
			"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$v" \
			"github.com/containerd/containerd/v2/cmd/ctr@$v" </dev/null
	else
		# Older versions refuse `go install pkg@version` because their go.mod
		# has exclude directives. Build them as dependencies of a throwaway
		# module instead.
		if version_ge "$v" v2.0.0; then
			mod=github.com/containerd/containerd/v2
		else
			mod=github.com/containerd/containerd
		fi
		mkdir -p "$tmp/mod" "$tmp/out"
		printf 'module tmpbuild\n\ngo 1.22\n' >"$tmp/mod/go.mod"
		(
			cd "$tmp/mod"
			go get "$mod/cmd/containerd@$v" "$mod/cmd/containerd-shim-runc-v2@$v" "$mod/cmd/ctr@$v" </dev/null
			if [[ -n $nri ]]; then
				go get "github.com/containerd/nri@$nri" </dev/null
			fi
			# One build for the three commands: with -o DIR/ go writes each
			# main package to DIR/<name>.
			go build -tags "$BUILD_TAGS" -ldflags "$STRIP" -o "$tmp/out/" \
				"$mod/cmd/containerd" "$mod/cmd/containerd-shim-runc-v2" "$mod/cmd/ctr" </dev/null
		)
	fi
	for cmd in containerd containerd-shim-runc-v2 ctr; do
		[[ -x $tmp/out/$cmd ]] || die "build of $cmd $v produced no binary"
	done
	for cmd in containerd containerd-shim-runc-v2 ctr; do
		mv -f "$tmp/out/$cmd" "$bin/$cmd.new"
	done
	for cmd in containerd containerd-shim-runc-v2 ctr; do
		mv -f "$bin/$cmd.new" "$bin/$cmd"
	done
	rm -rf "$tmp"
	"$bin/containerd" --version
}

# go_install_tool DIR BINARY PACKAGE@VERSION [ENV...]: go install into a
# temp dir, then move into DIR/bin, so a killed build never leaves half a
# binary behind. TOOL_VERSION_ARG is how the tool prints its version
# (--version, or a subcommand for crane and cosign).
go_install_tool() {
	local dir=$1 name=$2 pkg=$3 tmp
	shift 3
	mkdir -p "$dir/bin"
	tmp=$(mktemp -d "$CACHE/.build-$name.XXXXXX")
	TMPDIRS+=("$tmp")
	env GOBIN="$tmp" "$@" go install -ldflags "$STRIP" "$pkg" </dev/null
	mv -f "$tmp/$name" "$dir/bin/$name.new"
	mv -f "$dir/bin/$name.new" "$dir/bin/$name"
	rm -rf "$tmp"
	# The first line naming a version; awk reads to the end, since an early
	# exit (head) is SIGPIPE under pipefail, and the tool's own status counts.
	"$dir/bin/$name" "${TOOL_VERSION_ARG:---version}" | awk 'NF && first == "" { first = $0 } /[0-9]+\.[0-9]+\.[0-9]+/ && !n++ { print } END { if (!n) print first }'
}

build_crictl() {
	go_install_tool "$CACHE/crictl-$CRICTL_VERSION" crictl "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
}

# The registry, crane and cosign, for make e2e-k8s's two-node test (and
# make publish).
# The registry is the upstream command with the filesystem storage driver
# only: cmd/registry also links the Azure, GCS, S3 and CloudFront drivers,
# which no test uses, and took twice as long to build (102 s against 53 s
# here, one after the other, each with an empty build cache); in make
# test-all its build was the one make e2e-k8s waited for.
build_registry() {
	local mod=github.com/distribution/distribution/v3
	CGO_ENABLED=0 build_main_module "$CACHE/registry-$REGISTRY_VERSION-filesystem" registry \
		"$mod/registry@$REGISTRY_VERSION" "$mod/registry/storage/driver/filesystem@$REGISTRY_VERSION" <<'GO'
package main

import (
	"os"

	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	if err := registry.RootCmd.Execute(); err != nil {
		os.Exit(1)
	}
}
GO
}
build_crane() {
	TOOL_VERSION_ARG=version go_install_tool "$CACHE/crane-$CRANE_VERSION" crane "github.com/google/go-containerregistry/cmd/crane@$CRANE_VERSION" CGO_ENABLED=0
}
build_cosign() {
	TOOL_VERSION_ARG=version go_install_tool "$CACHE/cosign-$COSIGN_VERSION" cosign "github.com/sigstore/cosign/v2/cmd/cosign@$COSIGN_VERSION" CGO_ENABLED=0
}

# runc's nsenter is C: built with cgo, without seccomp (no libseccomp needed).
build_userns_runc() {
	go_install_tool "$CACHE/runc-$USERNS_RUNC_VERSION" runc "github.com/opencontainers/runc@$USERNS_RUNC_VERSION" CGO_ENABLED=1
}

# k8s_ldflags: the version the binaries report (helm checks kubeVersion
# against the API server's); built from a module they would say v0.0.0-master.
k8s_ldflags() {
	local v=${K8S_VERSION#v} major minor
	major=${v%%.*}
	minor=${v#*.}
	minor=${minor%%.*}
	printf '%s' "-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor"
}

# build_kubernetes NAME...: build the named Kubernetes commands (kubelet,
# kube-apiserver, kube-controller-manager, kube-scheduler) from one throwaway
# module that requires k8s.io/kubernetes and replaces each staging module
# (kubernetes' own `=> ./staging/...` lines) by its published v0.X.Y; then
# move them into $CACHE/kubernetes-<version>/bin together.
build_kubernetes() {
	local bin="$CACHE/kubernetes-$K8S_VERSION/bin" tmp gomod staging name pkgs=()
	mkdir -p "$bin"
	tmp=$(mktemp -d "$CACHE/.build-kubernetes-$K8S_VERSION.XXXXXX")
	TMPDIRS+=("$tmp")
	mkdir -p "$tmp/mod" "$tmp/out"
	gomod=$(cd "$tmp/mod" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" </dev/null | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
	[[ -f $gomod ]] || die "no go.mod for k8s.io/kubernetes@$K8S_VERSION from the module proxy"
	staging="v0.${K8S_VERSION#v1.}"
	{
		printf 'module k8sbuild\n\ngo 1.26\n\nrequire k8s.io/kubernetes %s\n\n' "$K8S_VERSION"
		sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/.*#replace \1 => \1 '"$staging"'#p' "$gomod"
	} >"$tmp/mod/go.mod"
	[[ $(grep -c '^replace' "$tmp/mod/go.mod") -gt 20 ]] || die "found no staging replace lines in $gomod"
	for name in "$@"; do
		mkdir -p "$tmp/mod/cmd/$name"
		case $name in
		kubelet) printf 'package main\n\nimport (\n\t"context"\n\t"os"\n\n\t"k8s.io/component-base/cli"\n\t"k8s.io/kubernetes/cmd/kubelet/app"\n)\n\nfunc main() { os.Exit(cli.Run(app.NewKubeletCommand(context.Background()))) }\n' ;;
		kube-apiserver) printf 'package main\n\nimport (\n\t"os"\n\n\t"k8s.io/component-base/cli"\n\t"k8s.io/kubernetes/cmd/kube-apiserver/app"\n)\n\nfunc main() { os.Exit(cli.Run(app.NewAPIServerCommand())) }\n' ;;
		kube-controller-manager) printf 'package main\n\nimport (\n\t"os"\n\n\t"k8s.io/component-base/cli"\n\t"k8s.io/kubernetes/cmd/kube-controller-manager/app"\n)\n\nfunc main() { os.Exit(cli.Run(app.NewControllerManagerCommand())) }\n' ;;
		kube-scheduler) printf 'package main\n\nimport (\n\t"os"\n\n\t"k8s.io/component-base/cli"\n\t"k8s.io/kubernetes/cmd/kube-scheduler/app"\n)\n\nfunc main() { os.Exit(cli.Run(app.NewSchedulerCommand())) }\n' ;;
		*) die "build_kubernetes: unknown command $name" ;;
		esac >"$tmp/mod/cmd/$name/main.go"
		pkgs+=("./cmd/$name")
	done
	(
		cd "$tmp/mod"
		go mod tidy </dev/null
		# One build for every command: with -o DIR/ go writes each main
		# package to DIR/<name>, sharing the compiled packages.
		go build -trimpath -ldflags "$(k8s_ldflags)" -o "$tmp/out/" "${pkgs[@]}" </dev/null
	)
	for name in "$@"; do
		[[ -x $tmp/out/$name ]] || die "build of $name $K8S_VERSION produced no binary"
	done
	for name in "$@"; do
		mv -f "$tmp/out/$name" "$bin/$name.new"
	done
	for name in "$@"; do
		mv -f "$bin/$name.new" "$bin/$name"
	done
	rm -rf "$tmp"
	"$bin/$1" --version
}

# build_main_module DIR NAME PACKAGE@VERSION...: NAME into DIR/bin, built
# from a throwaway module whose main.go is read from stdin and which needs
# the PACKAGEs (go get), so that a tool is built with only the parts the
# tests use; the first line of its --version is printed.
build_main_module() {
	local dir=$1 name=$2 tmp
	shift 2
	mkdir -p "$dir/bin"
	tmp=$(mktemp -d "$CACHE/.build-$name.XXXXXX")
	TMPDIRS+=("$tmp")
	mkdir -p "$tmp/mod"
	printf 'module %sbuild\n\ngo 1.26\n' "$name" >"$tmp/mod/go.mod"
	cat >"$tmp/mod/main.go"
	(
		cd "$tmp/mod"
		go get "$@" </dev/null
		go build -trimpath -ldflags "$STRIP" -o "$tmp/$name" . </dev/null
	)
	mv -f "$tmp/$name" "$dir/bin/$name.new"
	mv -f "$dir/bin/$name.new" "$dir/bin/$name"
	rm -rf "$tmp"
	"$dir/bin/$name" --version | sed -n 1p
}

# build_etcd: etcd from a throwaway module calling etcdmain.Main.
build_etcd() {
	build_main_module "$CACHE/etcd-$ETCD_VERSION" etcd "go.etcd.io/etcd/server/v3/etcdmain@$ETCD_VERSION" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
}

# build_helm: go install, with the version helm's own Makefile stamps in.
build_helm() {
	local major=${HELM_VERSION%%.*} dir="$CACHE/helm-$HELM_VERSION" tmp
	mkdir -p "$dir/bin"
	tmp=$(mktemp -d "$CACHE/.build-helm.XXXXXX")
	TMPDIRS+=("$tmp")
	GOBIN="$tmp" go install -ldflags "-s -w -X helm.sh/helm/$major/internal/version.version=$HELM_VERSION" \
		"helm.sh/helm/$major/cmd/helm@$HELM_VERSION" </dev/null
	mv -f "$tmp/helm" "$dir/bin/helm.new"
	mv -f "$dir/bin/helm.new" "$dir/bin/helm"
	rm -rf "$tmp"
	"$dir/bin/helm" version --short
}

# reuse_or_build WHAT BINARY FUNCTION: the step FUNCTION ("build WHAT"),
# unless BINARY is already there.
reuse_or_build() {
	if [[ -x $2 ]]; then
		log "$1: reusing $2"
	else
		step "build $1" "$3"
	fi
}

# setup_kubernetes NAME...: the named Kubernetes commands, each only when missing.
setup_kubernetes() {
	local bin="$CACHE/kubernetes-$K8S_VERSION/bin" name want=()
	for name in "$@"; do
		if [[ -x $bin/$name ]]; then
			log "$name $K8S_VERSION: reusing $bin/$name"
		else
			want+=("$name")
		fi
	done
	if [[ ${#want[@]} -gt 0 ]]; then
		step "build ${want[*]} $K8S_VERSION" build_kubernetes "${want[@]}"
	fi
}

# setup_k8s: what make e2e-k8s needs, each part only when missing.
setup_k8s() {
	setup_kubernetes kube-apiserver kube-controller-manager kube-scheduler kubelet
	reuse_or_build "etcd $ETCD_VERSION" "$CACHE/etcd-$ETCD_VERSION/bin/etcd" build_etcd
	reuse_or_build "the registry $REGISTRY_VERSION" "$CACHE/registry-$REGISTRY_VERSION-filesystem/bin/registry" build_registry
	reuse_or_build "crane $CRANE_VERSION" "$CACHE/crane-$CRANE_VERSION/bin/crane" build_crane
	reuse_or_build "cosign $COSIGN_VERSION" "$CACHE/cosign-$COSIGN_VERSION/bin/cosign" build_cosign
}

total_start=$(date +%s)
mkdir -p "$CACHE"

if [[ $K8S_ONLY == kubelet ]]; then
	setup_kubernetes kubelet
	log "all done in $(($(date +%s) - total_start))s (the kubelet only); cache: $CACHE"
	exit 0
elif [[ -n $K8S_ONLY ]]; then
	setup_k8s
	log "all done in $(($(date +%s) - total_start))s (Kubernetes, etcd, the registry, crane and cosign only); cache: $CACHE"
	exit 0
fi

step "apt packages" install_packages

for v in "${VERSIONS[@]}"; do
	[[ $v == v* ]] || v="v$v"
	if have_containerd "$CACHE/containerd-$v/bin"; then
		log "containerd $v: reusing $CACHE/containerd-$v/bin"
	else
		step "build containerd $v" build_containerd "$v"
	fi
done

reuse_or_build "crictl $CRICTL_VERSION" "$CACHE/crictl-$CRICTL_VERSION/bin/crictl" build_crictl

if [[ -n $DEMO_ONLY ]]; then
	log "all done in $(($(date +%s) - total_start))s (what make demo needs); cache: $CACHE"
	exit 0
fi

reuse_or_build "runc $USERNS_RUNC_VERSION (user-namespace pods)" "$CACHE/runc-$USERNS_RUNC_VERSION/bin/runc" build_userns_runc

reuse_or_build "helm $HELM_VERSION" "$CACHE/helm-$HELM_VERSION/bin/helm" build_helm

if [[ -n $WANT_K8S ]]; then
	setup_k8s
elif [[ -n $WANT_KUBELET ]]; then
	setup_kubernetes kubelet
fi

log "all done in $(($(date +%s) - total_start))s; cache: $CACHE"
