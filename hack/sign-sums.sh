#!/usr/bin/env bash
# Copyright The nri-sysctl Authors.
# SPDX-License-Identifier: Apache-2.0
# Sign a release directory's SHA256SUMS with cosign and a key:
# DIR/SHA256SUMS.sig, then check it with the key's public half, and the
# sums with sha256sum -c. Nothing leaves the machine: no transparency-log
# upload. The signature is not listed in SHA256SUMS (it is made after,
# and differs at each signing: make reproduce compares SHA256SUMS).
#
# Usage: COSIGN_KEY=cosign.key [COSIGN_PASSWORD=...] hack/sign-sums.sh COSIGN DIR
# (make release COSIGN_KEY=... runs it; docs/releasing.md).
set -euo pipefail

[[ $# -eq 2 ]] || { echo "usage: COSIGN_KEY=cosign.key $0 COSIGN DIR" >&2; exit 2; }
cosign=$1 dir=$2
fail() { echo "sign-sums: $*" >&2; exit 1; }
[[ ${COSIGN_KEY:-} == *://* || -f ${COSIGN_KEY:-} ]] || fail "COSIGN_KEY=${COSIGN_KEY:-}: want a cosign private key (a file, or a KMS URI, scheme://...)"
[[ -f $dir/SHA256SUMS ]] || fail "$dir/SHA256SUMS is missing (make release writes it)"

"$cosign" sign-blob --yes --key "$COSIGN_KEY" --tlog-upload=false --output-signature "$dir/SHA256SUMS.sig" "$dir/SHA256SUMS" >/dev/null
pub=$(mktemp -t nri-sysctl-pub.XXXXXX)
trap 'rm -f "$pub"' EXIT
"$cosign" public-key --key "$COSIGN_KEY" --outfile "$pub"
"$(dirname "$0")/verify-sums.sh" "$cosign" "$pub" "$dir"
