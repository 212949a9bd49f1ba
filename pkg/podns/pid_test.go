// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package podns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

// startPodProcess starts a process in its own network, IPC and UTS
// namespaces, as a pod sandbox, and stops it by pid when the test ends.
func startPodProcess(t *testing.T) *exec.Cmd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func owningAll(sysctl.Namespace) bool { return true }

// A pid that names another process than the pod's, as a
// reused pid would, is refused before anything is read or written: the
// process must be in the pod's network namespace.
func TestPidOutsideThePodsNetworkNamespaceIsRefused(t *testing.T) {
	pod := startPodProcess(t)
	netPath := fmt.Sprintf("/proc/%d/ns/net", pod.Process.Pid)
	// The pod's own process reads.
	got := Read(PidTarget(Process{Pid: pod.Process.Pid, NetPath: netPath}, owningAll), []string{"kernel.msgmax"})
	if v := got["kernel.msgmax"]; v.Err != nil {
		t.Fatalf("reading through the pod's process: %v", v.Err)
	}
	// Another pod's process (its own IPC, the host's network) under the
	// same target, as after a reuse of the pid.
	other := startSandbox(t)
	key, marker := "kernel.msgmax", markerFor(t, "kernel.msgmax")
	errs := Write(Target{sysctl.IPC: {Pid: other, NetPath: netPath}}, []sysctl.Sysctl{sysctl.New(key, marker)})
	if len(errs) != 1 || !errors.Is(errs[0].Err, ErrSandboxExited) || !strings.Contains(errs[0].Err.Error(), "no longer in the pod's network namespace") {
		t.Fatalf("Write through a pid outside the pod's netns: %v, want it refused as exited", errs)
	}
	if v := readIPC(t, other, key); v == marker {
		t.Errorf("the other process's IPC namespace got %s=%s", key, v)
	}
}

// A pidfd taken when the pid was first seen catches a
// process that exited since, even when the pid now names a live process.
func TestHeldPidfdCatchesAnExitedSandbox(t *testing.T) {
	first := startPodProcess(t)
	pidfd, err := OpenPidfd(first.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	_ = first.Process.Kill()
	_ = first.Wait()
	// The "reused" pid: a live process the held pidfd is not.
	live := startSandbox(t)
	got := Read(PidTarget(Process{Pid: live, Pidfd: pidfd}, owningAll), []string{"kernel.msgmax"})
	if err := got["kernel.msgmax"].Err; !errors.Is(err, ErrSandboxExited) {
		t.Fatalf("read through a pid whose first process exited: %v, want %v", err, ErrSandboxExited)
	}
	if _, err := OpenPidfd(first.Process.Pid); !errors.Is(err, ErrSandboxExited) {
		t.Errorf("OpenPidfd of an exited process: %v, want %v", err, ErrSandboxExited)
	}
}

// A refused read says read.
func TestRefusedReadSaysRead(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	got := Read(Target{sysctl.Net: {Path: "/proc/self/ns/net"}}, []string{"net.core.somaxconn"})
	err := got["net.core.somaxconn"].Err
	if !errors.Is(err, ErrNotPodNamespace) || !strings.HasPrefix(err.Error(), "refusing to read, ") {
		t.Fatalf("reading the plugin's own namespace: %v, want a refusal that says read", err)
	}
}

// readIPC reads an IPC key inside pid's IPC namespace.
func readIPC(t *testing.T, pid int, key string) string {
	t.Helper()
	out, err := exec.Command("nsenter", "-t", fmt.Sprint(pid), "-i", "cat", sysctl.Path(key)).CombinedOutput()
	if err != nil {
		t.Fatalf("nsenter: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}
