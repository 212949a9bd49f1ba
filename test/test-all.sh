#!/usr/bin/env bash
# make test-all: the make targets in FIRST, then those in LAST, in order,
# with Kubernetes and etcd (what make e2e-k8s needs, test/setup.sh
# --k8s-only) building in the background from the start at the lowest CPU
# priority (nice 19). That build is the longest step of a cold run and
# needs nothing FIRST makes; at nice 19 it takes the cycles the targets in
# FIRST leave idle (in a measured cold run it was done within set-up).
# Before LAST it is waited for and its log printed. If it failed, make
# e2e-k8s's own test/setup.sh --k8s builds again in the foreground, and
# fails there if the error recurs.
#
# Usage: test/test-all.sh "FIRST..." "LAST..."   (MAKE: the make to run;
# NRI_SYSCTL_TEST_ALL_BUILD: another background command, for its test)
set -euo pipefail

[[ $# -eq 2 ]] || { echo "usage: $0 \"FIRST TARGETS\" \"LAST TARGETS\"" >&2; exit 2; }
read -r -a first <<<"$1"
read -r -a last <<<"$2"
make=${MAKE:-make}

# The background command; test/testall replaces it.
build_cmd=(test/setup.sh --k8s-only)
if [[ -n ${NRI_SYSCTL_TEST_ALL_BUILD:-} ]]; then
	read -r -a build_cmd <<<"$NRI_SYSCTL_TEST_ALL_BUILD"
fi

build_log=$(mktemp /tmp/nri-sysctl-k8s-build.XXXXXX)
# Its own process group (setsid), so that stopping it stops go build and
# the compilers under it; setup.sh removes its temporary dirs on SIGTERM.
setsid nice -n 19 "${build_cmd[@]}" >"$build_log" 2>&1 </dev/null &
build_pid=$!
echo "=== Kubernetes and etcd: building in the background (pid $build_pid, nice 19)"

stop_build() {
	if [[ -n $build_pid ]] && kill -0 "$build_pid" 2>/dev/null; then
		echo "=== stopping the background Kubernetes build (pid $build_pid)"
		kill -TERM -- "-$build_pid" 2>/dev/null || true
		wait "$build_pid" 2>/dev/null || true
	fi
	rm -f "$build_log"
}
trap stop_build EXIT

"$make" --no-print-directory "${first[@]}"

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

"$make" --no-print-directory "${last[@]}"
