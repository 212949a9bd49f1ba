// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDemo is what `make demo` shows: the shipped config/config.yaml, a
// pod that was running before the plugin and one created under it, and the
// values inside both beside the kernel's and the host's; then a reload that
// reaches both running pods. It is also a test: the shipped defaults must
// reach both pods, and the reload's value both, without a restart.
func TestDemo(t *testing.T) {
	c := getCluster(t)
	hostLock.hold(t, false) // compares the host's values (hostlock_test.go)
	cfgText, err := os.ReadFile(filepath.Join(c.repoRoot, "config", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := shippedDefaults(string(cfgText))
	if len(want) == 0 {
		t.Fatal("found no defaults in config/config.yaml")
	}
	keys := sortedKeys(want)

	before := runPod(t, PodSpec{Name: "before", Namespace: "default"})
	beforeID := runContainer(t, before, "app")
	atItsStart := readSysctls(t, beforeID, keys...)

	pluginStarted := time.Now()
	plugin := startPlugin(t, string(cfgText))
	pod := runPod(t, PodSpec{Name: "demo", Namespace: "default"})
	id := runContainer(t, pod, "app")
	inside := readSysctls(t, id, keys...)
	wantSysctls(t, "the pod created under the plugin", inside, want)
	var converged map[string]string
	waitUntil(t, 30*time.Second, "the pod from before the plugin to get the defaults", func() (bool, string) {
		converged = readSysctls(t, beforeID, keys...)
		return mapsEqualOn(converged, want, keys), fmt.Sprint(converged)
	})
	tookConverge := time.Since(pluginStarted)

	// A reload: the keepalive time halved in the config, both pods
	// still running.
	const reloadKey = "net.ipv4.tcp_keepalive_time"
	line := "  " + reloadKey + ": " + want[reloadKey]
	if want[reloadKey] == "" || !strings.Contains(string(cfgText), line+"\n") {
		t.Fatalf("config/config.yaml has no line %q, which the demo's reload changes", line)
	}
	reloaded := halved(t, want[reloadKey])
	rewriteConfig(t, plugin.configPath, strings.Replace(string(cfgText), line+"\n", "  "+reloadKey+": "+reloaded+"\n", 1))
	sighup(t, plugin)
	tookReload := waitUntil(t, 30*time.Second, "the reload to reach both running pods", func() (bool, string) {
		a, b := readSysctl(t, beforeID, reloadKey), readSysctl(t, id, reloadKey)
		return a == reloaded && b == reloaded, fmt.Sprintf("before: %s, demo: %s", a, b)
	})

	const row = "%-31s %-15s %-24s %-8s %s\n"
	var b strings.Builder
	fmt.Fprintf(&b, "nri-sysctl demo: containerd %s, the plugin with config/config.yaml\n\n", c.version)
	fmt.Fprintf(&b, "1. default/before was running before the plugin started; default/demo was created under it.\n\n")
	fmt.Fprintf(&b, row, "sysctl", "kernel default", "before: at start -> now", "demo", "host")
	for _, k := range keys {
		fmt.Fprintf(&b, row, k, c.kernel[k], atItsStart[k]+" -> "+converged[k], inside[k], hostSysctl(t, k))
	}
	fmt.Fprintf(&b, "\nkernel default  what a pod gets without the plugin: every new network namespace starts there\n")
	fmt.Fprintf(&b, "before          read inside the running pod's container (crictl exec ... cat /proc/sys/...):\n")
	fmt.Fprintf(&b, "                brought to config/config.yaml's values within %.0f s of the plugin's start, no restart\n", tookConverge.Seconds()+0.5)
	fmt.Fprintf(&b, "demo            read inside the new pod's container: the values it was created with\n")
	fmt.Fprintf(&b, "host            this machine's own value, which the plugin never touches\n")
	fmt.Fprintf(&b, "\n2. %s: %s -> %s in the config, and a reload (SIGHUP); both pods keep running.\n\n", reloadKey, want[reloadKey], reloaded)
	fmt.Fprintf(&b, row, "sysctl", "config", "before", "demo", "host")
	fmt.Fprintf(&b, row, reloadKey, reloaded, readSysctl(t, beforeID, reloadKey), readSysctl(t, id, reloadKey), hostSysctl(t, reloadKey))
	fmt.Fprintf(&b, "\nBoth running pods had the new value within %.0f s of the reload.\n", tookReload.Seconds()+0.5)
	fmt.Fprintf(&b, "\nThe new pod's container annotation says what it was given at creation (crictl inspect):\n  %s=%s\n", annotationInjected, containerAnnotations(t, id)[annotationInjected])
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

// shippedDefaults reads the sysctls block of config/config.yaml: its
// two-space-indented net. and kernel. keys.
func shippedDefaults(cfgText string) map[string]string {
	want := map[string]string{}
	for _, line := range strings.Split(cfgText, "\n") {
		if !strings.HasPrefix(line, "  net.") && !strings.HasPrefix(line, "  kernel.") {
			continue
		}
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			v, _, _ = strings.Cut(v, "#")
			want[k] = strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	return want
}

// halved is half a whole number of seconds, the value the demo's reload sets.
func halved(t *testing.T, v string) string {
	t.Helper()
	n, err := strconv.Atoi(v)
	if err != nil || n < 2 {
		t.Fatalf("%q is no whole number the demo can halve", v)
	}
	return strconv.Itoa(n / 2)
}
