// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package podnstest starts processes that stand for a pod's sandbox in
// tests (root only): in namespaces of their own, in a cgroup named after
// the sandbox as runc names it, or under a pid chosen to be a reused one.
// Each is stopped by its pid, and its cgroup removed, when the test ends.
package podnstest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// started holds this package's processes by pid, for Kill.
var started sync.Map

// Start starts a process (sleep) in new namespaces of the kinds in
// cloneflags (syscall.CLONE_NEWIPC and the like), and stops it when the
// test ends. It returns the process's pid.
func Start(t testing.TB, cloneflags uintptr) int {
	t.Helper()
	cmd := command(cloneflags)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	keep(t, cmd)
	return cmd.Process.Pid
}

// keep registers cmd for Kill and stops it when the test ends.
func keep(t testing.TB, cmd *exec.Cmd) {
	started.Store(cmd.Process.Pid, cmd)
	t.Cleanup(func() { stop(cmd) })
}

// StartInCgroup is Start with the process moved into a cgroup of its own
// named name, as runc names a sandbox's (its ID), removed when the test
// ends.
func StartInCgroup(t testing.TB, cloneflags uintptr, name string) int {
	t.Helper()
	dir := cgroupDir(t, name)
	pid := Start(t, cloneflags)
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatalf("moving pid %d into cgroup %s: %v", pid, dir, err)
	}
	return pid
}

// cgroupDir makes a cgroup named name in a hierarchy of this machine (the
// pids controller's on cgroup v1, the unified one on v2) and removes it
// when the test ends, after the processes put in it are stopped.
func cgroupDir(t testing.TB, name string) string {
	t.Helper()
	for _, root := range []string{"/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
			continue
		}
		dir := filepath.Join(root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatalf("making cgroup %s: %v", dir, err)
		}
		// Registered first, so it runs after the process's own cleanup.
		t.Cleanup(func() {
			if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("removing cgroup %s: %v", dir, err)
			}
		})
		return dir
	}
	t.Skip("no cgroup hierarchy to make a sandbox's cgroup in")
	return ""
}

// StartWithPid starts a process as Start does, under pid: a pid that was
// another process's, as the kernel reuses pids. It sets the kernel's last
// pid just below it and forks, and tries again when another fork on the
// machine took the pid first.
func StartWithPid(t testing.TB, cloneflags uintptr, pid int) {
	t.Helper()
	const tries = 1000
	for range tries {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0o644); err != nil {
			t.Fatalf("setting the last pid: %v", err)
		}
		cmd := command(cloneflags)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if cmd.Process.Pid == pid {
			keep(t, cmd)
			return
		}
		stop(cmd)
	}
	t.Fatalf("pid %d not reused in %d forks", pid, tries)
}

func command(cloneflags uintptr) *exec.Cmd {
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: cloneflags}
	return cmd
}

// Kill stops the process pid, one this package started, and reaps it:
// its pid is free to be reused from then on.
func Kill(t testing.TB, pid int) {
	t.Helper()
	cmd, ok := started.LoadAndDelete(pid)
	if !ok {
		t.Fatalf("pid %d was not started here", pid)
	}
	stop(cmd.(*exec.Cmd))
}

// stop stops and reaps cmd, once.
func stop(cmd *exec.Cmd) {
	if cmd.ProcessState != nil {
		return
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

// ReadIn reads a key's /proc/sys file inside pid's namespaces (nsenter's
// flags, "-i" for IPC), as a reader inside the pod would.
func ReadIn(t testing.TB, pid int, flag, procPath string) string {
	t.Helper()
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(pid), flag, "cat", procPath).CombinedOutput()
	if err != nil {
		t.Fatalf("nsenter -t %d %s cat %s: %v: %s", pid, flag, procPath, err, out)
	}
	return strings.TrimSuffix(string(out), "\n")
}
