#!/usr/bin/env bash
# Copyright The nri-sysctl Authors.
# SPDX-License-Identifier: Apache-2.0
# make test-all: the make targets in FIRST, then those in KUBELET, then
# those in LAST, in order, with what they need from test/setup.sh built in
# the background at the lowest CPU priority (nice 19, its autogroup too),
# in two parts:
#  - the kubelet (--kubelet-only), from the start: KUBELET (make vm-test)
#    needs it, FIRST nothing of it. It is waited for, and its log printed,
#    before KUBELET;
#  - the rest of what make e2e-k8s needs (--k8s-only: the control plane,
#    etcd, the registry, crane, cosign), from when KUBELET starts: the VM
#    test leaves about a quarter of the two cores idle, where FIRST leaves
#    next to none in a cold run (the build took CPU from FIRST's end-to-end
#    tests there). It is waited for before LAST.
# If a part failed, the target that needs it builds it again in the
# foreground (make vm-test, make e2e-k8s: test/setup.sh), and fails there
# if the error recurs.
#
# make's own flags reach every make call (MAKEFLAGS). Under make -n
# nothing is built in the background; under make -k a failure does not
# stop the later targets, and the script still fails at the end.
# SIGINT, SIGTERM and SIGHUP stop the make under way and the background
# build, with its process group.
#
# Usage: test/test-all.sh "FIRST..." "KUBELET..." "LAST..."   (MAKE: the
# make to run; NRI_SYSCTL_TEST_ALL_BUILD: another background command, for
# its test, given --kubelet-only or --k8s-only as test/setup.sh is)
set -euo pipefail

[[ $# -eq 3 ]] || { echo "usage: $0 \"FIRST TARGETS\" \"KUBELET TARGETS\" \"LAST TARGETS\"" >&2; exit 2; }
read -r -a first <<<"$1"
read -r -a kubelet <<<"$2"
read -r -a last <<<"$3"
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
	run_make "${kubelet[@]}"
	run_make "${last[@]}"
	exit 0
fi

# The background command; test/testall replaces it.
build_cmd=(test/setup.sh)
if [[ -n ${NRI_SYSCTL_TEST_ALL_BUILD:-} ]]; then
	read -r -a build_cmd <<<"$NRI_SYSCTL_TEST_ALL_BUILD"
fi

# start_build PART: the build of PART (--kubelet-only, --k8s-only) in the
# background, in its own process group (setsid), so that stopping it stops
# go build and the compilers under it; setup.sh removes its temporary dirs
# on SIGTERM. A new session is also a new autogroup where the kernel has
# them (sched_autogroup_enabled): groups share the CPU equally whatever
# their processes' nice, so the group itself is set to nice 19 too.
# Without it the build took half the CPU from set-up in a cold run.
start_build() {
	build_log=$(mktemp -t nri-sysctl-k8s-build.XXXXXX)
	# shellcheck disable=SC2016 # $@ is the inner shell's
	setsid sh -c 'echo 19 2>/dev/null >/proc/self/autogroup || true; exec nice -n 19 "$@"' sh \
		"${build_cmd[@]}" "$1" >"$build_log" 2>&1 </dev/null &
	build_pid=$!
	echo "=== building in the background: test/setup.sh $1 (pid $build_pid, nice 19)"
}

# wait_build PART: wait for the build, print its log.
wait_build() {
	echo "=== waiting for the background build, $1 (pid $build_pid)"
	local wait_start rc=0
	wait_start=$(date +%s)
	wait "$build_pid" || rc=$?
	# Reaped: its number may now be another process's, so stop_build must not signal it.
	build_pid=
	echo "=== the background build, $1: exit $rc, waited $(($(date +%s) - wait_start))s; its log:"
	cat "$build_log"
	rm -f "$build_log"
	build_log=
	if [[ $rc -ne 0 ]]; then
		echo "=== it failed: the next targets build it in the foreground"
	fi
}

rc=0
# run_stage TARGETS...: make them; a failure ends the script unless make -k.
run_stage() {
	local stage_rc=0
	run_make "$@" || stage_rc=$?
	if [[ $stage_rc -ne 0 ]]; then
		$keep_going || exit "$stage_rc"
		rc=$stage_rc
	fi
}

start_build --kubelet-only
run_stage "${first[@]}"
wait_build --kubelet-only
start_build --k8s-only
run_stage "${kubelet[@]}"
wait_build --k8s-only
run_stage "${last[@]}"
exit "$rc"
