// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/test/internal/containerdversion"
)

// olderThan22 tells whether the cluster's containerd predates NRI sysctl
// adjustments (2.2.1, NRI v0.11).
func olderThan221(c *cluster) bool {
	major, minor := containerdversion.Parse(c.version)
	if major != 2 {
		return major < 2
	}
	if minor != 2 {
		return minor < 2
	}
	return strings.HasPrefix(strings.TrimPrefix(c.version, "v"), "2.2.0")
}

// TestSpecModeIsDroppedByOldContainerd is the guard for the namespace-mode
// fallback. On containerd older than 2.2.1 an NRI sysctl adjustment is
// dropped silently: forcing spec mode leaves pods at kernel defaults. If
// this test ever fails, such a containerd started applying adjustments and
// the mode choice in pkg/runtimemode should be revisited; while it passes,
// namespace mode is what makes the plugin work there.
func TestSpecModeIsDroppedByOldContainerd(t *testing.T) {
	c := getCluster(t)
	if !olderThan221(c) {
		t.Skipf("containerd %s applies NRI sysctl adjustments; this guard is for versions before 2.2.1", c.version)
	}
	checkMeaningful(t, nodeDefaults)
	keys := sortedKeys(nodeDefaults)
	forcedSpec := startPlugin(t, defaultsYAML(nodeDefaults), "--mode", "spec")
	pod := runPod(t, PodSpec{Namespace: "e2e-modes"})
	id := runContainer(t, pod, "app")
	got := readSysctls(t, id, keys...)
	wantSysctls(t, "spec mode on "+c.version+" (adjustment dropped)", got, only(c.kernel, keys...))
	// The adjustment was accepted and dropped, not refused: the container
	// carries the plugin's annotation but not the sysctls.
	if ann := containerAnnotations(t, id)[annotationInjected]; ann == "" {
		t.Errorf("container lacks the %s annotation: was the plugin consulted at all?", annotationInjected)
	}

	// And with the mode chosen from the runtime version, the same pod spec
	// gets the defaults.
	t.Run("AutoModeFixesIt", func(t *testing.T) {
		forcedSpec.stop()
		startPlugin(t, defaultsYAML(nodeDefaults), "--mode", "auto")
		pod := runPod(t, PodSpec{Name: "auto", Namespace: "e2e-modes"})
		id := runContainer(t, pod, "app")
		wantSysctls(t, "auto mode on "+c.version, readSysctls(t, id, keys...), nodeDefaults)
	})
}

// TestNamespaceModeWriteFailure: a key that passes validation (its default
// entry exists) but cannot be written in the pod (no such interface) fails
// the pod's RunPodSandbox with onError: fail, and lets it start with
// onError: warn.
func TestNamespaceModeWriteFailure(t *testing.T) {
	c := getCluster(t)
	const cfg = "sysctls:\n  net.ipv4.tcp_keepalive_time: \"600\"\n  net.ipv4.conf.nosuchif9.rp_filter: \"2\"\n"
	checkMeaningful(t, map[string]string{"net.ipv4.tcp_keepalive_time": "600"})

	t.Run("FailFailsThePod", func(t *testing.T) {
		addr := freeAddress(t)
		startPlugin(t, cfg, "--mode", "namespace", "--metrics-address", addr)
		before := scrape(t, addr)
		_, err := c.runPodErr(PodSpec{Name: "nsfail", Namespace: "e2e-modes"})
		if err == nil {
			t.Fatal("pod started although a sysctl could not be written (onError: fail)")
		}
		// The key, the value and the errno (the safety net behind the kernel check).
		if !strings.Contains(err.Error(), `net.ipv4.conf.nosuchif9.rp_filter \"2\": writing /proc/sys/net/ipv4/conf/nosuchif9/rp_filter: `) {
			t.Errorf("the error reaching CRI does not name the key, the value and the errno: %v", err)
		}
		t.Logf("RunPodSandbox refused: %v", err)
		after := scrape(t, addr)
		for series, want := range map[string]float64{
			`nri_sysctl_containers_total{outcome="write_failed"}`: 1,
			`nri_sysctl_namespace_write_failures_total`:           1,
		} {
			if got := after[series] - before[series]; got < want {
				t.Errorf("%s moved by %v, want at least %v", series, got, want)
			}
		}
	})

	t.Run("WarnStartsThePod", func(t *testing.T) {
		startPlugin(t, cfg+"onError: warn\n", "--mode", "namespace")
		pod := runPod(t, PodSpec{Name: "nswarn", Namespace: "e2e-modes"})
		id := runContainer(t, pod, "app")
		if got := readSysctl(t, id, "net.ipv4.tcp_keepalive_time"); got != "600" {
			t.Errorf("tcp_keepalive_time = %s, want 600 (written before the failing key)", got)
		}
	})
}
