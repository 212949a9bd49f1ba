// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns/podnstest"
	"github.com/nri-sysctl/nri-sysctl/pkg/probe"
)

// These tests run the plugin's own guards against the kernel: real
// processes stand for pod sandboxes (in a cgroup named after the sandbox,
// as runc puts them), and the plugin reads and writes their namespaces.

const msgmaxPath = "/proc/sys/kernel/msgmax"

func msgmaxConfig(v string) string {
	return "mode: namespace\nsysctls:\n  kernel.msgmax: " + v + "\n"
}

// newKernelPlugin is a plugin that reaches pods' namespaces for real,
// and whose log the test reads.
func newKernelPlugin(t *testing.T, cfgText string) (*plugin, *bytes.Buffer) {
	t.Helper()
	if !hasRoot() {
		t.Skip("needs root")
	}
	p := newTestPlugin(t, cfgText, &fakeFetcher{})
	var logs bytes.Buffer
	p.log.SetOutput(&logs)
	p.writeNamespaces, p.readNamespaces, p.visitNamespaces = podns.Write, podns.Read, podns.Visit
	p.freshValues = probe.Fresh
	p.held = newHeldPods()
	p.openPodState(t.TempDir())
	return p, &logs
}

// hostNetworkPod is a pod with its own IPC and UTS namespaces and the
// host's network, whose sandbox process is pid: no network namespace path
// pins it.
func hostNetworkPod(id string, pid int) *api.PodSandbox {
	pod := testPod(id, "ipc", "uts")
	pod.Pid = uint32(pid)
	return pod
}

// The review's case, through the real path: a hostNetwork pod seen at
// Synchronize or RunPodSandbox and converged; its sandbox process gone
// and its pid given to an unrelated process with an IPC namespace of its
// own; a reload and a pass. The unrelated process keeps its value.
func TestConvergeWritesNothingIntoAReusedPid(t *testing.T) {
	for _, seenAt := range []string{"Synchronize", "RunPodSandbox"} {
		t.Run(seenAt, func(t *testing.T) {
			p, logs := newKernelPlugin(t, msgmaxConfig("16384"))
			id := "nri-sysctl-test-reused-pid-" + strings.ToLower(seenAt)
			pid := podnstest.StartInCgroup(t, syscall.CLONE_NEWIPC|syscall.CLONE_NEWUTS, id)
			pod := hostNetworkPod(id, pid)
			ctx := context.Background()
			if seenAt == "Synchronize" {
				if _, err := p.Synchronize(ctx, []*api.PodSandbox{pod}, nil); err != nil {
					t.Fatal(err)
				}
			} else if err := p.RunPodSandbox(ctx, pod); err != nil {
				t.Fatal(err)
			}
			p.convergePass(ctx)
			if got := podnstest.ReadIn(t, pid, "-i", msgmaxPath); got != "16384" {
				t.Fatalf("the pod itself: kernel.msgmax %s, want 16384\n%s", got, logs)
			}
			podnstest.Kill(t, pid)
			podnstest.StartWithPid(t, syscall.CLONE_NEWIPC, pid)
			before := podnstest.ReadIn(t, pid, "-i", msgmaxPath)
			reload(t, p, msgmaxConfig("32768"))
			p.convergePass(ctx)
			if got := podnstest.ReadIn(t, pid, "-i", msgmaxPath); got != before {
				t.Errorf("an unrelated process under the pod's old pid: kernel.msgmax went from %s to %s", before, got)
			}
		})
	}
}

