// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package podns

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/podns/podnstest"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

func acceptAny(int) error { return nil }

// ipcTarget is a hostNetwork pod's: IPC and UTS through its pid.
func ipcTarget(pid int) Target {
	return Target{sysctl.IPC: {Pid: pid}, sysctl.UTS: {Pid: pid}}
}

func TestSandboxCgroupLeaves(t *testing.T) {
	const id = "0123abcd"
	tests := []struct{ cgroupsPath, want string }{
		{"", id + " or runc-" + id + ".scope"},
		{"/kubepods/besteffort/pod-uid/" + id, id},
		{"kubepods-besteffort-poduid.slice:cri-containerd:" + id, "cri-containerd-" + id + ".scope"},
		{"system.slice:runc:pod.slice", "pod.slice"},
	}
	for _, tc := range tests {
		if got := strings.Join(sandboxCgroupLeaves(id, tc.cgroupsPath), " or "); got != tc.want {
			t.Errorf("sandboxCgroupLeaves(%q) = %q, want %q", tc.cgroupsPath, got, tc.want)
		}
	}
}

func TestInCgroupNamed(t *testing.T) {
	const v1 = "9:name=systemd:/\n8:pids:/k8s/0123abcd\n4:memory:/process_api/x\n0::/\n"
	const v2 = "0::/../../kubepods.slice/kubepods-pod1.slice/cri-containerd-0123abcd.scope\n"
	tests := []struct {
		name, text string
		leaves     []string
		ok         bool
	}{
		{"v1, one hierarchy names it", v1, []string{"0123abcd"}, true},
		{"v2 seen from a cgroup namespace", v2, []string{"cri-containerd-0123abcd.scope"}, true},
		{"another pod's", v1, []string{"ffff"}, false},
		{"a prefix is not the name", v1, []string{"0123"}, false},
		{"empty text", "", []string{"0123abcd"}, false},
	}
	for _, tc := range tests {
		err := inCgroupNamed(tc.text, tc.leaves)
		if (err == nil) != tc.ok {
			t.Errorf("%s: inCgroupNamed = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// A process in a cgroup named after the sandbox is the sandbox's; the same
// process is not another sandbox's.
func TestInSandboxCgroupReadsTheProcess(t *testing.T) {
	needRoot(t)
	const id = "nri-sysctl-test-sandbox-cgroup"
	pid := podnstest.StartInCgroup(t, syscall.CLONE_NEWIPC, id)
	if err := Linux.InSandboxCgroup(id, "")(pid); err != nil {
		t.Errorf("the sandbox's own process: %v", err)
	}
	if err := Linux.InSandboxCgroup(id, "/kubepods/pod/"+id)(pid); err != nil {
		t.Errorf("the sandbox's own process, cgroupfs path: %v", err)
	}
	if err := Linux.InSandboxCgroup("another-sandbox", "")(pid); err == nil {
		t.Error("a process of another sandbox's cgroup was taken as this one's")
	}
}

// A pid that owner says is not the pod's is not held.
func TestHoldRefusesAProcessNotThePods(t *testing.T) {
	needRoot(t)
	pid := podnstest.Start(t, syscall.CLONE_NEWIPC|syscall.CLONE_NEWUTS)
	notIt := errors.New("in another cgroup")
	if _, err := Linux.Hold(ipcTarget(pid), pid, func(int) error { return notIt }); !errors.Is(err, notIt) {
		t.Fatalf("Hold with an owner that refuses: %v, want %v", err, notIt)
	}
	if _, err := Linux.Hold(ipcTarget(pid), 0, acceptAny); !errors.Is(err, ErrSandboxExited) {
		t.Errorf("Hold of pid 0: %v, want %v", err, ErrSandboxExited)
	}
}

// The review's case at this level: a hostNetwork pod held at first
// sight, its process gone and its pid given to an unrelated process with
// an IPC namespace of its own. A write through what was held reaches
// nothing.
func TestHeldPodWritesNothingIntoAReusedPid(t *testing.T) {
	needRoot(t)
	pid := podnstest.Start(t, syscall.CLONE_NEWIPC|syscall.CLONE_NEWUTS)
	held, err := Linux.Hold(ipcTarget(pid), pid, acceptAny)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	podnstest.Kill(t, pid)
	podnstest.StartWithPid(t, syscall.CLONE_NEWIPC, pid)
	before := podnstest.ReadIn(t, pid, "-i", sysctl.Path("kernel.msgmax"))
	target, release, err := held.Target()
	if err != nil {
		t.Fatal(err)
	}
	errs := Write(target, []sysctl.Sysctl{sysctl.New("kernel.msgmax", markerFor(t, "kernel.msgmax"))})
	release()
	if len(errs) != 1 || !errors.Is(errs[0].Err, ErrSandboxExited) {
		t.Errorf("write through a held pod whose pid was reused: %v, want it refused as exited", errs)
	}
	if got := podnstest.ReadIn(t, pid, "-i", sysctl.Path("kernel.msgmax")); got != before {
		t.Errorf("the unrelated process's kernel.msgmax went from %s to %s", before, got)
	}
}

// The same process in another namespace than when it was held (it
// exec'd through unshare, keeping its pid and its pidfd alive) is refused
// by the namespace's identity, the one guard left then.
func TestHeldNamespaceThatChangedIsRefused(t *testing.T) {
	needRoot(t)
	fifo := t.TempDir() + "/go"
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// It waits for the test, then replaces itself with a process in a new
	// IPC namespace: same pid, same pidfd.
	cmd := exec.Command("sh", "-c", `read x < "$1"; exec unshare --ipc sleep 300`, "sh", fifo)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWIPC}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	held, err := Linux.Hold(Target{sysctl.IPC: {Pid: pid}}, pid, acceptAny)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	first, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/ipc")
	if err := os.WriteFile(fifo, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitForNamespaceChange(t, pid, first)
	before := podnstest.ReadIn(t, pid, "-i", sysctl.Path("kernel.msgmax"))
	target, release, err := held.Target()
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	errs := Write(target, []sysctl.Sysctl{sysctl.New("kernel.msgmax", markerFor(t, "kernel.msgmax"))})
	if len(errs) != 1 || !strings.Contains(errs[0].Err.Error(), "not the ipc namespace the pod had when first seen") {
		t.Errorf("write into a namespace other than the one held: %v, want it refused", errs)
	}
	if got := podnstest.ReadIn(t, pid, "-i", sysctl.Path("kernel.msgmax")); got != before {
		t.Errorf("the new namespace's kernel.msgmax went from %s to %s", before, got)
	}
}

func waitForNamespaceChange(t *testing.T, pid int, first string) {
	t.Helper()
	for range 500 {
		now, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/ipc")
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		if now != first && strings.TrimSpace(string(comm)) == "sleep" {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the process never moved to a new IPC namespace")
}

// A held pod's Target after Close fails, and one taken before stays usable.
func TestHeldTargetOutlivesClose(t *testing.T) {
	needRoot(t)
	pid := podnstest.Start(t, syscall.CLONE_NEWIPC|syscall.CLONE_NEWUTS)
	held, err := Linux.Hold(ipcTarget(pid), pid, acceptAny)
	if err != nil {
		t.Fatal(err)
	}
	target, release, err := held.Target()
	if err != nil {
		t.Fatal(err)
	}
	held.Close()
	if _, _, err := held.Target(); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Target after Close: %v, want %v", err, ErrNotHeld)
	}
	got := Read(target, []string{"kernel.msgmax"})
	release()
	if err := got["kernel.msgmax"].Err; err != nil {
		t.Errorf("reading through a target taken before Close: %v", err)
	}
}

// BenchmarkHold: what holding a pod's sandbox process costs (a hostNetwork
// pod's: IPC and UTS through its pid), once per pod at its first sight,
// and what each visit's Target then costs.
func BenchmarkHold(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	const cgroup = "nri-sysctl-bench-hold"
	pid := podnstest.StartInCgroup(b, syscall.CLONE_NEWIPC|syscall.CLONE_NEWUTS, cgroup)
	owner := Linux.InSandboxCgroup("unused", "/"+cgroup)
	b.Run("Hold", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			held, err := Linux.Hold(ipcTarget(pid), pid, owner)
			if err != nil {
				b.Fatal(err)
			}
			held.Close()
		}
	})
	b.Run("Target", func(b *testing.B) {
		held, err := Linux.Hold(ipcTarget(pid), pid, owner)
		if err != nil {
			b.Fatal(err)
		}
		defer held.Close()
		b.ReportAllocs()
		for b.Loop() {
			_, release, err := held.Target()
			if err != nil {
				b.Fatal(err)
			}
			release()
		}
	})
}
