#!/usr/bin/env bash
# Copyright The nri-sysctl Authors.
# SPDX-License-Identifier: Apache-2.0
# Lint the packages in DIR (make packages-lint) with the distributions' own
# tools: lintian on every .deb, failing on any error or warning (the
# overridden tags and their reasons are listed from
# hack/packages/files/lintian-overrides); rpm -K (digests) and rpm -qpl on
# each .rpm, failing unless each lists the binary, the units and the config.
set -euo pipefail
dir=${1:?usage: lint.sh DIR}
shopt -s nullglob
debs=("$dir"/*.deb)
rpms=("$dir"/*.rpm)
[[ ${#debs[@]} -gt 0 && ${#rpms[@]} -gt 0 ]] || { echo "lint.sh: no .deb or no .rpm in $dir (make packages)" >&2; exit 1; }
for t in lintian rpm; do
	command -v "$t" >/dev/null || { echo "lint.sh: $t is missing: test/setup.sh installs it" >&2; exit 1; }
done
# One lintian run for every .deb: most of its time is its start-up. The
# overrides are listed from the file: with --show-overrides, lintian 2.116
# exits 2 even on clean packages.
echo "=== lintian ${debs[*]}"
rc=0
out=$(lintian --fail-on error,warning "${debs[@]}" 2>&1) || rc=$?
# Root is how CI runs; lintian only warns about it.
grep -v '^running with root privileges' <<<"$out" || true
[[ $rc -eq 0 ]] || { echo "lint.sh: lintian fails (exit $rc) on ${debs[*]}" >&2; exit 1; }
echo "lintian overrides, each with its reason ($(dirname "$0")/files/lintian-overrides):"
grep -v '^$' "$(dirname "$0")/files/lintian-overrides"
for r in "${rpms[@]}"; do
	echo "=== rpm -K $r"
	rpm -K "$r"
	echo "=== rpm -qpl $r"
	list=$(rpm -qpl "$r")
	echo "$list"
	for want in /usr/bin/nri-sysctl /usr/lib/systemd/system/nri-sysctl.service /etc/nri-sysctl/config.yaml; do
		grep -qx "$want" <<<"$list" || { echo "lint.sh: $r has no $want" >&2; exit 1; }
	done
	echo "=== rpm -qpc $r (config files)"
	rpm -qpc "$r"
done