// A pid the runtime lists at Synchronize may already name another
// process: one not in the sandbox's cgroup is never held, and nothing is
// written into it, with one line logged however many passes run.
func TestSynchronizedPidOfAnotherProcessIsNotHeld(t *testing.T) {
	p, logs := newKernelPlugin(t, msgmaxConfig("16384"))
	pid := podnstest.Start(t, syscall.CLONE_NEWIPC|syscall.CLONE_NEWUTS)
	before := podnstest.ReadIn(t, pid, "-i", msgmaxPath)
	ctx := context.Background()
	pod := hostNetworkPod("nri-sysctl-test-not-the-pods", pid)
	if _, err := p.Synchronize(ctx, []*api.PodSandbox{pod}, nil); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		p.convergePass(ctx)
	}
	if got := podnstest.ReadIn(t, pid, "-i", msgmaxPath); got != before {
		t.Errorf("a process outside the sandbox's cgroup: kernel.msgmax went from %s to %s", before, got)
	}
	const line = "cannot converge the pod: the plugin does not hold its sandbox process"
	if n := strings.Count(logs.String(), line); n != 1 {
		t.Errorf("logged %q %d times over three passes, want once:\n%s", line, n, logs)
	}
}

// A stopped pod is out of convergence at once: a reload writes nothing
// into it, even while its process is still there.
func TestStoppedPodIsNotConverged(t *testing.T) {
	p, _ := newKernelPlugin(t, msgmaxConfig("16384"))
	const id = "nri-sysctl-test-stopped-pod"
	pid := podnstest.StartInCgroup(t, syscall.CLONE_NEWIPC|syscall.CLONE_NEWUTS, id)
	pod := hostNetworkPod(id, pid)
	ctx := context.Background()
	if err := p.RunPodSandbox(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := p.StopPodSandbox(ctx, pod); err != nil {
		t.Fatal(err)
	}
	reload(t, p, msgmaxConfig("32768"))
	p.convergePass(ctx)
	if got := podnstest.ReadIn(t, pid, "-i", msgmaxPath); got != "16384" {
		t.Errorf("a stopped pod after a reload: kernel.msgmax %s, want 16384, as RunPodSandbox left it", got)
	}
	if _, _, err := p.held.target(id); err == nil {
		t.Error("a stopped pod's process is still held")
	}
}

// Synchronize keeps what was held at a pod's first sight, holds new pods
// and lets go of the others, and what was reported of a pod goes with it.
func TestSynchronizeRebuildsWhatIsHeld(t *testing.T) {
	p := newTestPlugin(t, testConfig, &fakeFetcher{})
	var taken []string
	p.held.take = func(pod *api.PodSandbox) (heldProcess, error) {
		taken = append(taken, pod.GetId())
		_, target := readSandbox(pod, true)
		return fakeHeld{target}, nil
	}
	a, b := testPod("a", "ipc"), testPod("b", "ipc")
	ctx := context.Background()
	if err := p.RunPodSandbox(ctx, a); err != nil {
		t.Fatal(err)
	}
	p.running.firstCannot("a", "kernel.msgmax")
	p.running.firstNotHeld("a")
	if _, err := p.Synchronize(ctx, []*api.PodSandbox{a, b}, nil); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(taken, ","); got != "a,b" {
		t.Errorf("held %s, want a at RunPodSandbox and b at Synchronize, once each", got)
	}
	if _, err := p.Synchronize(ctx, []*api.PodSandbox{b}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.held.target("a"); err == nil {
		t.Error("a pod no longer listed is still held")
	}
	if !p.running.firstCannot("a", "kernel.msgmax") || !p.running.firstNotHeld("a") {
		t.Error("what was reported of a pod no longer listed was kept")
	}
}

func hasRoot() bool { return syscall.Geteuid() == 0 }

// The NRI socket gets the containerd socket's checks: a socket in a
// directory others can write is refused, whoever serves it, since its
// peer hands the plugin the pids and namespace paths it writes into.
func TestNRISocketIsTrustedAsContainerdsIs(t *testing.T) {
	if !hasRoot() {
		t.Skip("needs root")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "nri.sock")
	shared := filepath.Join(dir, "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(shared, "nri.sock")
	for _, path := range []string{good, bad} {
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
	}
	conn, err := dialNRI(good)
	if err != nil {
		t.Fatalf("root's socket in root's directory: %v", err)
	}
	conn.Close()
	if _, err := dialNRI(bad); err == nil || !strings.Contains(err.Error(), "refusing NRI socket "+bad) || !strings.Contains(err.Error(), "writable by group or others") {
		t.Errorf("a socket in a directory others can write: %v, want it refused, naming the socket and why", err)
	}
}
