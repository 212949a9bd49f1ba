#!/usr/bin/env bash
# Copyright The nri-sysctl Authors.
# SPDX-License-Identifier: Apache-2.0
# What a user runs before installing from a registry: check, with the
# project's public key, the signatures of the image (REGISTRY/nri-sysctl:
# OCI_TAG) and of the chart (oci://REGISTRY/charts/nri-sysctl, version
# CHART_VERSION) that make publish COSIGN_KEY=... wrote. The key alone
# decides: no transparency log is read (those signatures were not
# uploaded to one), and nothing outside REGISTRY is reached. Then the
# SBOM attested to each platform's image (make publish with SBOM_DIR),
# written to SBOM_OUT/nri-sysctl-linux-<arch>.cdx.json when SBOM_OUT is set.
#
# Usage: hack/verify-published.sh REGISTRY OCI_TAG CHART_VERSION COSIGN CRANE PUBLIC_KEY [--plain-http]
# (make verify-published; docs/releasing.md).
set -euo pipefail

[[ $# -ge 6 && $# -le 7 ]] || { echo "usage: $0 REGISTRY OCI_TAG CHART_VERSION COSIGN CRANE PUBLIC_KEY [--plain-http]" >&2; exit 2; }
registry=${1%/} tag=$2 chart_version=$3 cosign=$4 crane=$5 key=$6 plain=${7:-}
fail() { echo "verify-published: $*" >&2; exit 1; }
[[ -z $plain || $plain == --plain-http ]] || fail "the seventh argument is --plain-http or nothing, not $plain"
[[ -f $key ]] || fail "$key: no such public key"
flags=(--key "$key" --insecure-ignore-tlog=true --output json)
crane_flags=()
if [[ -n $plain ]]; then
	flags+=(--allow-http-registry --allow-insecure-registry)
	crane_flags=(--insecure)
fi
for ref in "$registry/nri-sysctl:$tag" "$registry/charts/nri-sysctl:$chart_version"; do
	"$cosign" verify "${flags[@]}" "$ref" >/dev/null || fail "$ref: no signature by $key"
	echo "verify-published: $ref is signed by $key"
done

# The attestation's payload is an in-toto statement, base64 in the
# envelope cosign prints; its predicate is the SBOM.
for arch in amd64 arm64; do
	ref="$registry/nri-sysctl@$("$crane" digest "${crane_flags[@]}" --platform "linux/$arch" "$registry/nri-sysctl:$tag")"
	envelope=$("$cosign" verify-attestation "${flags[@]}" --type cyclonedx "$ref") || fail "$ref (linux/$arch): no SBOM attestation by $key"
	if [[ -n ${SBOM_OUT:-} ]]; then
		mkdir -p "$SBOM_OUT"
		sed -n '1s/.*"payload":"\([^"]*\)".*/\1/p' <<<"$envelope" | base64 -d >"$SBOM_OUT/nri-sysctl-linux-$arch.intoto.json"
	fi
	echo "verify-published: $ref (linux/$arch) has a CycloneDX SBOM attested by $key"
done
