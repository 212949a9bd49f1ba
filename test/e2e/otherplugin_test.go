// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/test/internal/containerdversion"
)

// startSettingPlugin runs test/noop-plugin as another NRI plugin that sets
// key=value on every container, at a lower index than nri-sysctl's 90.
func startSettingPlugin(t *testing.T, c *cluster, idx, keyValue string) {
	t.Helper()
	bin := buildNoopPlugin(t, c)
	stderr := &lockedWriter{}
	cmd := exec.Command(bin, "--nri-socket", c.nriSock, "--plugin-idx", idx, "--plugin-name", "setter", "--set-sysctl", keyValue)
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { stopProcess(cmd.Process.Pid, exited, 10*time.Second) })
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(stderr.String(), "registered with NRI") {
		if time.Now().After(deadline) {
			t.Fatalf("setter plugin did not register: %s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestKeyFromLowerIndexPluginIsKept: a sysctl that a lower-index plugin
// already set is left alone. Setting it too would be an NRI ownership
// conflict, and container creation would fail.
func TestKeyFromLowerIndexPluginIsKept(t *testing.T) {
	c := getCluster(t)
	if olderThan221(c) {
		t.Skipf("containerd %s drops NRI sysctl adjustments, its own and other plugins' alike", c.version)
	}
	if major, minor := containerdversion.Parse(c.version); major == 2 && minor < 3 {
		t.Skipf("containerd %s does not show a container's sysctls to plugins (from 2.3)", c.version)
	}
	checkMeaningful(t, map[string]string{"kernel.msgmax": "16384", "net.ipv4.tcp_keepalive_time": "600"})
	checkMeaningful(t, map[string]string{"kernel.msgmax": "12345"})
	startSettingPlugin(t, c, "10", "kernel.msgmax=12345")
	startPlugin(t, "sysctls:\n  kernel.msgmax: \"16384\"\n  net.ipv4.tcp_keepalive_time: \"600\"\n")
	pod := runPod(t, PodSpec{Namespace: "e2e-otherplugin"})
	id := runContainer(t, pod, "app")
	got := readSysctls(t, id, "kernel.msgmax", "net.ipv4.tcp_keepalive_time")
	wantSysctls(t, "container", got, map[string]string{"kernel.msgmax": "12345", "net.ipv4.tcp_keepalive_time": "600"})
	ann := containerAnnotations(t, id)
	if !strings.Contains(ann[annotationSkipped], "kernel.msgmax (already set on the container") {
		t.Errorf("annotation %s = %q, want kernel.msgmax skipped as already set", annotationSkipped, ann[annotationSkipped])
	}
}

// lockedWriter collects a process's output for reading while it runs.
type lockedWriter struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
