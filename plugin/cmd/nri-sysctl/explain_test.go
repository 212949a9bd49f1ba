// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/plugin/internal/trusteddir"
	"github.com/nri-sysctl/nri-sysctl/test/fixture"
)

const explainConfig = `
sysctls:
  net.ipv4.tcp_keepalive_time: 600
  net.core.somaxconn: 1024
  kernel.msgmax: 16384
  net.ipv4.ping_group_range: "0 2147483647"
rules:
  - name: web
    match: {namespaces: ["web-*"]}
    sysctls: {net.core.somaxconn: 2048}
  - name: big-backlog
    match: {labels: {backlog: big}}
    sysctls: {net.core.somaxconn: 4096}
  - name: batch
    match: {namespaces: [batch]}
    sysctls: {net.ipv4.tcp_fin_timeout: 20}
exclude:
  namespaces: [kube-system]
`

func TestExplain(t *testing.T) {
	path := trusteddir.WriteConfig(t, explainConfig)
	hostNet := "skipped (pod shares the host's namespace (network))"
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"ordinary pod", []string{"--namespace", "default"}, `
kernel.msgmax 16384 applied
net.core.somaxconn 1024 applied
net.ipv4.ping_group_range 0 2147483647 applied
net.ipv4.tcp_fin_timeout - not set (no default and no matching rule)
net.ipv4.tcp_keepalive_time 600 applied
rules: none match
profiles: none asked for (nri-sysctl.io/profiles)
excluded: no
running pods: a running pod like this one gets the same at the next convergence, but for keys another writer changed (runningPods: converge)
`},
		{"hostNetwork: only the IPC key", []string{"--namespace", "default", "--host-network"}, `
kernel.msgmax 16384 applied
net.core.somaxconn 1024 ` + hostNet + `
net.ipv4.ping_group_range 0 2147483647 ` + hostNet + `
net.ipv4.tcp_fin_timeout - not set (no default and no matching rule)
net.ipv4.tcp_keepalive_time 600 ` + hostNet + `
rules: none match
profiles: none asked for (nri-sysctl.io/profiles)
excluded: no
running pods: a running pod like this one gets the same at the next convergence, but for keys another writer changed (runningPods: converge)
`},
		{"hostIPC", []string{"--namespace", "default", "--host-ipc"}, `
kernel.msgmax 16384 skipped (pod shares the host's namespace (ipc))
net.core.somaxconn 1024 applied
net.ipv4.ping_group_range 0 2147483647 applied
net.ipv4.tcp_fin_timeout - not set (no default and no matching rule)
net.ipv4.tcp_keepalive_time 600 applied
rules: none match
profiles: none asked for (nri-sysctl.io/profiles)
excluded: no
running pods: a running pod like this one gets the same at the next convergence, but for keys another writer changed (runningPods: converge)
`},
		{"the pod's own value wins, slash form too", []string{"--namespace", "default", "--pod-sysctl", "net/ipv4/tcp_keepalive_time=300"}, `
kernel.msgmax 16384 applied
net.core.somaxconn 1024 applied
net.ipv4.ping_group_range 0 2147483647 applied
net.ipv4.tcp_fin_timeout - not set (no default and no matching rule)
net.ipv4.tcp_keepalive_time 600 skipped (pod sets it itself)
rules: none match
profiles: none asked for (nri-sysctl.io/profiles)
excluded: no
running pods: a running pod like this one gets the same at the next convergence, but for keys another writer changed (runningPods: converge)
`},
		{"later rule wins", []string{"--namespace", "web-a", "--name", "front", "--label", "backlog=big", "--label", "tier=web"}, `
kernel.msgmax 16384 applied
net.core.somaxconn 4096 applied
net.ipv4.ping_group_range 0 2147483647 applied
net.ipv4.tcp_fin_timeout - not set (no default and no matching rule)
net.ipv4.tcp_keepalive_time 600 applied
rules: web, big-backlog (in this order; a later rule overrides an earlier one)
profiles: none asked for (nri-sysctl.io/profiles)
excluded: no
running pods: a running pod like this one gets the same at the next convergence, but for keys another writer changed (runningPods: converge)
`},
		{"a rule's own key", []string{"--namespace", "batch"}, `
kernel.msgmax 16384 applied
net.core.somaxconn 1024 applied
net.ipv4.ping_group_range 0 2147483647 applied
net.ipv4.tcp_fin_timeout 20 applied
net.ipv4.tcp_keepalive_time 600 applied
rules: batch (in this order; a later rule overrides an earlier one)
profiles: none asked for (nri-sysctl.io/profiles)
excluded: no
running pods: a running pod like this one gets the same at the next convergence, but for keys another writer changed (runningPods: converge)
`},
		{"user namespace: ping_group_range clamped to kubelet's GIDs", []string{"--namespace", "default", "--host-users=false"}, `
kernel.msgmax 16384 applied
net.core.somaxconn 1024 applied
net.ipv4.ping_group_range 0 65535 applied
net.ipv4.tcp_fin_timeout - not set (no default and no matching rule)
net.ipv4.tcp_keepalive_time 600 applied
rules: none match
profiles: none asked for (nri-sysctl.io/profiles)
excluded: no
running pods: a running pod like this one gets the same at the next convergence, but for keys another writer changed (runningPods: converge)
`},
		{"excluded", []string{"--namespace", "kube-system", "--label", "backlog=big"}, `
kernel.msgmax - skipped (pod excluded: namespace kube-system)
net.core.somaxconn - skipped (pod excluded: namespace kube-system)
net.ipv4.ping_group_range - skipped (pod excluded: namespace kube-system)
net.ipv4.tcp_fin_timeout - skipped (pod excluded: namespace kube-system)
net.ipv4.tcp_keepalive_time - skipped (pod excluded: namespace kube-system)
rules: not applied (the pod is excluded)
profiles: none asked for (nri-sysctl.io/profiles)
excluded: yes, by namespace kube-system
running pods: a running pod like this one gets the same at the next convergence, but for keys another writer changed (runningPods: converge)
`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { wantExplain(t, path, tc.args, tc.want) })
	}
}

