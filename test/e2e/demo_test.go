// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemo is what `make demo` shows: the shipped config/config.yaml, one
// pod, and the values inside it beside the kernel's and the host's. It is
// also a test: the shipped defaults must reach the pod.
func TestDemo(t *testing.T) {
	c := getCluster(t)
	hostLock.hold(t, false) // compares the host's values (hostlock_test.go)
	cfgText, err := os.ReadFile(filepath.Join(c.repoRoot, "config", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	startPlugin(t, string(cfgText))
	pod := runPod(t, PodSpec{Name: "demo", Namespace: "default"})
	id := runContainer(t, pod, "app")

	want := map[string]string{}
	for _, line := range strings.Split(string(cfgText), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(line, "  net.") || strings.HasPrefix(line, "  kernel.") {
			if k, v, ok := strings.Cut(trimmed, ":"); ok {
				want[k] = strings.Trim(strings.TrimSpace(v), `"`)
			}
		}
	}
	if len(want) == 0 {
		t.Fatal("found no defaults in config/config.yaml")
	}
	keys := sortedKeys(want)
	inside := readSysctls(t, id, keys...)

	var b strings.Builder
	fmt.Fprintf(&b, "nri-sysctl demo: containerd %s, the plugin with config/config.yaml, one pod (default/demo)\n\n", c.version)
	fmt.Fprintf(&b, "%-34s %-14s %-14s %-10s\n", "sysctl", "kernel default", "in the pod", "host")
	for _, k := range keys {
		fmt.Fprintf(&b, "%-34s %-14s %-14s %-10s\n", k, c.kernel[k], inside[k], hostSysctl(t, k))
	}
	fmt.Fprintf(&b, "\nkernel default  what a pod gets without the plugin: every new network namespace starts there\n")
	fmt.Fprintf(&b, "in the pod      read inside the pod's container (crictl exec ... cat /proc/sys/...): config/config.yaml's values\n")
	fmt.Fprintf(&b, "host            this machine's own value, which the plugin never touches\n")
	fmt.Fprintf(&b, "\nThe container's annotation says what it was given (crictl inspect):\n  %s=%s\n", annotationInjected, containerAnnotations(t, id)[annotationInjected])
	wantSysctls(t, "demo pod", inside, want)
	if t.Failed() {
		return
	}
	// make demo prints this file, and nothing of the test runner.
	if out := os.Getenv("NRI_SYSCTL_DEMO_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Log("\n" + b.String())
}
