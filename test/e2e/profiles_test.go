// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

// Profiles selected by annotation: a pod asks for admin-defined
// profiles with nri-sysctl.io/profiles; a profile applies only where its
// allow lists say, in the annotation's order, above the defaults and below
// the pod's own sysctls. Values are read inside the containers, and
// `nri-sysctl explain --annotation` must say the same. Every line of the
// matrix runs this: spec mode on 2.3 and later, namespace mode before.

import (
	"fmt"
	"maps"
	"strings"
	"testing"
)

const profilesConfig = `sysctls:
  net.ipv4.tcp_keepalive_time: "600"
  net.ipv4.tcp_keepalive_intvl: "15"
profiles:
  low-latency:
    allowedNamespaces: ["e2e-trading-*"]
    sysctls: {net.ipv4.tcp_keepalive_time: "300", net.core.somaxconn: "2048"}
  patient:
    sysctls: {net.ipv4.tcp_keepalive_time: "900", net.ipv4.tcp_keepalive_probes: "7"}
`

const annotationProfiles = "nri-sysctl.io/profiles"

func TestProfiles(t *testing.T) {
	c := getCluster(t)
	keys := []string{"net.core.somaxconn", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_keepalive_time"}
	checkMeaningful(t, map[string]string{"net.core.somaxconn": "2048", "net.ipv4.tcp_keepalive_probes": "7", "net.ipv4.tcp_keepalive_time": "300", "net.ipv4.tcp_keepalive_intvl": "15"})
	defaults := merged(only(c.kernel, keys...), map[string]string{"net.ipv4.tcp_keepalive_time": "600", "net.ipv4.tcp_keepalive_intvl": "15"})
	cfgPath := writePluginConfig(t, profilesConfig)
	startPlugin(t, profilesConfig)
	for _, tc := range []struct {
		name, namespace, profiles string
		own                       map[string]string
		want                      map[string]string
		skipped                   string // in the container's skipped annotation
	}{
		{"allowed", "e2e-trading-a", "low-latency", nil,
			merged(defaults, map[string]string{"net.ipv4.tcp_keepalive_time": "300", "net.core.somaxconn": "2048"}), ""},
		{"not allowed here", "e2e-values", "low-latency", nil,
			defaults, "profile/low-latency (not allowed in namespace e2e-values)"},
		{"two layer in order", "e2e-trading-a", "patient,low-latency", nil,
			merged(defaults, map[string]string{"net.ipv4.tcp_keepalive_time": "300", "net.core.somaxconn": "2048", "net.ipv4.tcp_keepalive_probes": "7"}), ""},
		{"the other order", "e2e-trading-a", "low-latency,patient", nil,
			merged(defaults, map[string]string{"net.ipv4.tcp_keepalive_time": "900", "net.core.somaxconn": "2048", "net.ipv4.tcp_keepalive_probes": "7"}), ""},
		{"the pod's own wins", "e2e-trading-a", "low-latency", map[string]string{"net.ipv4.tcp_keepalive_time": "333"},
			merged(defaults, map[string]string{"net.ipv4.tcp_keepalive_time": "333", "net.core.somaxconn": "2048"}), ""},
		{"no such profile", "e2e-trading-a", "nope", nil,
			defaults, "profile/nope (no such profile)"},
	} {
		t.Run(dnsLabel(tc.name), func(t *testing.T) {
			pod := runPod(t, PodSpec{Namespace: tc.namespace, Annotations: map[string]string{annotationProfiles: tc.profiles}, Sysctls: tc.own})
			id := runContainer(t, pod, "app")
			got := readSysctls(t, id, keys...)
			wantSysctls(t, fmt.Sprintf("pod in %s asking for %s", tc.namespace, tc.profiles), got, tc.want)
			if skipped := containerAnnotations(t, id)[annotationSkipped]; tc.skipped != "" && !strings.Contains(skipped, tc.skipped) {
				t.Errorf("skipped annotation %q lacks %q", skipped, tc.skipped)
			}
			// explain says what the plugin gave: its applied keys have the
			// pod's values, and the pod's other keys are the kernel's or
			// the pod's own.
			args := []string{"--config", cfgPath, "--namespace", tc.namespace, "--annotation", annotationProfiles + "=" + tc.profiles, "--mode", explainMode(c)}
			for k, v := range tc.own {
				args = append(args, "--pod-sysctl", k+"="+v)
			}
			applied, out := explainApplied(t, args...)
			fromExplain := maps.Clone(only(c.kernel, keys...))
			maps.Copy(fromExplain, tc.own)
			maps.Copy(fromExplain, applied)
			for _, k := range keys {
				if fromExplain[k] != got[k] {
					t.Errorf("%s: explain gives %q, the pod reads %q\nexplain said:\n%s", k, fromExplain[k], got[k], out)
				}
			}
		})
	}
}

// explainMode is the mode explain should assume for this containerd: who
// writes the sysctls.
func explainMode(c *cluster) string {
	if specModeExpected(c) {
		return "spec"
	}
	return "namespace"
}
