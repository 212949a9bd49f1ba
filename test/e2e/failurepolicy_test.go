// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
)

// TestFailurePolicyOnAStalledPlugin: a plugin with onMissedDeadline:
// refuse, stopped (SIGSTOP) past containerd's plugin_request_timeout (2 s)
// while a container is created, on a node without required_plugins. Where
// the runtime's NRI honours the declared policy (v0.12.4 and later: the
// suite's 2.4.2 built with NRI v0.12.5), that container is refused, not
// created bare, and once the plugin runs again (SIGCONT) the next
// container has the defaults, read inside it, the plugin still on its
// first registration. Where it does not (the released 2.4.2, NRI v0.12.3),
// the declaration changes nothing and breaks nothing: the container is
// created bare, as without the key, and the plugin registers again.
func TestFailurePolicyOnAStalledPlugin(t *testing.T) {
	c := getCluster(t)
	checkMeaningful(t, nodeDefaults)
	keys := sortedKeys(nodeDefaults)
	honours := runtimeHonoursFailurePolicy(t, c)
	t.Logf("containerd %s honours a declared failure policy: %v", c.version, honours)

	pod := runPod(t, PodSpec{Name: dnsLabel(t.Name()), Namespace: "e2e-failure-policy"})
	p := startPlugin(t, defaultsYAML(nodeDefaults)+"onMissedDeadline: refuse\n")
	before := runContainer(t, pod, "before")
	wantSysctls(t, "container created while the plugin runs", readSysctls(t, before, keys...), nodeDefaults)

	pid := p.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	start := time.Now()
	stalled, err := c.createContainerErr(pod, "stalled", []string{"sleep", "3600"})
	took := time.Since(start)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	switch {
	case honours && err == nil:
		t.Fatalf("containerd honours the policy, yet a container the stopped plugin did not answer was created (after %s)", took)
	case honours && !strings.Contains(err.Error(), "failed to handle"):
		t.Fatalf("the container was refused, but not for the plugin's missed deadline: %v", criErrorLine(err))
	case honours:
		t.Logf("refused after %s: %s", took.Round(time.Millisecond), criErrorLine(err))
	case err != nil:
		t.Fatalf("containerd ignores the policy, yet the container was refused: %v", criErrorLine(err))
	default:
		// Created without the plugin's answer: containerd recorded none of
		// its annotations on the container.
		if a := containerAnnotations(t, stalled); a[annotationOutcome] != "" || a[annotationInjected] != "" {
			t.Errorf("the container created while the plugin was stopped carries its answer (%s=%q): the plugin was not late", annotationOutcome, a[annotationOutcome])
		}
		if _, err := c.crictlRaw("start", stalled); err != nil {
			t.Fatal(err)
		}
	}

	if honours {
		// Kept registered: the next container is answered at once.
		after := runContainer(t, pod, "after")
		wantSysctls(t, "container created right after SIGCONT", readSysctls(t, after, keys...), nodeDefaults)
		if n := registrations(t, p); n != 1 {
			t.Errorf("the plugin registered %d times, want once: the runtime dropped it despite keep_connected", n)
		}
		return
	}
	// Dropped, as without the key: it registers again, the pod the
	// stalled container was created in converges (its values read inside
	// that container), and the next container has the defaults.
	p.waitRegistered(t, 2, 30*time.Second)
	waitUntil(t, 30*time.Second, "the pod of the container created bare to converge", func() (bool, string) {
		got := readSysctls(t, stalled, keys...)
		return mapsEqualOn(got, nodeDefaults, keys), fmt.Sprint(got)
	})
	after := runContainer(t, pod, "after")
	wantSysctls(t, "container created once the plugin registered again", readSysctls(t, after, keys...), nodeDefaults)
}

// runtimeHonoursFailurePolicy reads the NRI compiled into the cluster's
// containerd and asks the plugin's own table whether it honours a
// declared failure policy.
func runtimeHonoursFailurePolicy(t *testing.T, c *cluster) bool {
	t.Helper()
	built, err := moduleVersions(filepath.Join(c.binDir, "containerd"))
	if err != nil {
		t.Fatal(err)
	}
	honours, known := runtimemode.HonoursFailurePolicy(runtimemode.Runtime{Name: "containerd", Version: c.version, NRIVersion: built["github.com/containerd/nri"]})
	if !known {
		t.Fatalf("cannot tell which NRI containerd %s runs (build info: %q)", c.version, built["github.com/containerd/nri"])
	}
	return honours
}

// registrations counts the plugin's registrations with NRI, from its log.
func registrations(t *testing.T, p *pluginProc) int {
	t.Helper()
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(data, []byte(readyLine))
}
