#!/usr/bin/env bash
# Copyright The nri-sysctl Authors.
# SPDX-License-Identifier: Apache-2.0
# make e2e: the end-to-end suite (test/e2e) against each containerd line in
# VERSIONS, every case on the lines in FULL and the cases LINE_CASES (a go
# test -run pattern) on the others.
#
# With E2E_JOBS=2 (make e2e's default) the lines run in two streams at once,
# each line in one of them, one after another. A
# line's run mostly waits for containers to start (measured here: about a
# quarter of two cores), each run has its own containerd, directory and
# bridge, and what runs share (the host's sysctls, /dev/log, the default
# pod state directory) is under the host lock (test/e2e/hostlock_test.go).
# Each stream's output goes to a file, printed whole when the stream ends,
# with how long each line took. E2E_JOBS=1 runs the lines in VERSIONS'
# order, the output as it comes.
#
# SIGINT and SIGTERM stop both streams (each is a process group of its own)
# and wait for them. A test killed so does not tear down: the next run's
# harness removes what it left (cleanStaleRuns), as after any killed run.
#
# Usage: test/e2e.sh "VERSIONS..." "FULL..." LINE_CASES   (GO: the go to run)
set -euo pipefail

[[ $# -eq 3 ]] || { echo "usage: $0 \"VERSIONS\" \"FULL VERSIONS\" LINE_CASES" >&2; exit 2; }
read -r -a versions <<<"$1"
read -r -a full <<<"$2"
line_cases=$3
go=${GO:-go}
jobs=${E2E_JOBS:-2}
[[ $jobs == 1 || $jobs == 2 ]] || { echo "$0: E2E_JOBS must be 1 or 2, not $jobs" >&2; exit 2; }

is_full() { [[ " ${full[*]} " == *" $1 "* ]]; }

# run_line VERSION: the line's cases, and how long they took.
run_line() {
	local v=$1 run what start=$SECONDS
	if is_full "$v"; then
		run=. what='every case'
	else
		run=$line_cases what='the cases that depend on the line'
	fi
	echo "=== end-to-end tests against containerd $v: $what"
	if ! NRI_SYSCTL_CONTAINERD_VERSION=$v $go test -count=1 -timeout 30m -v -run "$run" ./test/e2e/ </dev/null; then
		echo "=== containerd $v: FAILED after $((SECONDS - start)) s"
		return 1
	fi
	echo "=== containerd $v: passed in $((SECONDS - start)) s"
}

run_stream() {
	local v
	for v in "$@"; do
		run_line "$v" || return 1
	done
}

if [[ $jobs == 1 ]]; then
	run_stream "${versions[@]}"
	exit
fi

# The FULL lines take three to four times a line's cases: one in each
# stream, then the other lines in turn.
first=() second=()
for v in "${versions[@]}"; do
	if is_full "$v"; then
		if [[ ${#first[@]} -le ${#second[@]} ]]; then first+=("$v"); else second+=("$v"); fi
	fi
done
n=0
for v in "${versions[@]}"; do
	is_full "$v" && continue
	if ((n++ % 2 == 0)); then first+=("$v"); else second+=("$v"); fi
done

logs=$(mktemp -d -t nri-sysctl-e2e-streams.XXXXXX)
pids=()
stop_streams() {
	trap - INT TERM
	local pid
	for pid in "${pids[@]}"; do
		kill -TERM -- "-$pid" 2>/dev/null || true
	done
	wait || true
	rm -rf "$logs"
	exit "$1"
}
trap 'stop_streams 130' INT
trap 'stop_streams 143' TERM

# Job control: each stream in a process group of its own, which a signal
# above stops whole (go test, the test binary, the plugins it started).
set -m
start=$SECONDS
names=() outs=()
for stream in first second; do
	declare -n lines=$stream
	if [[ ${#lines[@]} -gt 0 ]]; then
		run_stream "${lines[@]}" >"$logs/$stream.log" 2>&1 &
		pids+=("$!")
		names+=("${lines[*]}")
		outs+=("$logs/$stream.log")
	fi
	unset -n lines
done
set +m
echo "=== end-to-end tests: ${#pids[@]} streams at once, lines $(printf '[%s] ' "${names[@]}")"

rc=0
for i in "${!pids[@]}"; do
	stream_rc=0
	wait "${pids[$i]}" || stream_rc=$?
	echo "=== the stream of ${names[$i]}: exit $stream_rc, $((SECONDS - start)) s from the start; its output:"
	cat "${outs[$i]}"
	[[ $stream_rc == 0 ]] || rc=1
done
rm -rf "$logs"
echo "=== end-to-end tests: exit $rc after $((SECONDS - start)) s"
exit "$rc"
