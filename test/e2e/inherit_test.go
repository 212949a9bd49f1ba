// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

// inheritFromHost: pods get the host's current values of the
// keys it names, re-read on reload. The host's keepalive keys are set for
// the test and restored afterwards. Values are read inside containers and
// on the host, never taken from the plugin's log.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// setHostSysctl sets a sysctl of the host (the test's namespaces) and puts
// the value it had back when the test ends, failed or not.
func setHostSysctl(t *testing.T, key, value string) {
	t.Helper()
	if !hostLock.held(true) {
		t.Fatalf("test bug: %s writes the host's %s without hostLock.hold(t, true)", t.Name(), key)
	}
	path := filepath.Join("/proc/sys", sysctlPath(key))
	old := hostSysctl(t, key)
	t.Cleanup(func() {
		if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
			t.Errorf("restore the host's %s=%s: %v", key, old, err)
		}
	})
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		t.Fatalf("set the host's %s=%s: %v", key, value, err)
	}
	if got := hostSysctl(t, key); got != value {
		t.Fatalf("host %s reads %s after writing %s", key, got, value)
	}
}

func TestInheritFromHost(t *testing.T) {
	c := getCluster(t)
	hostLock.hold(t, true) // writes the host's values (hostlock_test.go)
	const (
		timeKey   = "net.ipv4.tcp_keepalive_time"
		intvlKey  = "net.ipv4.tcp_keepalive_intvl"
		probesKey = "net.ipv4.tcp_keepalive_probes"
	)
	keys := []string{timeKey, intvlKey, probesKey}
	host := map[string]string{timeKey: "1234", intvlKey: "41", probesKey: "7"}
	for _, k := range keys {
		// A value a pod has anyway would show nothing.
		if host[k] == c.kernel[k] {
			t.Fatalf("test bug: host value %s=%s equals a pod's value without the plugin", k, host[k])
		}
		setHostSysctl(t, k, host[k])
	}

	p := startPlugin(t, "inheritFromHost:\n  - net.ipv4.tcp_keepalive_*\n")
	t.Run("PodGetsTheHostsValues", func(t *testing.T) {
		wantSysctls(t, "pod", podValues(t, "e2e-inherit", keys...), host)
	})

	// An explicit value wins over the inherited one; the other keys stay
	// the host's.
	rewriteConfig(t, p.configPath, "inheritFromHost:\n  - net.ipv4.tcp_keepalive_*\nsysctls:\n  "+intvlKey+": 33\n")
	sighup(t, p)
	t.Run("ExplicitValueWins", func(t *testing.T) {
		eventuallyPodValues(t, "e2e-inherit", map[string]string{timeKey: "1234", intvlKey: "33", probesKey: "7"}, 10*time.Second)
	})

	// The host's value changes (sysctl -w); a reload reads it again.
	setHostSysctl(t, timeKey, "1300")
	t.Run("NoReloadNoChange", func(t *testing.T) {
		wantSysctls(t, "pod before the reload", podValues(t, "e2e-inherit", keys...), map[string]string{timeKey: "1234", intvlKey: "33", probesKey: "7"})
	})
	sighup(t, p)
	t.Run("ReloadReadsTheNewHostValue", func(t *testing.T) {
		eventuallyPodValues(t, "e2e-inherit", map[string]string{timeKey: "1300", intvlKey: "33", probesKey: "7"}, 10*time.Second)
	})

	// A hostNetwork pod sees the host's values, which the plugin leaves
	// alone: the explicit intvl 33 is not written to the host.
	t.Run("HostNetworkUntouched", func(t *testing.T) {
		wantHost := map[string]string{timeKey: "1300", intvlKey: "41", probesKey: "7"}
		pod := runPod(t, PodSpec{Namespace: "e2e-inherit", HostNetwork: true})
		id := runContainer(t, pod, "app")
		wantSysctls(t, "hostNetwork container", readSysctls(t, id, keys...), wantHost)
		for _, k := range keys {
			if got := hostSysctl(t, k); got != wantHost[k] {
				t.Errorf("host %s = %s after the hostNetwork pod started, want %s", k, got, wantHost[k])
			}
		}
	})
	if !p.running() {
		t.Fatalf("plugin exited: %v", p.waitErr)
	}
	// For the reader only, not evidence: what the plugin said about it.
	if data, err := os.ReadFile(p.logPath); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "inherit") {
				t.Logf("plugin: %s", line)
			}
		}
	}
}
