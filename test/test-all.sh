#!/usr/bin/env bash
# Copyright The nri-sysctl Authors.
# SPDX-License-Identifier: Apache-2.0
# make test-all: the make targets in FIRST, then those in LAST, in order,
# with Kubernetes, etcd, the registry, crane and cosign (what make e2e-k8s needs, test/setup.sh
# --k8s-only) building in the background from the start at the lowest CPU
# priority (nice 19, its autogroup too). That build is the longest step of a cold run and
# needs nothing FIRST makes; at nice 19 it yields to the targets in FIRST
# (in a measured cold run it ran beside set-up and was done before set-up
# ended). Before LAST it is waited for and its log printed. If it failed,
# make e2e-k8s's own test/setup.sh --k8s builds again in the foreground,
# and fails there if the error recurs.
#
# make's own flags reach both make calls (MAKEFLAGS). Under make -n
# nothing is built in the background; under make -k a failure in FIRST
# does not stop LAST, and the script still fails at the end.
# SIGINT, SIGTERM and SIGHUP stop the make under way and the background
# build, with its process group.
#
# Usage: test/test-all.sh "FIRST..." "LAST..."   (MAKE: the make to run;
# NRI_SYSCTL_TEST_ALL_BUILD: another background command, for its test)
set -euo pipefail

[[ $# -eq 2 ]] || { echo "usage: $0 \"FIRST TARGETS\" \"LAST TARGETS\"" >&2; exit 2; }
read -r -a first <<<"$1"
read -r -a last <<<"$2"
make=${MAKE:-make}

# make's single-letter flags are MAKEFLAGS' first word, when it has any.
make_letters=${MAKEFLAGS:-}
make_letters=${make_letters%% *}
[[ $make_letters == -* ]] && make_letters=
dry_run=false
keep_going=false
[[ $make_letters == *n* ]] && dry_run=true
[[ $make_letters == *k* ]] && keep_going=true

build_pid=
build_log=
make_pid=

stop_build() {
	if [[ -n $build_pid ]] && kill -0 "$build_pid" 2>/dev/null; then
		echo "=== stopping the background Kubernetes build (pid $build_pid)"
		kill -TERM -- "-$build_pid" 2>/dev/null || true
		wait "$build_pid" 2>/dev/null || true
	fi
	build_pid=
	[[ -z $build_log ]] || rm -f "$build_log"
}

# A signal stops the make under way (make passes SIGTERM on to its
# recipes), then the exit stops the build.
on_signal() {
	trap - INT TERM HUP
	if [[ -n $make_pid ]]; then
		kill -TERM "$make_pid" 2>/dev/null || true
		wait "$make_pid" 2>/dev/null || true
	fi
	exit "$1"
}
trap stop_build EXIT
trap 'on_signal 130' INT
trap 'on_signal 143' TERM
trap 'on_signal 129' HUP

# run_make runs make in the background and waits for it, so that a signal
# reaches on_signal at once rather than when make ends.
run_make() {
	"$make" --no-print-directory "$@" &
	make_pid=$!
	local rc=0
	wait "$make_pid" || rc=$?
	make_pid=
	return "$rc"
}

if $dry_run; then
	run_make "${first[@]}"
	run_make "${last[@]}"
	exit 0
fi

# The background command; test/testall replaces it.
build_cmd=(test/setup.sh --k8s-only)
if [[ -n ${NRI_SYSCTL_TEST_ALL_BUILD:-} ]]; then
	read -r -a build_cmd <<<"$NRI_SYSCTL_TEST_ALL_BUILD"
fi

build_log=$(mktemp -t nri-sysctl-k8s-build.XXXXXX)
# Its own process group (setsid), so that stopping it stops go build and
# the compilers under it; setup.sh removes its temporary dirs on SIGTERM.
# A new session is also a new autogroup where the kernel has them
# (sched_autogroup_enabled): groups share the CPU equally whatever their
# processes' nice, so the group itself is set to nice 19 too. Without it
# the build took half the CPU from set-up in a cold run.
# shellcheck disable=SC2016 # $@ is the inner shell's
setsid sh -c 'echo 19 2>/dev/null >/proc/self/autogroup || true; exec nice -n 19 "$@"' sh \
	"${build_cmd[@]}" >"$build_log" 2>&1 </dev/null &
build_pid=$!
echo "=== Kubernetes, etcd, the registry, crane and cosign: building in the background (pid $build_pid, nice 19)"

first_rc=0
run_make "${first[@]}" || first_rc=$?
if [[ $first_rc -ne 0 ]] && ! $keep_going; then
	exit "$first_rc"
fi

echo "=== waiting for the background Kubernetes build (pid $build_pid)"
wait_start=$(date +%s)
build_rc=0
wait "$build_pid" || build_rc=$?
# Reaped: its number may now be another process's, so stop_build must not signal it.
build_pid=
echo "=== the background Kubernetes build: exit $build_rc, waited $(($(date +%s) - wait_start))s; its log:"
cat "$build_log"
if [[ $build_rc -ne 0 ]]; then
	echo "=== it failed: make e2e-k8s builds in the foreground"
fi

run_make "${last[@]}"
exit "$first_rc"
