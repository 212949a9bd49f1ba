#!/usr/bin/env bash
# Copyright The nri-sysctl Authors.
# SPDX-License-Identifier: Apache-2.0
# Ask the Go module proxy, by number, for releases newer than those the
# suite tests, and print them: the next patches of every containerd line
# given, the next minor line after the newest, and the next patches of the
# tools test/setup.sh pins. By number because the proxy's version list is
# incomplete (it has omitted patches that resolve when asked for by name).
# Information only: it exits 0 whatever it finds, and says when the proxy
# cannot be asked.
#
# Usage: hack/newer-patches.sh CONTAINERD_VERSION...
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# Each tool test/setup.sh pins: its name, its variable there, its module.
TOOLS=(
	"crictl CRICTL_VERSION sigs.k8s.io/cri-tools"
	"runc USERNS_RUNC_VERSION github.com/opencontainers/runc"
	"kubernetes K8S_VERSION k8s.io/kubernetes"
	"etcd ETCD_VERSION go.etcd.io/etcd/server/v3"
	"helm HELM_VERSION helm.sh/helm/v3"
)
MAX_PATCHES=30 # a line that moved this far since the last refresh is a finding already

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 0

# resolves MODULE VERSION: whether the proxy serves that version.
resolves() { GO111MODULE=on GOFLAGS=-mod=mod go list -m "$1@$2" >/dev/null 2>&1; }

# containerd_module VERSION: the module path of a containerd release.
containerd_module() {
	local major=${1#v}
	major=${major%%.*}
	if [[ $major -ge 2 ]]; then
		echo "github.com/containerd/containerd/v$major"
	else
		echo github.com/containerd/containerd
	fi
}

found=0
# newer_patches NAME MODULE VERSION: print every patch after VERSION that resolves.
newer_patches() {
	local name=$1 module=$2 v=$3 major minor patch next=() n
	IFS=. read -r major minor patch <<<"${v#v}"
	patch=${patch%%[-+]*}
	for ((n = patch + 1; n <= patch + MAX_PATCHES; n++)); do
		resolves "$module" "v$major.$minor.$n" || break
		next+=("v$major.$minor.$n")
	done
	if [[ ${#next[@]} -gt 0 ]]; then
		printf '%-12s %-8s newer: %s\n' "$name" "$v" "${next[*]}"
		found=1
	else
		printf '%-12s %-8s the newest patch\n' "$name" "$v"
	fi
}

if ! resolves github.com/containerd/containerd/v2 "${1:-v2.4.2}"; then
	echo "newer-patches: the Go module proxy ($(go env GOPROXY)) does not answer; nothing checked"
	exit 0
fi

newest=""
for v in "$@"; do
	newer_patches containerd "$(containerd_module "$v")" "$v"
	if [[ -z $newest ]] || [[ $(printf '%s\n%s\n' "${newest#v}" "${v#v}" | sort -V | tail -1) == "${v#v}" ]]; then
		newest=$v
	fi
done
if [[ -n $newest ]]; then
	IFS=. read -r major minor _ <<<"${newest#v}"
	for next in "v$major.$((minor + 1)).0" "v$((major + 1)).0.0"; do
		if resolves "$(containerd_module "$next")" "$next"; then
			printf '%-12s %-8s a new line: %s\n' containerd "$newest" "$next"
			found=1
		fi
	done
fi

for tool in "${TOOLS[@]}"; do
	read -r name var module <<<"$tool"
	v=$(sed -n "s/^$var=\(\${[A-Z0-9_]*:-\)\{0,1\}\(v[0-9.]*\).*/\2/p" "$root/test/setup.sh" | head -1)
	if [[ -z $v ]]; then
		echo "newer-patches: test/setup.sh has no $var; skipping $module"
		continue
	fi
	newer_patches "$name" "$module" "$v"
done

if [[ $found -eq 1 ]]; then
	echo "Newer releases above: refreshing the suite to them is a decision (docs/testing.md, 'Refreshing the matrix')."
fi
exit 0
