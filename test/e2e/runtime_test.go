// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/test/internal/containerdversion"
)

// specModeExpected tells which mode auto mode must pick on the cluster's
// containerd: spec only from 2.3.0, whose NRI (v0.12) applies sysctl
// adjustments without the v0.11 nil-map panic of every 2.2 release.
func specModeExpected(c *cluster) bool {
	major, minor := containerdversion.Parse(c.version)
	return major > 2 || (major == 2 && minor >= 3)
}

// crashesOnSysctlAdjustments: every containerd 2.2 release (2.2.1 and
// later) vendors NRI v0.11.0, which panics on any sysctl adjustment.
func crashesOnSysctlAdjustments(c *cluster) bool {
	major, minor := containerdversion.Parse(c.version)
	return major == 2 && minor == 2 && !strings.HasPrefix(strings.TrimPrefix(c.version, "v"), "2.2.0")
}

// TestAutoModeKeepsContainerdRunning is the regression test for the
// containerd 2.2.x crash: with default flags, pods get their defaults,
// through the mode this containerd can take, and containerd is still
// running and serving CRI after them.
func TestAutoModeKeepsContainerdRunning(t *testing.T) {
	c := getCluster(t)
	checkMeaningful(t, nodeDefaults)
	keys := sortedKeys(nodeDefaults)
	startPlugin(t, defaultsYAML(nodeDefaults))
	for i := 0; i < 3; i++ {
		pod := runPod(t, PodSpec{Name: "auto-" + string(rune('a'+i)), Namespace: "e2e-runtime"})
		id := runContainer(t, pod, "app")
		wantSysctls(t, "pod "+pod.Spec.Name, readSysctls(t, id, keys...), nodeDefaults)
		// The mode shows in the container's OCI spec: runc gets the
		// sysctls there in spec mode, and nothing in namespace mode.
		specSysctls := containerSpecSysctls(t, id)
		if got, want := len(specSysctls) > 0, specModeExpected(c); got != want {
			t.Errorf("containerd %s: sysctls in the container's spec: %v, want spec mode %v (spec: %v)", c.version, got, want, specSysctls)
		}
	}
	time.Sleep(500 * time.Millisecond) // a panic takes the process down at once
	select {
	case <-c.exited:
		t.Fatalf("containerd %s exited during the test: %v\n%s", c.version, c.waitErr, c.containerdLogTail(40))
	default:
	}
	if out, err := c.crictlRaw("version"); err != nil {
		t.Fatalf("containerd %s no longer serves CRI: %v %s", c.version, err, out)
	}
}

// TestForcedSpecModeRefusedWhereItCrashes: on containerd 2.2.x, --mode spec
// would take containerd down at the first container, so the plugin refuses
// to register and says why; containerd keeps running, and pods start (at
// kernel values: the plugin is not registered).
func TestForcedSpecModeRefusedWhereItCrashes(t *testing.T) {
	c := getCluster(t)
	if !crashesOnSysctlAdjustments(c) {
		t.Skipf("containerd %s does not crash on NRI sysctl adjustments", c.version)
	}
	cfg := writePluginConfig(t, defaultsYAML(nodeDefaults))
	p := launchPlugin(t, nil, pluginArgs(c, cfg, []string{"--mode", "spec"})...)
	p.stoppedByTest.Store(true) // it may exit or keep retrying; either is fine
	want := "refusing spec mode on containerd " + strings.TrimPrefix(c.version, "v")
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(tail(p.logPath, 200), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the plugin did not refuse spec mode (want %q in its log):\n%s", want, tail(p.logPath, 40))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("refusal: %s", lineWith(tail(p.logPath, 200), want))
	pod := runPod(t, PodSpec{Name: "refused", Namespace: "e2e-runtime"})
	id := runContainer(t, pod, "app")
	keys := sortedKeys(nodeDefaults)
	wantSysctls(t, "pod while the plugin refuses to register", readSysctls(t, id, keys...), only(c.kernel, keys...))
	select {
	case <-c.exited:
		t.Fatalf("containerd exited: %v", c.waitErr)
	default:
	}
}

func lineWith(text, s string) string {
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}

// TestPodStartedWhilePluginDownIsHealed: a pod (and its first container)
// created while the plugin is down gets the defaults once the plugin is
// back, from the convergence after its registration (runningPods:
// converge, the default): the create path, which cannot read the pod
// first, writes nothing into a pod that had containers when the plugin
// first saw it. Its next container and the first see them (they share
// the pod's namespaces); the pod's own value stays; an excluded pod and a
// hostNetwork pod are still left alone.
func TestPodStartedWhilePluginDownIsHealed(t *testing.T) {
	c := getCluster(t)
	hostLock.hold(t, false) // compares the host's values (hostlock_test.go)
	checkMeaningful(t, nodeDefaults)
	keys := sortedKeys(nodeDefaults)
	cfg := defaultsYAML(nodeDefaults) + "exclude:\n  namespaces: [e2e-heal-excluded]\n"

	plain := runPod(t, PodSpec{Name: "plain", Namespace: "e2e-heal"})
	own := runPod(t, PodSpec{Name: "own", Namespace: "e2e-heal", Sysctls: map[string]string{"net.ipv4.tcp_keepalive_intvl": "33"}})
	excluded := runPod(t, PodSpec{Name: "excluded", Namespace: "e2e-heal-excluded"})
	hostNet := runPod(t, PodSpec{Name: "hostnet", Namespace: "e2e-heal", HostNetwork: true})
	first := map[*Pod]string{}
	for _, pod := range []*Pod{plain, own, excluded, hostNet} {
		first[pod] = runContainer(t, pod, "first")
	}
	wantSysctls(t, "plain pod before the plugin", readSysctls(t, first[plain], keys...), only(c.kernel, keys...))
	hostBefore := map[string]string{}
	for _, k := range keys {
		hostBefore[k] = hostSysctl(t, k)
	}

	startPlugin(t, cfg)
	want := map[*Pod]map[string]string{
		plain:    nodeDefaults,
		own:      with(nodeDefaults, "net.ipv4.tcp_keepalive_intvl", "33"),
		excluded: only(c.kernel, keys...),
		hostNet:  with(only(hostBefore, keys...), "kernel.msgmax", nodeDefaults["kernel.msgmax"]),
	}
	waitUntil(t, 20*time.Second, "the pods to converge", func() (bool, string) {
		for pod, w := range want {
			if got := readSysctls(t, first[pod], keys...); !mapsEqualOn(got, w, keys) {
				return false, fmt.Sprintf("%s: %v, want %v", pod.Spec.Name, got, w)
			}
		}
		return true, ""
	})
	for _, pod := range []*Pod{plain, own, excluded, hostNet} {
		second := runContainer(t, pod, "second")
		name := pod.Spec.Name
		wantSysctls(t, name+" pod, second container", readSysctls(t, second, keys...), want[pod])
		wantSysctls(t, name+" pod, first container (same namespaces)", readSysctls(t, first[pod], keys...), want[pod])
	}
	for _, k := range keys {
		if got := hostSysctl(t, k); got != hostBefore[k] {
			t.Errorf("host %s changed from %s to %s", k, hostBefore[k], got)
		}
	}
}

// with returns a copy of m with key set to value.
func with(m map[string]string, key, value string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	out[key] = value
	return out
}
