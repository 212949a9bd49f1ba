// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import "testing"

// TestHarness checks the environment itself, without the plugin: a pod runs,
// a container in it can be exec'ed into, and it sees the kernel's values.
func TestHarness(t *testing.T) {
	c := getCluster(t)
	pod := runPod(t, PodSpec{Namespace: "e2e-harness"})
	id := runContainer(t, pod, "app")
	if got := containerState(t, id); got != "CONTAINER_RUNNING" {
		t.Fatalf("container state %q, want CONTAINER_RUNNING", got)
	}
	got := readSysctls(t, id, baselineKeys...)
	wantSysctls(t, "pod without plugin", got, c.kernel)
	if v := readSysctl(t, id, "net.ipv4.tcp_keepalive_time"); v != c.kernel["net.ipv4.tcp_keepalive_time"] {
		t.Errorf("tcp_keepalive_time %q, want %q", v, c.kernel["net.ipv4.tcp_keepalive_time"])
	}
	// A pod's own sysctls reach its containers (they share the pod's netns).
	own := runPod(t, PodSpec{Name: "own-sysctls", Namespace: "e2e-harness", Sysctls: map[string]string{"net.ipv4.tcp_keepalive_intvl": "33"}})
	id2 := runContainer(t, own, "app")
	if v := readSysctl(t, id2, "net.ipv4.tcp_keepalive_intvl"); v != "33" {
		t.Errorf("pod with its own tcp_keepalive_intvl=33: container sees %q", v)
	}
}
