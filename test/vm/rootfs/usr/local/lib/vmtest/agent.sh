#!/bin/bash
# Copyright The nri-sysctl Authors.
# SPDX-License-Identifier: Apache-2.0
# The VM test's agent: reads one command per line from /dev/ttyS1
# ("ID BASE64"), runs it with bash, and answers
# "VMTEST-RESULT ID EXIT-CODE BASE64-OF-OUTPUT". The host's test (test/vm)
# is on the other end of that serial port.
set -u
tty=/dev/ttyS1
stty -F "$tty" raw -echo
exec 3<>"$tty"
printf 'VMTEST-READY %s\n' "$(cat /proc/sys/kernel/random/boot_id)" >&3
while IFS= read -r line <&3; do
	line=${line%$'\r'}
	[[ $line == *' '* ]] || continue
	id=${line%% *}
	if ! cmd=$(printf '%s' "${line#* }" | base64 -d 2>/dev/null); then
		printf 'VMTEST-RESULT %s 255 %s\n' "$id" "$(printf 'bad base64' | base64 -w0)" >&3
		continue
	fi
	out=$(timeout 600 bash -c "$cmd" 2>&1 </dev/null)
	rc=$?
	printf 'VMTEST-RESULT %s %d %s\n' "$id" "$rc" "$(printf '%s' "$out" | base64 -w0)" >&3
done
