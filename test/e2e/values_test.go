// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

// Values the kernel refuses: a typo in one value used to pass
// validate and then fail every pod on the node. The kernel probe writes
// each value in throw-away namespaces, so validate, the plugin's start and
// a reload refuse it; values that look odd but are valid still reach pods,
// in the form the kernel keeps. Every line of the matrix runs this, so it
// runs in spec mode (2.3 and later) and namespace mode (older).

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// refusedValueConfigs each hold one value the kernel refuses, beside a
// good key that must not slip through either.
var refusedValueConfigs = []struct {
	name, config, key, reason string
}{
	{"not a number", "sysctls:\n  net.ipv4.tcp_keepalive_intvl: \"15\"\n  net.ipv4.tcp_keepalive_time: \"abc\"\n",
		"sysctls.net.ipv4.tcp_keepalive_time", `the kernel refuses "abc" (invalid argument)`},
	{"low above high", "sysctls:\n  net.ipv4.tcp_keepalive_intvl: \"15\"\n  net.ipv4.ip_local_port_range: \"60000 1000\"\n",
		"sysctls.net.ipv4.ip_local_port_range", `the kernel refuses "60000 1000" (invalid argument)`},
	{"negative somaxconn", "sysctls:\n  net.ipv4.tcp_keepalive_intvl: \"15\"\n  net.core.somaxconn: -5\n",
		"sysctls.net.core.somaxconn", `the kernel refuses "-5" (invalid argument)`},
	{"octal", "sysctls:\n  net.ipv4.tcp_keepalive_intvl: \"15\"\n  net.ipv4.tcp_keepalive_time: \"010\"\n",
		"sysctls.net.ipv4.tcp_keepalive_time", `the kernel stores "010" as "8"; write 8`},
	{"a rule's value", "sysctls:\n  net.ipv4.tcp_keepalive_intvl: \"15\"\nrules:\n  - name: web\n    match: {namespaces: [web]}\n    sysctls: {net.ipv4.tcp_keepalive_probes: \"5x\"}\n",
		"rules[0].sysctls.net.ipv4.tcp_keepalive_probes", `the kernel refuses "5x" (invalid argument)`},
}

// TestKernelRefusedValues: validate exits 1 naming the key and the reason,
// the plugin refuses to start with the same words, and a pod started
// meanwhile runs with the kernel's values.
func TestKernelRefusedValues(t *testing.T) {
	c := getCluster(t)
	bin := pluginBinary(t)
	keys := []string{"net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_time"}
	for _, bad := range refusedValueConfigs {
		t.Run(dnsLabel(bad.name), func(t *testing.T) {
			path := writePluginConfig(t, bad.config)
			code, out := runExpectExit(t, bin, "validate", "--config", path)
			if want := ": " + bad.key + ": " + bad.reason; code != 1 || !strings.Contains(out, want) {
				t.Errorf("validate: exit %d (want 1), output should hold %q:\n%s", code, want, out)
			}
			code, out = runPluginExpectExit(t, bad.config)
			// The log line quotes the error: its quotes are escaped.
			logged := strings.ReplaceAll(": "+bad.key+": "+bad.reason, `"`, `\"`)
			if code == 0 || !strings.Contains(out, logged) || !strings.Contains(out, "refusing to start") {
				t.Errorf("plugin: exit %d (want non-zero), output should refuse to start naming %q:\n%s", code, logged, out)
			}
		})
	}
	pod := runPod(t, PodSpec{Namespace: "e2e-values"})
	id := runContainer(t, pod, "app")
	wantSysctls(t, "pod while the plugin is refused", readSysctls(t, id, keys...), only(c.kernel, keys...))
}

