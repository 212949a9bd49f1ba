#!/usr/bin/env bash
# Copyright The nri-sysctl Authors.
# SPDX-License-Identifier: Apache-2.0
# What a user runs before installing from a registry: check, with the
# project's public key, the signatures of the image (REGISTRY/nri-sysctl:
# OCI_TAG) and of the chart (oci://REGISTRY/charts/nri-sysctl, version
# CHART_VERSION) that make publish COSIGN_KEY=... wrote. The key alone
# decides: no transparency log is read (those signatures were not
# uploaded to one), and nothing outside REGISTRY is reached.
#
# Usage: hack/verify-published.sh REGISTRY OCI_TAG CHART_VERSION COSIGN PUBLIC_KEY [--plain-http]
# (make verify-published; docs/releasing.md).
set -euo pipefail

[[ $# -ge 5 && $# -le 6 ]] || { echo "usage: $0 REGISTRY OCI_TAG CHART_VERSION COSIGN PUBLIC_KEY [--plain-http]" >&2; exit 2; }
registry=${1%/} tag=$2 chart_version=$3 cosign=$4 key=$5 plain=${6:-}
fail() { echo "verify-published: $*" >&2; exit 1; }
[[ -z $plain || $plain == --plain-http ]] || fail "the sixth argument is --plain-http or nothing, not $plain"
[[ -f $key ]] || fail "$key: no such public key"
flags=(--key "$key" --insecure-ignore-tlog=true --output json)
if [[ -n $plain ]]; then
	flags+=(--allow-http-registry --allow-insecure-registry)
fi
for ref in "$registry/nri-sysctl:$tag" "$registry/charts/nri-sysctl:$chart_version"; do
	"$cosign" verify "${flags[@]}" "$ref" >/dev/null || fail "$ref: no signature by $key"
	echo "verify-published: $ref is signed by $key"
done
