#!/usr/bin/env bash
# Prepare this machine for the nri-sysctl end-to-end tests (test/e2e).
#
# Usage: test/setup.sh [CONTAINERD_VERSION...]      (default: v2.4.2)
#
# Installs, only when missing:
#   - Debian packages: runc, containernetworking-plugins, busybox-static, iproute2,
#     systemd (systemd-analyze, for test/install)
#   - containerd, containerd-shim-runc-v2 and ctr of each requested version,
#     built from the Go module proxy into $CACHE/containerd-<version>/bin
#   - crictl into $CACHE/crictl-<CRICTL_VERSION>/bin
#   - runc $USERNS_RUNC_VERSION into $CACHE/runc-<version>/bin, for user-namespace pods
#   - helm $HELM_VERSION into $CACHE/helm-<version>/bin (the chart checks, test/chart)
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
# helm: the chart checks (test/chart).
HELM_VERSION=${NRI_SYSCTL_HELM_VERSION:-v3.22.0}
BUILD_TAGS="no_btrfs no_devmapper no_zfs"
APT_PACKAGES=(runc containernetworking-plugins busybox-static iproute2 systemd)

export DEBIAN_FRONTEND=noninteractive

if [[ $# -gt 0 ]]; then
	VERSIONS=("$@")
else
	VERSIONS=(v2.4.2)
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
# move them into place only when all three are built.
build_containerd() {
	local v=$1 bin="$CACHE/containerd-$1/bin" tmp cmd mod
	mkdir -p "$bin"
	tmp=$(mktemp -d "$CACHE/.build-containerd-$v.XXXXXX")
	TMPDIRS+=("$tmp")

	if version_ge "$v" v2.2.0; then
		# containerd >= 2.2 has no exclude/replace directives: go install works.
		GOBIN="$tmp/out" go install -tags "$BUILD_TAGS" \
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
			# One build for the three commands: with -o DIR/ go writes each
			# main package to DIR/<name>.
			go build -tags "$BUILD_TAGS" -o "$tmp/out/" \
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
# binary behind.
go_install_tool() {
	local dir=$1 name=$2 pkg=$3 tmp
	shift 3
	mkdir -p "$dir/bin"
	tmp=$(mktemp -d "$CACHE/.build-$name.XXXXXX")
	TMPDIRS+=("$tmp")
	env GOBIN="$tmp" "$@" go install "$pkg" </dev/null
	mv -f "$tmp/$name" "$dir/bin/$name.new"
	mv -f "$dir/bin/$name.new" "$dir/bin/$name"
	rm -rf "$tmp"
	"$dir/bin/$name" --version | head -1
}

build_crictl() {
	go_install_tool "$CACHE/crictl-$CRICTL_VERSION" crictl "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
}

# runc's nsenter is C: built with cgo, without seccomp (no libseccomp needed).
build_userns_runc() {
	go_install_tool "$CACHE/runc-$USERNS_RUNC_VERSION" runc "github.com/opencontainers/runc@$USERNS_RUNC_VERSION" CGO_ENABLED=1
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

total_start=$(date +%s)
mkdir -p "$CACHE"

step "apt packages" install_packages

for v in "${VERSIONS[@]}"; do
	[[ $v == v* ]] || v="v$v"
	if have_containerd "$CACHE/containerd-$v/bin"; then
		log "containerd $v: reusing $CACHE/containerd-$v/bin"
	else
		step "build containerd $v" build_containerd "$v"
	fi
done

if [[ -x $CACHE/crictl-$CRICTL_VERSION/bin/crictl ]]; then
	log "crictl $CRICTL_VERSION: reusing $CACHE/crictl-$CRICTL_VERSION/bin/crictl"
else
	step "build crictl $CRICTL_VERSION" build_crictl
fi

if [[ -x $CACHE/runc-$USERNS_RUNC_VERSION/bin/runc ]]; then
	log "runc $USERNS_RUNC_VERSION (user-namespace pods): reusing $CACHE/runc-$USERNS_RUNC_VERSION/bin/runc"
else
	step "build runc $USERNS_RUNC_VERSION (user-namespace pods)" build_userns_runc
fi

if [[ -x $CACHE/helm-$HELM_VERSION/bin/helm ]]; then
	log "helm $HELM_VERSION: reusing $CACHE/helm-$HELM_VERSION/bin/helm"
else
	step "build helm $HELM_VERSION" build_helm
fi

log "all done in $(($(date +%s) - total_start))s; cache: $CACHE"
