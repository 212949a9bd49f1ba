#!/usr/bin/env bash
# Copyright The nri-sysctl Authors.
# SPDX-License-Identifier: Apache-2.0
# Prepare this machine for the VM test (test/vm, `make vm-test`):
#   - qemu-system-x86, qemu-utils and mmdebstrap from apt, when missing;
#   - containerd of each requested version, crictl and runc (for
#     user-namespace pods) through test/setup.sh, into the shared cache;
#   - kubelet v1.37.2 through test/setup.sh --kubelet (the same binary as
#     make e2e-k8s's, built once for both);
#   - runc v1.5.3 with seccomp (libseccomp-dev), for the kubelet comparison's
#     hostUsers: false pod: Debian's runc 1.1.5 has no id-mapped mounts, and
#     test/setup.sh's runc has no seccomp, which kubelet's pods ask for.
# Idempotent; everything built lands in ${NRI_SYSCTL_CACHE:-/var/cache/nri-sysctl-e2e}
# and is reused. The node image itself is built (and cached) by the test.
#
# Usage: test/vm/setup.sh [CONTAINERD_VERSION...]   (default: v2.4.2 v2.2.10)
set -euo pipefail
cd "$(dirname "$0")/../.."
export DEBIAN_FRONTEND=noninteractive

VERSIONS=("$@")
[[ ${#VERSIONS[@]} -gt 0 ]] || VERSIONS=(v2.4.2 v2.2.10)
APT_PACKAGES=(qemu-system-x86 qemu-utils mmdebstrap e2fsprogs libseccomp-dev pkg-config)
CACHE=${NRI_SYSCTL_CACHE:-/var/cache/nri-sysctl-e2e}
RUNC_VERSION=v1.5.3

log() { printf '[vm-setup %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

missing=()
for p in "${APT_PACKAGES[@]}"; do
	dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed' || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
	log "installing apt packages: ${missing[*]}"
	apt-get update -q </dev/null
	apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
else
	log "apt packages already installed: ${APT_PACKAGES[*]}"
fi

test/setup.sh --kubelet "${VERSIONS[@]}"

runc_dir="$CACHE/runc-$RUNC_VERSION-seccomp/bin"
if [[ -x $runc_dir/runc ]]; then
	log "runc $RUNC_VERSION with seccomp: reusing $runc_dir/runc"
else
	start=$(date +%s)
	mkdir -p "$runc_dir"
	tmp=$(mktemp -d "$CACHE/.build-runc-seccomp.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	GOBIN="$tmp" CGO_ENABLED=1 go install -tags seccomp "github.com/opencontainers/runc@$RUNC_VERSION" </dev/null
	mv -f "$tmp/runc" "$runc_dir/runc.new"
	mv -f "$runc_dir/runc.new" "$runc_dir/runc"
	log "runc $RUNC_VERSION with seccomp built in $(($(date +%s) - start))s: $("$runc_dir/runc" --version | tr '\n' ' ')"
fi
