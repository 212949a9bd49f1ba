#!/usr/bin/env bash
# Lint the packages in DIR (make packages-lint) with the distributions' own
# tools: lintian on each .deb, failing on any error or warning (overridden
# tags are printed, with the package's reasons in
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
for deb in "${debs[@]}"; do
	echo "=== lintian $deb"
	# Root is how CI runs; lintian only warns about it.
	lintian --fail-on error,warning --show-overrides "$deb" 2>&1 | grep -v '^running with root privileges' || true
	lintian --fail-on error,warning "$deb" >/dev/null 2>&1 || { echo "lint.sh: lintian fails $deb" >&2; exit 1; }
done
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
