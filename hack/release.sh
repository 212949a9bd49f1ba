#!/usr/bin/env bash
# Copyright The nri-sysctl Authors.
# SPDX-License-Identifier: Apache-2.0
# make release: gather what make image, packages, chart and notices built
# into one directory, write SHA256SUMS, and check it with sha256sum -c.
# Each artifact's name carries the version, so that two releases never
# share a file name. The release notes are CHANGELOG.md's section for the
# version: a version without one is refused, so a release never ships
# without saying what changed.
#
# Usage: hack/release.sh DIR VERSION OCI_TAG IMAGE_TAR CHART_TGZ PACKAGES_DIR ARCH=BINARY...
# (the Makefile passes them; docs/releasing.md).
set -euo pipefail

[[ $# -ge 7 ]] || { echo "usage: $0 DIR VERSION OCI_TAG IMAGE_TAR CHART_TGZ PACKAGES_DIR ARCH=BINARY..." >&2; exit 2; }
dir=$1 version=$2 oci_tag=$3 image_tar=$4 chart_tgz=$5 packages_dir=$6
shift 6

fail() { echo "make release: $*" >&2; exit 1; }

# release_notes prints CHANGELOG.md's section for the version: from its
# "## [VERSION]" heading to the next "## " heading.
release_notes() {
	awk -v want="## [$version]" '
		index($0, want) == 1 { found = 1; print; next }
		found && /^## / { exit }
		found { print }
		END { if (!found) exit 1 }' CHANGELOG.md
}

notes=$(release_notes) || fail "CHANGELOG.md has no section \"## [$version]\": add one (docs/releasing.md, step 1)"
for f in "$image_tar" "$chart_tgz" LICENSE bin/THIRD_PARTY_NOTICES; do
	[[ -f $f ]] || fail "$f is missing (make image, chart and notices build it)"
done
shopt -s nullglob
packages=("$packages_dir"/*.deb "$packages_dir"/*.rpm)
[[ ${#packages[@]} -gt 0 ]] || fail "no .deb or .rpm in $packages_dir (make packages)"

# sbom ARCH: the SBOM make notices-make writes for ARCH's binary.
sbom() { echo "bin/sbom/nri-sysctl-linux-$1.cdx.json"; }

# Everything is checked before the directory is touched: a refused
# release leaves no half-written one behind.
for pair in "$@"; do
	arch=${pair%%=*} binary=${pair#*=}
	[[ -f $binary ]] || fail "$binary (linux/$arch) is missing"
	[[ -f $(sbom "$arch") ]] || fail "$(sbom "$arch") is missing (make notices-make writes it)"
done

rm -rf "$dir"
mkdir -p "$dir"
for pair in "$@"; do
	arch=${pair%%=*} binary=${pair#*=}
	install -m 0755 "$binary" "$dir/nri-sysctl-$version-linux-$arch"
	install -m 0644 "$(sbom "$arch")" "$dir/nri-sysctl-$version-linux-$arch.cdx.json"
done
install -m 0644 "${packages[@]}" "$dir/"
install -m 0644 "$image_tar" "$dir/nri-sysctl-image-$oci_tag.oci.tar"
install -m 0644 "$chart_tgz" "$dir/"
install -m 0644 LICENSE "$dir/LICENSE"
install -m 0644 bin/THIRD_PARTY_NOTICES "$dir/THIRD_PARTY_NOTICES"
printf '%s\n' "$notes" >"$dir/RELEASE_NOTES.md"

# Sorted by name, so that the file itself is the same for the same artifacts.
(cd "$dir" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
(cd "$dir" && sha256sum --quiet -c SHA256SUMS) || fail "sha256sum -c fails in $dir"
# With COSIGN_KEY (and COSIGN, the binary): SHA256SUMS.sig beside it.
if [[ -n ${COSIGN_KEY:-} ]]; then
	"$(dirname "$0")/sign-sums.sh" "${COSIGN:?COSIGN: the cosign binary, to sign with COSIGN_KEY}" "$dir"
fi
echo "make release: $(wc -l <"$dir/SHA256SUMS") artifacts of $version in $dir, SHA256SUMS checked:"
cat "$dir/SHA256SUMS"
