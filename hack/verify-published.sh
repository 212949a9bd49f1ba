#!/usr/bin/env bash
# Copyright The nri-sysctl Authors.
# SPDX-License-Identifier: Apache-2.0
# What a user runs before installing from a registry: check, with the
# project's public key, the signatures of the image (REGISTRY/nri-sysctl:
# OCI_TAG) and of the chart (oci://REGISTRY/charts/nri-sysctl, version
# CHART_VERSION) that make publish COSIGN_KEY=... wrote, then the SBOM
# attested to each platform's image in the index. The key alone decides:
# no transparency log is needed (those signatures were not uploaded to
# one), and only REGISTRY has to be reachable. Every part is checked, and
# each failure named; it exits 1 if any failed. With SBOM_OUT, each
# verified attestation's in-toto statement (its predicate is the SBOM)
# goes to SBOM_OUT/nri-sysctl-linux-<arch>.intoto.json.
#
# Usage: hack/verify-published.sh REGISTRY OCI_TAG CHART_VERSION COSIGN CRANE PUBLIC_KEY [--plain-http]
# (make verify-published; docs/releasing.md).
set -euo pipefail

[[ $# -ge 6 && $# -le 7 ]] || { echo "usage: $0 REGISTRY OCI_TAG CHART_VERSION COSIGN CRANE PUBLIC_KEY [--plain-http]" >&2; exit 2; }
registry=${1%/} tag=$2 chart_version=$3 cosign=$4 crane=$5 key=$6 plain=${7:-}
fail() { echo "verify-published: $*" >&2; exit 1; }
[[ -z $plain || $plain == --plain-http ]] || fail "the seventh argument is --plain-http or nothing, not $plain"
[[ $key == *://* || -f $key ]] || fail "$key: no such public key (or a KMS URI, scheme://...)"
flags=(--key "$key" --insecure-ignore-tlog=true --output json)
crane_flags=()
if [[ -n $plain ]]; then
	flags+=(--allow-http-registry --allow-insecure-registry)
	crane_flags=(--insecure)
fi
failed=0
refuse() { echo "verify-published: $*" >&2; failed=1; }

image="$registry/nri-sysctl:$tag"
# helm pushes a version with build metadata (1.2.3+x) under the tag 1.2.3_x.
for ref in "$image" "$registry/charts/nri-sysctl:${chart_version//+/_}"; do
	if "$cosign" verify "${flags[@]}" "$ref" >/dev/null; then
		echo "verify-published: $ref is signed by $key"
	else
		refuse "$ref: no signature by $key"
	fi
done

# Each platform of the index; the attestation's payload is an in-toto
# statement, base64 in the envelope cosign prints (one a line).
index=$("$crane" manifest "${crane_flags[@]}" "$image") || fail "$image: cannot read its index"
mapfile -t arches < <(grep -o '"architecture": *"[a-z0-9]*"' <<<"$index" | sed 's/.*"\([a-z0-9]*\)"$/\1/')
[[ ${#arches[@]} -gt 0 ]] || fail "$image: its index names no platform"
for arch in "${arches[@]}"; do
	ref="$registry/nri-sysctl@$("$crane" digest "${crane_flags[@]}" --platform "linux/$arch" "$image")"
	if ! envelope=$("$cosign" verify-attestation "${flags[@]}" --type cyclonedx "$ref"); then
		refuse "$ref (linux/$arch): no SBOM attestation by $key"
		continue
	fi
	payloads=$(sed -n 's/.*"payload":"\([^"]*\)".*/\1/p' <<<"$envelope")
	if [[ $(grep -c . <<<"$payloads") -ne 1 ]]; then
		refuse "$ref (linux/$arch): $(grep -c . <<<"$payloads") SBOM attestations by $key, want one"
		continue
	fi
	if [[ -n ${SBOM_OUT:-} ]]; then
		mkdir -p "$SBOM_OUT"
		base64 -d <<<"$payloads" >"$SBOM_OUT/nri-sysctl-linux-$arch.intoto.json"
	fi
	echo "verify-published: $ref (linux/$arch) has a CycloneDX SBOM attested by $key"
done
exit "$failed"
