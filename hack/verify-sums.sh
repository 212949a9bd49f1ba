#!/usr/bin/env bash
# Copyright The nri-sysctl Authors.
# SPDX-License-Identifier: Apache-2.0
# What a user runs on a downloaded release directory: the signature of
# SHA256SUMS, with the project's public key and no transparency log (the
# key alone decides), then every file against SHA256SUMS.
#
# Usage: hack/verify-sums.sh COSIGN PUBLIC_KEY DIR (docs/releasing.md).
set -euo pipefail

[[ $# -eq 3 ]] || { echo "usage: $0 COSIGN PUBLIC_KEY DIR" >&2; exit 2; }
cosign=$1 key=$2 dir=$3
fail() { echo "verify-sums: $*" >&2; exit 1; }
[[ -f $dir/SHA256SUMS.sig ]] || fail "$dir/SHA256SUMS.sig is missing: the release is not signed"
"$cosign" verify-blob --key "$key" --insecure-ignore-tlog=true --signature "$dir/SHA256SUMS.sig" "$dir/SHA256SUMS" >/dev/null ||
	fail "$dir/SHA256SUMS: its signature is not by $key (cosign's reason above)"
(cd "$dir" && sha256sum --quiet -c SHA256SUMS) || fail "$dir: a file differs from SHA256SUMS"
echo "verify-sums: $dir/SHA256SUMS is signed by $key, and every file matches it"
