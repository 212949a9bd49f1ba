#!/usr/bin/env bash
# Copyright The nri-sysctl Authors.
# SPDX-License-Identifier: Apache-2.0
# make reproduce: is a release what its source gives, wherever it is built?
# make release runs twice on the same commit, checked out in two local
# clones of different depths, with the commit's time as
# SOURCE_DATE_EPOCH. The commit is HEAD, or, when the working tree differs
# from it, one made of the working tree as git add -A would commit it
# (through an index of its own; no branch or index of yours changes). A
# clone, not an unpacked tree or a linked worktree: the SBOM generator
# takes the main module's version from git (a pseudo-version of the
# commit), and its git library finds no objects in a linked worktree. The
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
one=$work/one/nri-sysctl
two=$work/second/build/of/nri-sysctl-copy
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
tree=$(GIT_INDEX_FILE=$work/index bash -c 'git read-tree HEAD && git add -A && git write-tree')
commit=$(git rev-parse HEAD)
if [[ $tree != "$(git rev-parse 'HEAD^{tree}')" ]]; then
	# Dated as HEAD, so that the same working tree gives the same commit.
	# Named here, so that a machine with no git identity can make it.
	commit=$(GIT_AUTHOR_DATE="@$epoch +0000" GIT_COMMITTER_DATE="@$epoch +0000" \
		GIT_AUTHOR_NAME="make reproduce" GIT_AUTHOR_EMAIL="reproduce@localhost" \
		GIT_COMMITTER_NAME="make reproduce" GIT_COMMITTER_EMAIL="reproduce@localhost" \
		git commit-tree "$tree" -p HEAD -m "make reproduce: the working tree")
	echo "=== the working tree differs from HEAD: building $commit, a commit of it"
fi

# build DIR [ENV...]: clone the commit into DIR and make release there.
build() {
	local dir=$1
	shift
	mkdir -p "$(dirname "$dir")"
	# A local clone hardlinks every object, the unreferenced commit of the
	# working tree too.
	git clone --quiet --no-checkout "$PWD" "$dir"
	git -C "$dir" checkout --quiet --detach "$commit"
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
	if [[ -n ${REPRODUCE_KEEP:-} ]]; then
		keep=$(mktemp -d "${TMPDIR:-/var/tmp}/nri-sysctl-reproduce-differ.XXXXXX")
		cp -a "$one/release" "$keep/first"
		cp -a "$two/release" "$keep/second"
		echo "make reproduce: both releases are kept in $keep for diffoscope (REPRODUCE_KEEP)" >&2
	fi
	echo "make reproduce: the two builds differ (lines above, - first, + second); REPRODUCE_KEEP=1 keeps both releases to compare" >&2
	exit 1
fi
echo "make reproduce: both builds agree on all $(wc -l <"$one/release/SHA256SUMS") artifacts:"
cat "$one/release/SHA256SUMS"
