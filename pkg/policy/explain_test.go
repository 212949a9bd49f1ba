// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
)

const explainTestConfig = `
sysctls:
  net.core.somaxconn: 1024
rules:
  - name: batch
    match: {namespaces: [batch]}
    sysctls: {net.ipv4.tcp_fin_timeout: 15}
profiles:
  low-latency:
    allowedNamespaces: ["trading-*"]
    sysctls: {net.core.somaxconn: 4096}
exclude:
  namespaces: [kube-system]
`

// Each key, the rules, the profiles and the exclusion get a line, in that
// order, and each line says why.
func TestExplainLines(t *testing.T) {
	cfg := mustConfig(t, explainTestConfig)
	profiles := map[string]string{config.ProfilesAnnotation: "low-latency"}
	for _, tc := range []struct {
		name string
		pod  Pod
		want string
	}{
		{"a rule's key", Pod{Namespace: "batch", Own: ownNormal}, `
net.core.somaxconn 1024 applied
net.ipv4.tcp_fin_timeout 15 applied
rules: batch (in this order; a later rule overrides an earlier one)
profiles: none asked for (nri-sysctl.io/profiles)
excluded: no`},
		{"no rule", Pod{Namespace: "default", Own: ownNormal}, `
net.core.somaxconn 1024 applied
net.ipv4.tcp_fin_timeout - not set (no default and no matching rule)
rules: none match
profiles: none asked for (nri-sysctl.io/profiles)
excluded: no`},
		{"a profile asked for where it is allowed", Pod{Namespace: "trading-eu", Own: ownNormal, Annotations: profiles}, `
net.core.somaxconn 4096 applied
net.ipv4.tcp_fin_timeout - not set (no default and no matching rule)
rules: none match
profiles: low-latency applied (in this order; a later profile overrides an earlier one)
excluded: no`},
		{"excluded", Pod{Namespace: "kube-system", Own: ownNormal, Annotations: profiles}, `
net.core.somaxconn - skipped (pod excluded: namespace kube-system)
net.ipv4.tcp_fin_timeout - skipped (pod excluded: namespace kube-system)
rules: not applied (the pod is excluded)
profiles: not applied (the pod is excluded)
excluded: yes, by namespace kube-system`},
	} {
		got := strings.Join(Explain(cfg, nil, Input{Pod: tc.pod}), "\n")
		if want := strings.TrimPrefix(tc.want, "\n"); got != want {
			t.Errorf("%s:\n%s\nwant:\n%s", tc.name, got, want)
		}
	}
	// Outside its allowed namespaces, the profile is skipped with its reason.
	lines := Explain(cfg, nil, Input{Pod: Pod{Namespace: "default", Own: ownNormal, Annotations: profiles}})
	if got := lines[len(lines)-2]; !strings.HasPrefix(got, "profiles: low-latency skipped (") {
		t.Errorf("a profile outside its namespaces: %q, want it skipped with a reason", got)
	}
}
