// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package vm

// What the guest kernel said, for a failed test: a guest that stops
// answering (no pod starts, no command runs, not even `poweroff -ff`)
// leaves its reason on the console, in stack traces far above the tail a
// CI log keeps. On failure the test asks the guest kernel for its blocked
// tasks (sysrq w, sent as a key press through qemu's monitor: it needs no
// process in the guest, so it works when nothing can fork), then prints
// the console's reports folded to one line per distinct stack, last.

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// sysrqBlockedTasks asks the guest kernel to list its blocked tasks on
// the console (the kernel command line has sysrq_always_enabled), and
// waits until the list ends or a few seconds pass.
func (v *vm) sysrqBlockedTasks() error {
	conn, err := net.DialTimeout("unix", v.monitor, 5*time.Second)
	if err != nil {
		return fmt.Errorf("qemu monitor: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("sendkey alt-sysrq-w\n")); err != nil {
		return fmt.Errorf("qemu monitor: %w", err)
	}
	// The kernel writes the list at the guest's pace (TCG): wait until the
	// console stops growing.
	last := -1
	for range 20 {
		time.Sleep(500 * time.Millisecond)
		data, err := os.ReadFile(v.console)
		if err != nil {
			return err
		}
		if len(data) == last && strings.Contains(string(data), "Show Blocked State") {
			return nil
		}
		last = len(data)
	}
	return nil
}

// A console line that starts a kernel report, and one that names a
// task's state ahead of its stack (hung-task reports and sysrq w).
var (
	reportStart = regexp.MustCompile(`(INFO: task \S+ blocked for more than|BUG: soft lockup|rcu: INFO: |self-detected stall|hard LOCKUP|BUG: |Oops|WARNING: |general protection fault|Kernel panic|sysrq: Show Blocked State)`)
	taskLine    = regexp.MustCompile(`task:(\S+)\s+state:(\S)`)
	// A frame the unwinder is sure of: " ? name+..." ones are guesses.
	frameLine = regexp.MustCompile(`^\s*([A-Za-z_][A-Za-z0-9_.]*)\+0x[0-9a-f]+/0x[0-9a-f]+`)
	timestamp = regexp.MustCompile(`^\[\s*[0-9.]+\]\s?`)
	// What differs between repeats of one report: the pid, the time.
	hungFor  = regexp.MustCompile(`:\d+ blocked for more than \d+ seconds`)
	stuckFor = regexp.MustCompile(`stuck for \d+s!.*`)
)

// schedulerFrames are the top frames every sleeping task shares; the
// frames under them say where it waits.
var schedulerFrames = map[string]bool{
	"__schedule": true, "schedule": true, "schedule_preempt_disabled": true,
	"schedule_timeout": true, "io_schedule": true, "__wait_for_common": true,
	"wait_for_completion": true, "rwsem_down_write_slowpath": true,
	"rwsem_down_read_slowpath": true, "__mutex_lock": true, "__mutex_lock_slowpath": true,
	"mutex_lock": true, "__switch_to_asm": true, "__switch_to": true,
}

// kernelReports folds the console's kernel reports into one line per
// kind: the report headers by count, and each distinct blocked stack
// (its first frames below the scheduler) with the tasks found there.
func kernelReports(console string) []string {
	const framesShown = 5
	headers := map[string]int{}
	stacks := map[string]map[string]int{} // frames → task → times seen
	var task string
	var frames []string
	flush := func() {
		if task != "" && len(frames) > 0 {
			key := strings.Join(frames, " < ")
			if stacks[key] == nil {
				stacks[key] = map[string]int{}
			}
			stacks[key][task]++
		}
		task, frames = "", nil
	}
	for _, line := range strings.Split(console, "\n") {
		line = timestamp.ReplaceAllString(strings.TrimRight(line, "\r"), "")
		if at := reportStart.FindStringIndex(line); at != nil {
			flush()
			headers[reportHeader(line[at[0]:])]++
			continue
		}
		if m := taskLine.FindStringSubmatch(line); m != nil {
			flush()
			task = m[1] + "(" + m[2] + ")"
			continue
		}
		if strings.Contains(line, "</TASK>") {
			flush()
			continue
		}
		if m := frameLine.FindStringSubmatch(line); m != nil && task != "" {
			if !schedulerFrames[m[1]] && len(frames) < framesShown {
				frames = append(frames, m[1])
			}
		}
	}
	flush()
	var out []string
	for _, h := range sortedByCount(headers) {
		out = append(out, fmt.Sprintf("%d× %s", headers[h], h))
	}
	counts := map[string]int{}
	for k, tasks := range stacks {
		for _, n := range tasks {
			counts[k] += n
		}
	}
	for _, k := range sortedByCount(counts) {
		names := sortedByCount(stacks[k])
		if len(names) > 6 {
			names = append(names[:6], "...")
		}
		out = append(out, fmt.Sprintf("%d× blocked at %s: %s", counts[k], k, strings.Join(names, " ")))
	}
	return out
}

// reportHeader is a report's first line from its marker on, with the
// task's pid and the seconds taken out so that repeats fold.
func reportHeader(h string) string {
	h = hungFor.ReplaceAllString(h, " blocked for more than 120s")
	h = stuckFor.ReplaceAllString(h, "stuck")
	if len(h) > 120 {
		h = h[:120] + "..."
	}
	return h
}

// sortedByCount is m's keys, most frequent first, then by name.
func sortedByCount(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

// TestKernelReports folds a console with hung-task reports and a sysrq w
// list, as the 6.1 guest kernel prints them; a frame after a stack's end
// and a boot line that names the watchdog are no part of any report.
func TestKernelReports(t *testing.T) {
	// Tasks blocked in fork, one stack each, as sysrq w lists them.
	forkBlocked := func(tasks ...string) string {
		var b strings.Builder
		for i, task := range tasks {
			fmt.Fprintf(&b, `[  800.000001] task:%-15s state:D stack:0     pid:%d  ppid:4200   flags:0x00004002
[  800.000002] Call Trace:
[  800.000003]  <TASK>
[  800.000004]  __schedule+0x34d/0x9e0
[  800.000005]  schedule+0x5a/0xd0
[  800.000006]  percpu_rwsem_wait+0xa8/0xd0
[  800.000007]  __percpu_down_read+0x5b/0x70
[  800.000008]  copy_process+0x1a2b/0x1b90
[  800.000009]  kernel_clone+0x9d/0x3f0
[  800.000010]  __do_sys_clone+0x66/0x90
[  800.000011]  do_syscall_64+0x55/0xb0
[  800.000012]  </TASK>
`, task, 4242+i)
		}
		return b.String()
	}
	console := `[  600.123456] INFO: task systemd:1 blocked for more than 120 seconds.
[  600.123457]       Not tainted 6.1.0-57-cloud-amd64 #1 Debian 6.1.192-3
[  600.123458] "echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.
[  600.123459] task:systemd         state:D stack:0     pid:1     ppid:0      flags:0x00000002
[  600.123460] Call Trace:
[  600.123461]  <TASK>
[  600.123462]  __schedule+0x34d/0x9e0
[  600.123463]  schedule+0x5a/0xd0
[  600.123464]  percpu_down_write+0xd4/0x1e0
[  600.123465]  ? cgroup_kn_lock_live+0x4c/0xb0
[  600.123466]  cgroup_procs_write_start+0x6c/0x1b0
[  600.123467]  __cgroup_procs_write+0x4f/0x160
[  600.123468]  kernfs_fop_write_iter+0x11c/0x1d0
[  600.123469]  vfs_write+0x2c7/0x3e0
[  600.123470]  ksys_write+0x5f/0xe0
[  600.123471] RIP: 0033:0x7f1d04716350
[  600.123472]  </TASK>
[  722.000001] INFO: task systemd:1 blocked for more than 241 seconds.
[  722.000002] task:systemd         state:D stack:0     pid:1     ppid:0      flags:0x00000002
[  722.000003] Call Trace:
[  722.000004]  <TASK>
[  722.000005]  __schedule+0x34d/0x9e0
[  722.000006]  schedule+0x5a/0xd0
[  722.000007]  percpu_down_write+0xd4/0x1e0
[  722.000008]  cgroup_procs_write_start+0x6c/0x1b0
[  722.000009]  __cgroup_procs_write+0x4f/0x160
[  722.000010]  kernfs_fop_write_iter+0x11c/0x1d0
[  722.000011]  vfs_write+0x2c7/0x3e0
[  722.000012]  </TASK>
[  800.000000] sysrq: Show Blocked State
` + forkBlocked("runc", "bash", "runc") +
		`[  800.000034] task:kworker/0:1     state:I stack:0     pid:12    ppid:2      flags:0x00004000
[  800.000035] Call Trace:
[  800.000036]  <TASK>
[  800.000037]  __schedule+0x34d/0x9e0
[  800.000038]  worker_thread+0xb5/0x3a0
[  800.000039]  kthread+0xd7/0x100
[  800.000040]  </TASK>
[  800.000041]  dump_stack_lvl+0x44/0x5c
[  801.000000] Begin: a line of systemd's own
[  802.000000] watchdog: Perf NMI watchdog permanently disabled
`
	got := kernelReports(console)
	want := []string{
		"2× INFO: task systemd blocked for more than 120s.",
		"1× sysrq: Show Blocked State",
		"3× blocked at percpu_rwsem_wait < __percpu_down_read < copy_process < kernel_clone < __do_sys_clone: runc(D) bash(D)",
		"2× blocked at percpu_down_write < cgroup_procs_write_start < __cgroup_procs_write < kernfs_fop_write_iter < vfs_write: systemd(D)",
		"1× blocked at worker_thread < kthread: kworker/0:1(I)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("kernelReports:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := kernelReports("[    0.000000] Linux version 6.1.0\n[    1.0] systemd[1]: started\n"); len(got) != 0 {
		t.Errorf("a clean console gave reports: %q", got)
	}
}
