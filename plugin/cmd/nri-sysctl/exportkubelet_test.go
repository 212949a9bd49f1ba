// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/plugin/internal/trusteddir"
	"github.com/nri-sysctl/nri-sysctl/test/fixture"
)

// A bad config is refused with validate's messages, every problem listed,
// and nothing on stdout: no half fragment reaches kubelet's --config-dir.
func TestExportKubeletRefusesABadConfig(t *testing.T) {
	path := trusteddir.WriteConfig(t, "sysctls:\n  vm.swappiness: 1\n  net.ipv4.tcp_keepalive_time: \"60\\n\"\nrulez: []\n")
	for _, skip := range [][]string{{"--skip-kernel-check"}, nil} {
		if skip == nil && os.Geteuid() != 0 {
			continue // the kernel probe needs root
		}
		var vOut, vErr, eOut, eErr bytes.Buffer
		vCode := run(append(append([]string{"validate"}, skip...), "--config", path), &vOut, &vErr)
		eCode := run(append(append([]string{"export-kubelet"}, skip...), "--config", path), &eOut, &eErr)
		if eCode != 1 || vCode != 1 {
			t.Fatalf("%v: export-kubelet exit %d, validate exit %d, want 1 and 1; stderr %s", skip, eCode, vCode, eErr.String())
		}
		if eOut.Len() != 0 {
			t.Errorf("%v: stdout %q, want nothing", skip, eOut.String())
		}
		if eErr.String() != vErr.String() {
			t.Errorf("%v: export-kubelet says\n%s\nvalidate says\n%s", skip, eErr.String(), vErr.String())
		}
		for _, want := range []string{path + ":2: sysctls.vm.swappiness: vm.swappiness is not namespaced", path + ":3: sysctls.net.ipv4.tcp_keepalive_time: value contains a newline", path + ":4: rulez: unknown field"} {
			if !strings.Contains(eErr.String(), want) {
				t.Errorf("%v: stderr lacks %q:\n%s", skip, want, eErr.String())
			}
		}
	}
}

// Without the kernel probe, inheritFromHost cannot be read from the host,
// and a fragment without those values would not be the plugin's defaults.
func TestExportKubeletInheritanceNeedsTheProbe(t *testing.T) {
	path := trusteddir.WriteConfig(t, "inheritFromHost: [net.ipv4.tcp_fin_timeout]\n")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"export-kubelet", "--skip-kernel-check", "--config", path}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1; stdout %s", code, stdout.String())
	}
	if want := path + ": inheritFromHost needs the kernel probe to read the host's values"; !strings.Contains(stderr.String(), want) || stdout.Len() != 0 {
		t.Fatalf("stderr %q lacks %q, or stdout %q is not empty", stderr.String(), want, stdout.String())
	}
}

// On this node: the inherited value is the host's, read now; the key the
// user namespace probe refuses to runc in a pod is named.
func TestExportKubeletOnThisNode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the kernel probe needs root")
	}
	previous := probeUserNamespace
	probeUserNamespace = fixture.UserNamespaceProbe(fixture.ProbedOn618)
	t.Cleanup(func() { probeUserNamespace = previous })
	host, err := os.ReadFile("/proc/sys/net/ipv4/tcp_fin_timeout")
	if err != nil {
		t.Fatal(err)
	}
	path := trusteddir.WriteConfig(t, "sysctls:\n  kernel.domainname: nri-sysctl.test\n  kernel.msgmax: 16384\ninheritFromHost: [net.ipv4.tcp_fin_timeout]\n")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"export-kubelet", "--config", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d; stderr %s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"\ndefaultPodSysctls:\n",
		"  kernel.msgmax: \"16384\"\n",
		"  net.ipv4.tcp_fin_timeout: \"" + strings.TrimSpace(string(host)) + "\"\n",
		"  # Inherited from the host (inheritFromHost \"net.ipv4.tcp_fin_timeout\", line\n",
		// runc in the pod writes kubelet's defaults: its refusal counts,
		// not host root's (kernel.msgmax in fixture.ProbedOn618).
		"  # hostUsers: false pods: the kernel refuses this key inside a pod's own user\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "the kernel refuses this key"); n != 1 {
		t.Errorf("%d keys named as refused in a user namespace, want 1 (kernel.domainname):\n%s", n, out)
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr %q, want nothing", stderr.String())
	}
}