// An invalid config: exit 1 with validate's messages.
func TestExplainInvalidConfig(t *testing.T) {
	path := trusteddir.WriteConfig(t, "sysctls:\n  vm.swappiness: 10\n  net.core.somaxconn: yes\n")
	var vOut, vErr, eOut, eErr bytes.Buffer
	if code := run([]string{"validate", "--config", path, "--skip-kernel-check"}, &vOut, &vErr); code != 1 {
		t.Fatalf("validate: exit %d", code)
	}
	if code := run([]string{"explain", "--config", path, "--skip-kernel-check", "--namespace", "default"}, &eOut, &eErr); code != 1 {
		t.Fatalf("explain: exit %d, want 1; stdout:\n%s", code, eOut.String())
	}
	if eErr.String() != vErr.String() || eOut.Len() != 0 {
		t.Errorf("explain said\n%s(stdout %q)\nvalidate said\n%s", eErr.String(), eOut.String(), vErr.String())
	}
	if !strings.Contains(eErr.String(), path+":2: sysctls.vm.swappiness") {
		t.Errorf("no file:line: key in %q", eErr.String())
	}
}

func TestExplainFlags(t *testing.T) {
	path := trusteddir.WriteConfig(t, explainConfig)
	for _, args := range [][]string{
		{"explain", "--config", path},                                           // no --namespace
		{"explain", "--config", path, "--namespace", "a", "--label", "x"},       // not K=V
		{"explain", "--config", path, "--namespace", "a", "extra"},              // an argument
		{"explain", "--config", path, "--namespace", "a", "--pod-sysctl", "=1"}, // no key
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2; stderr %s", args, code, stderr.String())
		}
	}
}

// wantExplain runs explain (no kernel check) on the config at path with
// args, and wants exactly want (a leading newline dropped).
func wantExplain(t *testing.T, path string, args []string, want string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args = append([]string{"explain", "--config", path, "--skip-kernel-check"}, args...)
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	if got, want := stdout.String(), strings.TrimPrefix(want, "\n"); got != want {
		t.Errorf("nri-sysctl %s:\n got:\n%s\nwant:\n%s", strings.Join(args, " "), got, want)
	}
}

func TestExplainAnnotation(t *testing.T) {
	path := trusteddir.WriteConfig(t, fixture.ProfilesConfig)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"two profiles, in order", []string{"--namespace", "trading-eu", "--annotation", "nri-sysctl.io/profiles=low-latency,many-conns"}, `
net.core.somaxconn 8192 applied
net.ipv4.tcp_keepalive_time 600 applied
net.ipv4.tcp_slow_start_after_idle 0 applied
rules: none match
profiles: low-latency applied, many-conns applied (in this order; a later profile overrides an earlier one)
excluded: no
running pods: a running pod like this one gets the same at the next convergence, but for keys another writer changed (runningPods: converge)
`},
		{"not allowed and unknown", []string{"--namespace", "default", "--annotation", "nri-sysctl.io/profiles=low-latency,x"}, `
net.core.somaxconn 1024 applied
net.ipv4.tcp_keepalive_time 600 applied
net.ipv4.tcp_slow_start_after_idle - not set (no default and no matching rule)
rules: none match
profiles: low-latency skipped (not allowed in namespace default), x skipped (no such profile) (in this order; a later profile overrides an earlier one)
excluded: no
running pods: a running pod like this one gets the same at the next convergence, but for keys another writer changed (runningPods: converge)
`},
		{"excluded by annotation", []string{"--namespace", "trading-eu", "--annotation", "nri-sysctl.io/profiles=low-latency", "--annotation", "nri-sysctl.io/off=true"}, `
net.core.somaxconn - skipped (pod excluded: annotation nri-sysctl.io/off=true)
net.ipv4.tcp_keepalive_time - skipped (pod excluded: annotation nri-sysctl.io/off=true)
net.ipv4.tcp_slow_start_after_idle - skipped (pod excluded: annotation nri-sysctl.io/off=true)
rules: not applied (the pod is excluded)
profiles: not applied (the pod is excluded)
excluded: yes, by annotation nri-sysctl.io/off=true
running pods: a running pod like this one gets the same at the next convergence, but for keys another writer changed (runningPods: converge)
`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { wantExplain(t, path, tc.args, tc.want) })
	}
}
