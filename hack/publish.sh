#!/usr/bin/env bash
# Copyright The nri-sysctl Authors.
# SPDX-License-Identifier: Apache-2.0
# make publish: push the image archive's whole index (linux/amd64 and
# linux/arm64) to REGISTRY/nri-sysctl:OCI_TAG and the chart package to
# oci://REGISTRY/charts, then read both back by tag and check that the
# registry serves what was built: the index's digest, the chart's version.
# A node pulling the tag then gets its own platform's image from the index.
#
# With COSIGN_KEY (a cosign private key; COSIGN_PASSWORD its password) and
# COSIGN (the binary), it then signs the image index and the chart by
# digest with that key, the signatures stored beside them in the registry
# (cosign's tag scheme), with no transparency-log upload and no signing
# config: it needs nothing but the registry (docs/releasing.md says how a
# real release would sign, and hack/verify-published.sh how a user
# verifies). COSIGN_KEY is a key file or a KMS URI (awskms://... and so on).
# With SBOM_DIR too (where make notices-make writes
# nri-sysctl-linux-<arch>.cdx.json), it attaches each architecture's SBOM
# to that platform's image in the index (every platform the index holds),
# as a signed CycloneDX attestation (cosign attest --type cyclonedx
# --replace: publishing again leaves one; stored by cosign's tag scheme,
# since a registry may have no referrers API).
#
# Usage: hack/publish.sh REGISTRY OCI_TAG IMAGE_TAR CHART_TGZ CRANE HELM [--plain-http]
# (the Makefile passes them; make e2e-k8s's two-node test runs it against
# its local registry with --plain-http, in a network namespace with only
# loopback). Credentials are the user's: crane auth login and helm
# registry login beforehand.
set -euo pipefail

[[ $# -ge 6 && $# -le 7 ]] || { echo "usage: $0 REGISTRY OCI_TAG IMAGE_TAR CHART_TGZ CRANE HELM [--plain-http]" >&2; exit 2; }
registry=${1%/} tag=$2 image_tar=$3 chart_tgz=$4 crane=$5 helm=$6 plain=${7:-}
fail() { echo "make publish: $*" >&2; exit 1; }
[[ -z $plain || $plain == --plain-http ]] || fail "the seventh argument is --plain-http or nothing, not $plain"
[[ -n $registry && $registry != *://* ]] || fail "REGISTRY=$registry: want host[:port][/path], without a scheme"
for f in "$image_tar" "$chart_tgz"; do
	[[ -f $f ]] || fail "$f is missing (make image and make chart build it)"
done

crane_flags=() helm_flags=() cosign_flags=()
if [[ -n $plain ]]; then
	crane_flags=(--insecure)
	helm_flags=(--plain-http)
	cosign_flags=(--allow-http-registry --allow-insecure-registry)
fi
if [[ -n ${COSIGN_KEY:-} ]]; then
	[[ $COSIGN_KEY == *://* || -f $COSIGN_KEY ]] || fail "COSIGN_KEY=$COSIGN_KEY: no such file (or a KMS URI, scheme://...)"
	[[ -x ${COSIGN:-} ]] || fail "COSIGN=${COSIGN:-}: want the cosign binary to sign with COSIGN_KEY"
fi
[[ -z ${SBOM_DIR:-} || -n ${COSIGN_KEY:-} ]] || fail "SBOM_DIR: the SBOMs are attached as signed attestations, which needs COSIGN_KEY"

layout=$(mktemp -d -t nri-sysctl-publish.XXXXXX)
trap 'rm -rf "$layout"' EXIT
tar -xf "$image_tar" -C "$layout"
# The archive's index.json names one descriptor, the two-platform index:
# crane pushes that index (and what it names) under the tag as it is, so
# that its digest in the registry is the archive's.
want=$(sed -n 's/.*"digest": *"\(sha256:[0-9a-f]*\)".*/\1/p' "$layout/index.json")
[[ $(wc -l <<<"$want") -eq 1 && -n $want ]] || fail "$image_tar: index.json names $(wc -l <<<"$want") descriptors, want the one image index (make image writes it)"
# The platforms the index holds (make image's IMAGE_ARCHES).
mapfile -t arches < <(grep -o '"architecture": *"[a-z0-9]*"' "$layout/blobs/sha256/${want#sha256:}" | sed 's/.*"\([a-z0-9]*\)"$/\1/')
[[ ${#arches[@]} -gt 0 ]] || fail "$image_tar: its index names no platform"
if [[ -n ${SBOM_DIR:-} ]]; then
	for arch in "${arches[@]}"; do
		[[ -f $SBOM_DIR/nri-sysctl-linux-$arch.cdx.json ]] || fail "$SBOM_DIR/nri-sysctl-linux-$arch.cdx.json is missing (make notices-make writes it)"
	done
fi

image="$registry/nri-sysctl:$tag"
"$crane" push "${crane_flags[@]}" "$layout" "$image"
got=$("$crane" digest "${crane_flags[@]}" "$image")
[[ $got == "$want" ]] || fail "$image is $got in the registry, the archive's index is $want"

"$helm" push "${helm_flags[@]}" "$chart_tgz" "oci://$registry/charts"
chart_version=$(tar -xOzf "$chart_tgz" nri-sysctl/Chart.yaml | sed -n 's/^version: *//p')
"$helm" show chart "${helm_flags[@]}" "oci://$registry/charts/nri-sysctl" --version "$chart_version" >/dev/null ||
	fail "the chart $chart_version cannot be read back from oci://$registry/charts/nri-sysctl"

chart_ref="$registry/charts/nri-sysctl"
# helm pushes a version with build metadata (1.2.3+x) under the tag 1.2.3_x.
chart_tag=${chart_version//+/_}
if [[ -n ${COSIGN_KEY:-} ]]; then
	chart_digest=$("$crane" digest "${crane_flags[@]}" "$chart_ref:$chart_tag")
	for ref in "$registry/nri-sysctl@$want" "$chart_ref@$chart_digest"; do
		"$COSIGN" sign --yes --key "$COSIGN_KEY" --tlog-upload=false "${cosign_flags[@]}" "$ref"
	done
	echo "make publish: signed the image and the chart with $COSIGN_KEY"
fi
if [[ -n ${SBOM_DIR:-} ]]; then
	for arch in "${arches[@]}"; do
		platform_digest=$("$crane" digest "${crane_flags[@]}" --platform "linux/$arch" "$image")
		"$COSIGN" attest --yes --replace --key "$COSIGN_KEY" --tlog-upload=false "${cosign_flags[@]}" --type cyclonedx \
			--predicate "$SBOM_DIR/nri-sysctl-linux-$arch.cdx.json" "$registry/nri-sysctl@$platform_digest"
	done
	echo "make publish: attached the SBOM of ${arches[*]} to each platform's image, signed with $COSIGN_KEY"
fi

echo "make publish: the image $image ($want, ${arches[*]/#/linux/}) and the chart oci://$registry/charts/nri-sysctl $chart_version"
