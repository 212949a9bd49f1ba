#!/usr/bin/env bash
# Copyright The nri-sysctl Authors.
# SPDX-License-Identifier: Apache-2.0
# make reproduce: is a release what its source gives, wherever it is built?
# make release runs twice on the same tree (the working tree as git add -A
# would commit it, through an index of its own), unpacked in two directories
# of different depths, with the commit's time as SOURCE_DATE_EPOCH. The
# first build uses the Go build cache make already used; the second builds
# the shipped binaries with one of its own (REPRODUCE_GOCACHE, through the
# Makefile's BUILD_GOCACHE), so that no compiled package or linked binary
# that ships is shared between them. Every artifact's SHA-256 must agree: both
# architectures' binaries and SBOMs, the .deb and .rpm of each, the image
# archive, the chart, the notices and the release notes.
#
# The tools the build runs (Go, helm, cyclonedx-gomod, the hack/ programs)
# are the same for both builds, as a user checking a release would use the
# toolchain the release names.
set -euo pipefail

make=${MAKE:-make}
gocache=${REPRODUCE_GOCACHE:?is the Go cache of the second build (the Makefile sets it)}
cd "$(git rev-parse --show-toplevel)"

epoch=$(git log -1 --format=%ct HEAD)
work=$(mktemp -d "${TMPDIR:-/var/tmp}/nri-sysctl-reproduce.XXXXXX")
trap 'rm -rf "$work"' EXIT
tree=$(GIT_INDEX_FILE=$work/index bash -c 'git read-tree HEAD && git add -A && git write-tree')

one=$work/one/nri-sysctl
two=$work/second/build/of/nri-sysctl-copy
# build DIR [ENV...]: unpack the tree into DIR and make release there.
build() {
	local dir=$1
	shift
	mkdir -p "$dir"
	git archive "$tree" | tar -x -C "$dir"
	local start=$SECONDS
	echo "=== make release in $dir ${*:-(the default Go cache)}"
	(cd "$dir" && env "$@" "$make" --no-print-directory release SOURCE_DATE_EPOCH="$epoch" RELEASE_DIR=release) \
		>"$dir.log" 2>&1 || { cat "$dir.log"; echo "make reproduce: make release failed in $dir (log above)" >&2; exit 1; }
	echo "    $((SECONDS - start)) s"
}
mkdir -p "$gocache"
build "$one"
build "$two" BUILD_GOCACHE="$gocache"

if ! diff -u "$one/release/SHA256SUMS" "$two/release/SHA256SUMS"; then
	echo "make reproduce: the two builds differ (lines above, - first, + second); the releases stay in $work for diffoscope" >&2
	trap - EXIT
	exit 1
fi
echo "make reproduce: both builds agree on all $(wc -l <"$one/release/SHA256SUMS") artifacts:"
cat "$one/release/SHA256SUMS"