// TestReloadToRefusedValueKeepsConfig: a reload (SIGHUP) to a value the
// kernel refuses is rejected whole, each one counted as a failed reload
// while config_info still names the config in force, and the next pods
// start with the old config's values, read inside the container.
func TestReloadToRefusedValueKeepsConfig(t *testing.T) {
	checkMeaningful(t, serviceValuesA)
	addr := freeAddress(t)
	text := defaultsYAML(serviceValuesA)
	p := startPlugin(t, text, "--metrics-address", addr)
	keys := sortedKeys(serviceValuesA)
	wantSysctls(t, "pod before the reload", podValues(t, "e2e-values", keys...), serviceValuesA)
	sum := sha256.Sum256([]byte(text))
	hash := hex.EncodeToString(sum[:])[:12]
	const failed = `nri_sysctl_config_reloads_total{result="failure"}`
	before := scrape(t, addr)[failed]
	for i, bad := range refusedValueConfigs {
		rewriteConfig(t, p.configPath, bad.config)
		sighup(t, p)
		waitUntil(t, 10*time.Second, "the reload to "+bad.name+" to be rejected", func() (bool, string) {
			m := scrape(t, addr)
			return m[failed] == before+float64(i+1), fmt.Sprintf("%s = %v", failed, m[failed])
		})
	}
	if !p.running() {
		t.Fatalf("plugin exited on a refused value: %v\n%s", p.waitErr, tail(p.logPath, 40))
	}
	if info := scrape(t, addr); !slices.ContainsFunc(seriesOf(info, "nri_sysctl_config_info"), func(s string) bool { return strings.Contains(s, `hash="`+hash+`"`) }) {
		t.Errorf("config_info no longer names the config in force (%s): %v", hash, seriesOf(info, "nri_sysctl_config_info"))
	}
	for i := 1; i <= 2; i++ {
		wantSysctls(t, fmt.Sprintf("pod #%d after the rejected reloads", i), podValues(t, "e2e-values", keys...), serviceValuesA)
	}
}

// TestOddButValidValues: values that look odd but are valid pass, and the
// pod reads each in the form the kernel keeps, which the annotation shows:
// a tab between fields, the whole GID range, a per-interface key (the
// pod's eth0, probed on the default entry), and a time in milliseconds
// that the kernel rounds to jiffies.
func TestOddButValidValues(t *testing.T) {
	bin := pluginBinary(t)
	config := "sysctls:\n" +
		"  net.ipv4.ip_local_port_range: \"10000\\t60999\"\n" +
		"  net.ipv4.ping_group_range: \"0 2147483647\"\n" +
		"  net.ipv4.conf.eth0.rp_filter: \"2\"\n" +
		"  net.ipv4.icmp_ratelimit: \"1001\"\n" +
		"  net.ipv4.tcp_keepalive_time: \"  611 \"\n"
	path := writePluginConfig(t, config)
	code, out := runExpectExit(t, bin, "validate", "--config", path)
	if code != 0 {
		t.Fatalf("validate: exit %d, want 0:\n%s", code, out)
	}
	// What the kernel keeps 1001 ms as depends on its HZ; validate says.
	rounded := "1001"
	if i := strings.Index(out, `the kernel keeps "1001" as "`); i >= 0 {
		rest := out[i+len(`the kernel keeps "1001" as "`):]
		rounded = rest[:strings.IndexByte(rest, '"')]
	}
	t.Logf("validate:\n%s", out)
	want := map[string]string{
		"net.ipv4.ip_local_port_range": "10000 60999",
		"net.ipv4.ping_group_range":    "0 2147483647",
		"net.ipv4.conf.eth0.rp_filter": "2",
		"net.ipv4.icmp_ratelimit":      rounded,
		"net.ipv4.tcp_keepalive_time":  "611",
	}
	startPlugin(t, config)
	pod := runPod(t, PodSpec{Namespace: "e2e-values"})
	id := runContainer(t, pod, "app")
	got := readSysctls(t, id, sortedKeys(want)...)
	for k, v := range got {
		got[k] = strings.Join(strings.Fields(v), " ") // the kernel prints tabs
	}
	wantSysctls(t, "pod with odd but valid values", got, want)
	// The annotation records what the pod reads, key by key.
	injected := map[string]string{}
	for _, kv := range strings.Split(containerAnnotations(t, id)[annotationInjected], ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			injected[k] = v
		}
	}
	for k, v := range want {
		if k == "net.ipv4.ping_group_range" {
			// containerd gives every pod this value itself; where the
			// lookup cannot tell it from the pod's own, it is skipped.
			continue
		}
		if injected[k] != v {
			t.Errorf("annotation %s has %s=%q, the pod reads %q", annotationInjected, k, injected[k], v)
		}
	}
}
