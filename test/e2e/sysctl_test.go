// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

// End-to-end cases for nri-sysctl. Every value is read inside a container with
// `crictl exec ... cat /proc/sys/...` (or from a container's own output), and
// the host's values are read from the host's /proc/sys where the host is at
// stake. The plugin's log is never used as evidence.

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

const annotationInjected = "nri-sysctl.io/injected"

// nodeDefaults are the node defaults most cases use. Each differs from the
// kernel default and from the host's value (checked by checkMeaningful).
var nodeDefaults = map[string]string{
	"net.ipv4.tcp_keepalive_time":         "600",
	"net.ipv4.tcp_keepalive_intvl":        "15",
	"net.core.somaxconn":                  "1111",
	"net.ipv4.ip_unprivileged_port_start": "2000",
	"kernel.msgmax":                       "16384",
}

func defaultsYAML(defaults map[string]string) string {
	var b strings.Builder
	b.WriteString("sysctls:\n")
	for _, k := range sortedKeys(defaults) {
		fmt.Fprintf(&b, "  %s: %q\n", k, defaults[k])
	}
	return b.String()
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

// injectedValue is the expected value of the nri-sysctl.io/injected annotation.
func injectedValue(m map[string]string) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

// merged returns a copy of base with over applied on top.
func merged(base map[string]string, over map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// only returns the entries of m whose keys are given.
func only(m map[string]string, keys ...string) map[string]string {
	out := map[string]string{}
	for _, k := range keys {
		out[k] = m[k]
	}
	return out
}

// checkMeaningful fails the test if a configured value equals the kernel's or
// the host's value: such a case could not tell the plugin's work from nothing.
func checkMeaningful(t *testing.T, values map[string]string) {
	t.Helper()
	c := getCluster(t)
	host := hostValuesNow(t, sortedKeys(values))
	for _, k := range sortedKeys(values) {
		kernel, ok := c.kernel[k]
		if !ok {
			t.Fatalf("test bug: %s is not in baselineKeys", k)
		}
		if values[k] == kernel {
			t.Fatalf("test value %s=%s equals the value without plugin; pick another", k, values[k])
		}
		if values[k] == host[k] {
			t.Fatalf("test value %s=%s equals the host's value; pick another", k, values[k])
		}
	}
}

// TestNodeDefaults covers the cases that share the plain node-defaults config:
// one plugin instance serves all subtests.
func TestNodeDefaults(t *testing.T) {
	c := getCluster(t)
	hostLock.hold(t, false) // compares the host's values (hostlock_test.go)
	checkMeaningful(t, nodeDefaults)
	plugin := startPlugin(t, defaultsYAML(nodeDefaults))
	keys := sortedKeys(nodeDefaults)

	// Case 1: the defaults reach an app container and an init container; a
	// pod started without the plugin (c.kernel, measured at start-up) had the
	// kernel's values.
	t.Run("AppAndInitContainer", func(t *testing.T) {
		t.Logf("values without plugin: %v", only(c.kernel, keys...))
		pod := runPod(t, PodSpec{Namespace: "e2e-defaults"})
		initID := createContainer(t, pod, "init", append([]string{"sh", "-c", sysctlScript, "sh"}, keys...)...)
		startContainer(t, initID)
		if code := waitExited(t, initID, 30*time.Second); code != 0 {
			t.Fatalf("init container exited %d; logs:\n%s", code, containerLogs(t, initID))
		}
		wantSysctls(t, "init container (its own output)", parseKeyValues(containerLogs(t, initID)), nodeDefaults)

		appID := runContainer(t, pod, "app")
		wantSysctls(t, "app container", readSysctls(t, appID, keys...), nodeDefaults)
	})

	// Case 2: a pod's own sysctls win key by key.
	t.Run("PodSysctlsWinPerKey", func(t *testing.T) {
		pod := runPod(t, PodSpec{Namespace: "e2e-defaults", Sysctls: map[string]string{"net.ipv4.tcp_keepalive_intvl": "33"}})
		want := merged(nodeDefaults, map[string]string{"net.ipv4.tcp_keepalive_intvl": "33"})
		first := runContainer(t, pod, "first")
		wantSysctls(t, "first container", readSysctls(t, first, keys...), want)
		// A later container must not reset the pod's value either.
		second := runContainer(t, pod, "second")
		wantSysctls(t, "second container", readSysctls(t, second, keys...), want)
		wantSysctls(t, "first container after the second started", readSysctls(t, first, keys...), want)
		if ann := containerAnnotations(t, first)[annotationInjected]; strings.Contains(ann, "net.ipv4.tcp_keepalive_intvl=15") {
			t.Errorf("annotation %s=%q claims the node default for a key the pod set itself", annotationInjected, ann)
		}
	})

	// Case 3: a node default for ip_unprivileged_port_start wins over
	// containerd's implicit 0, but a pod that sets it keeps its own value.
	t.Run("UnprivilegedPortStart", func(t *testing.T) {
		const key = "net.ipv4.ip_unprivileged_port_start"
		if c.kernel[key] != "0" {
			t.Logf("note: without plugin a pod has %s=%s (containerd's implicit value is usually 0)", key, c.kernel[key])
		}
		plain := runPod(t, PodSpec{Name: "port-default", Namespace: "e2e-defaults"})
		id := runContainer(t, plain, "app")
		if got := readSysctl(t, id, key); got != nodeDefaults[key] {
			t.Errorf("pod without its own %s: got %s, want node default %s", key, got, nodeDefaults[key])
		}
		own := runPod(t, PodSpec{Name: "port-own", Namespace: "e2e-defaults", Sysctls: map[string]string{key: "500"}})
		id = runContainer(t, own, "app")
		if got := readSysctl(t, id, key); got != "500" {
			t.Errorf("pod with its own %s=500: got %s", key, got)
		}
		if got := readSysctl(t, id, "net.ipv4.tcp_keepalive_time"); got != nodeDefaults["net.ipv4.tcp_keepalive_time"] {
			t.Errorf("pod with its own %s: tcp_keepalive_time %s, want node default %s", key, got, nodeDefaults["net.ipv4.tcp_keepalive_time"])
		}
	})

	// Case 4: a hostNetwork pod starts, gets no net.* (it would be the host's),
	// and the host's values do not change; non-net defaults still apply.
	t.Run("HostNetwork", func(t *testing.T) {
		var netKeys []string
		for _, k := range keys {
			if strings.HasPrefix(k, "net.") {
				netKeys = append(netKeys, k)
			}
		}
		before := map[string]string{}
		for _, k := range netKeys {
			before[k] = hostSysctl(t, k)
		}
		pod := runPod(t, PodSpec{Namespace: "e2e-defaults", HostNetwork: true})
		id := runContainer(t, pod, "app")
		if st := containerState(t, id); st != "CONTAINER_RUNNING" {
			t.Fatalf("container in hostNetwork pod: state %s", st)
		}
		inside := readSysctls(t, id, keys...)
		wantSysctls(t, "hostNetwork container (net.* = host's)", inside, before)
		wantSysctls(t, "hostNetwork container (non-net defaults)", inside, only(nodeDefaults, "kernel.msgmax"))
		for _, k := range netKeys {
			if after := hostSysctl(t, k); after != before[k] {
				t.Errorf("host %s changed from %s to %s", k, before[k], after)
			}
		}
	})

	// Case 5: a hostIPC pod starts, the host's IPC values do not change, and a
	// normal pod gets the IPC default.
	t.Run("HostIPC", func(t *testing.T) {
		const key = "kernel.msgmax"
		before := hostSysctl(t, key)
		pod := runPod(t, PodSpec{Name: "host-ipc", Namespace: "e2e-defaults", HostIPC: true})
		id := runContainer(t, pod, "app")
		if st := containerState(t, id); st != "CONTAINER_RUNNING" {
			t.Fatalf("container in hostIPC pod: state %s", st)
		}
		inside := readSysctls(t, id, keys...)
		if inside[key] != before {
			t.Errorf("hostIPC container: %s = %s, want the host's %s", key, inside[key], before)
		}
		// The pod has its own network namespace: net.* defaults apply.
		wantSysctls(t, "hostIPC container (net defaults)", inside, only(nodeDefaults, "net.ipv4.tcp_keepalive_time", "net.core.somaxconn"))
		if after := hostSysctl(t, key); after != before {
			t.Errorf("host %s changed from %s to %s", key, before, after)
		}
		normal := runPod(t, PodSpec{Name: "own-ipc", Namespace: "e2e-defaults"})
		id = runContainer(t, normal, "app")
		if got := readSysctl(t, id, key); got != nodeDefaults[key] {
			t.Errorf("normal pod: %s = %s, want %s", key, got, nodeDefaults[key])
		}
		if after := hostSysctl(t, key); after != before {
			t.Errorf("host %s changed from %s to %s", key, before, after)
		}
	})

	// Case 8: all containers of a pod see the same values, and each carries
	// the annotation listing what was injected.
	t.Run("SeveralContainersAndAnnotation", func(t *testing.T) {
		pod := runPod(t, PodSpec{Namespace: "e2e-defaults"})
		var ids []string
		for _, name := range []string{"one", "two", "three"} {
			ids = append(ids, runContainer(t, pod, name))
		}
		for i, id := range ids {
			wantSysctls(t, fmt.Sprintf("container %d", i+1), readSysctls(t, id, keys...), nodeDefaults)
			ann := containerAnnotations(t, id)
			if i == 0 {
				t.Logf("container 1: annotation %s=%q; OCI spec linux.sysctl %v", annotationInjected, ann[annotationInjected], containerSpecSysctls(t, id))
			}
			if got, want := ann[annotationInjected], injectedValue(nodeDefaults); got != want {
				t.Errorf("container %d: annotation %s = %q, want %q", i+1, annotationInjected, got, want)
			}
		}
	})

	// Case 9: pods created back to back all get the defaults.
	t.Run("ManyPods", func(t *testing.T) {
		const n = 30
		start := time.Now()
		ids := make([]string, 0, n)
		for i := 0; i < n; i++ {
			pod := runPod(t, PodSpec{Name: fmt.Sprintf("many-%02d", i), Namespace: "e2e-many"})
			ids = append(ids, runContainer(t, pod, "app"))
		}
		t.Logf("%d pods with one container each started in %s", n, time.Since(start).Round(time.Millisecond))
		for i, id := range ids {
			wantSysctls(t, fmt.Sprintf("pod %d", i), readSysctls(t, id, keys...), nodeDefaults)
		}
		if !plugin.running() {
			t.Error("the plugin exited during the run")
		}
	})
}

// rulesConfig exercises rules (namespace glob, labels, order) and exclusions
// (namespace glob, label, runtime handler).
const rulesConfig = `sysctls:
  net.ipv4.tcp_keepalive_time: "600"
rules:
  - name: web-backlog
    match:
      namespaces: ["web-*"]
    sysctls:
      net.core.somaxconn: "1111"
  - name: fast-keepalive
    match:
      labels:
        nri-sysctl-test/tier: fast
    sysctls:
      net.ipv4.tcp_keepalive_intvl: "15"
  - name: big-backlog
    match:
      labels:
        nri-sysctl-test/backlog: big
    sysctls:
      net.core.somaxconn: "2222"
exclude:
  namespaces: ["kube-*"]
  labels:
    nri-sysctl-test/skip: "true"
  runtimeHandlers: ["` + altRuntimeHandler + `"]
`

// Case 6: rules and exclusions.
func TestRulesAndExclusions(t *testing.T) {
	c := getCluster(t)
	checkMeaningful(t, map[string]string{
		"net.ipv4.tcp_keepalive_time":  "600",
		"net.core.somaxconn":           "1111",
		"net.ipv4.tcp_keepalive_intvl": "15",
	})
	checkMeaningful(t, map[string]string{"net.core.somaxconn": "2222"})
	startPlugin(t, rulesConfig)
	keys := []string{"net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_keepalive_intvl", "net.core.somaxconn"}
	kernel := only(c.kernel, keys...)

	cases := []struct {
		name string
		spec PodSpec
		want map[string]string
	}{
		{"NoRuleMatches", PodSpec{Namespace: "batch"},
			merged(kernel, map[string]string{"net.ipv4.tcp_keepalive_time": "600"})},
		{"NamespaceGlobRule", PodSpec{Namespace: "web-frontend"},
			merged(kernel, map[string]string{"net.ipv4.tcp_keepalive_time": "600", "net.core.somaxconn": "1111"})},
		{"GlobNeedsTheDash", PodSpec{Namespace: "web"},
			merged(kernel, map[string]string{"net.ipv4.tcp_keepalive_time": "600"})},
		{"LabelRule", PodSpec{Namespace: "batch", Labels: map[string]string{"nri-sysctl-test/tier": "fast"}},
			merged(kernel, map[string]string{"net.ipv4.tcp_keepalive_time": "600", "net.ipv4.tcp_keepalive_intvl": "15"})},
		{"LabelValueMustMatch", PodSpec{Namespace: "batch", Labels: map[string]string{"nri-sysctl-test/tier": "slow"}},
			merged(kernel, map[string]string{"net.ipv4.tcp_keepalive_time": "600"})},
		{"BothRulesApply", PodSpec{Namespace: "web-api", Labels: map[string]string{"nri-sysctl-test/tier": "fast"}},
			merged(kernel, map[string]string{"net.ipv4.tcp_keepalive_time": "600", "net.core.somaxconn": "1111", "net.ipv4.tcp_keepalive_intvl": "15"})},
		{"LaterRuleWins", PodSpec{Namespace: "web-api", Labels: map[string]string{"nri-sysctl-test/backlog": "big"}},
			merged(kernel, map[string]string{"net.ipv4.tcp_keepalive_time": "600", "net.core.somaxconn": "2222"})},
		{"ExcludedNamespace", PodSpec{Namespace: "kube-system", Labels: map[string]string{"nri-sysctl-test/tier": "fast"}},
			kernel},
		{"ExcludedLabel", PodSpec{Namespace: "web-frontend", Labels: map[string]string{"nri-sysctl-test/skip": "true"}},
			kernel},
		{"ExcludedRuntimeHandler", PodSpec{Namespace: "web-frontend", RuntimeHandler: altRuntimeHandler},
			kernel},
		{"OtherHandlerNameNotExcluded", PodSpec{Namespace: "web-frontend", RuntimeHandler: "runc"},
			merged(kernel, map[string]string{"net.ipv4.tcp_keepalive_time": "600", "net.core.somaxconn": "1111"})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			spec.Name = dnsLabel(tc.name)
			pod := runPod(t, spec)
			id := runContainer(t, pod, "app")
			wantSysctls(t, fmt.Sprintf("pod in %s labels %v handler %q", spec.Namespace, spec.Labels, spec.RuntimeHandler), readSysctls(t, id, keys...), tc.want)
		})
	}
}

// Case 7: a config with a key that is not namespaced is refused: the plugin
// exits non-zero naming the key, and pods still run with the kernel's values.
func TestInvalidConfigRefused(t *testing.T) {
	c := getCluster(t)
	bin := pluginBinary(t)
	keys := []string{"net.ipv4.tcp_keepalive_time", "net.core.somaxconn"}

	valid := writePluginConfig(t, defaultsYAML(map[string]string{"net.ipv4.tcp_keepalive_time": "600"}))
	if code, out := runExpectExit(t, bin, "validate", "--config", valid); code != 0 {
		t.Fatalf("validate of a valid config: exit %d\n%s", code, out)
	}

	for _, bad := range []struct{ key, value string }{
		{"vm.swappiness", "10"},
		{"kernel.core_pattern", "core"},
	} {
		t.Run(bad.key, func(t *testing.T) {
			cfg := defaultsYAML(map[string]string{
				"net.ipv4.tcp_keepalive_time": "600",
				"net.core.somaxconn":          "1111",
				bad.key:                       bad.value,
			})
			code, out := runPluginExpectExit(t, cfg)
			t.Logf("plugin exit %d, output:\n%s", code, out)
			if code == 0 {
				t.Errorf("plugin exited 0 with non-namespaced key %s", bad.key)
			}
			if !strings.Contains(out, bad.key) {
				t.Errorf("plugin output does not name the offending key %s", bad.key)
			}

			path := writePluginConfig(t, cfg)
			code, out = runExpectExit(t, bin, "validate", "--config", path)
			if code != 1 || !strings.Contains(out, bad.key) {
				t.Errorf("validate: exit %d (want 1), output should name %s:\n%s", code, bad.key, out)
			}

			// Pods started meanwhile run, with the kernel's values.
			pod := runPod(t, PodSpec{Namespace: "e2e-invalid"})
			id := runContainer(t, pod, "app")
			wantSysctls(t, "pod while the plugin is refused", readSysctls(t, id, keys...), only(c.kernel, keys...))
		})
	}
}
