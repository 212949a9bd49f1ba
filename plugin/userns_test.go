// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/outcome"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
	"github.com/nri-sysctl/nri-sysctl/pkg/probe"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/nri-sysctl/nri-sysctl/test/fixture"
	"github.com/sirupsen/logrus"
)

// fakeUserNamespaceProbe replaces the user namespace probe for one test
// (fixture.UserNamespaceProbe).
func fakeUserNamespaceProbe(t *testing.T, fn func([]string) (map[sysctl.Writer]map[string]error, error)) {
	t.Helper()
	previous := probeUserNamespace
	probeUserNamespace = fixture.UserNamespaceProbe(fn)
	t.Cleanup(func() { probeUserNamespace = previous })
}

// newProbingPlugin is a plugin whose kernel check passes everything, so
// that it runs the user namespace probe.
func newProbingPlugin() *plugin {
	log := logrus.New()
	log.SetOutput(io.Discard)
	p := newPlugin(log, func(map[string][]string) (map[string]error, map[string]map[string]sysctl.Stored, error) {
		return nil, nil, nil
	}, "")
	holdAsTheSandboxSays(p)
	return p
}

const usernsConfig = `
sysctls:
  kernel.domainname: pods
  kernel.msgmax: 16384
  net.ipv4.tcp_keepalive_time: 600
`

// runc in the pod may not set kernel.domainname, host root may not set
// kernel.msgmax: each mode leaves out what its writer is refused.
func TestUserNamespaceRefusalsFollowTheWriter(t *testing.T) {
	fakeUserNamespaceProbe(t, fixture.ProbedOn618)
	pod := testPod("u", "network", "ipc", "uts", "user")

	spec := newProbingPlugin()
	if _, err := spec.Configure(context.Background(), usernsConfig+"mode: spec\n", "containerd", "2.4.2"); err != nil {
		t.Fatal(err)
	}
	spec.useFetcher(&fakeFetcher{own: map[string]string{}})
	adj, _, err := spec.CreateContainer(context.Background(), pod, &api.Container{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	wantSpec := map[string]string{"kernel.msgmax": "16384", "net.ipv4.tcp_keepalive_time": "600"}
	if got := adj.GetLinux().GetSysctl(); !reflect.DeepEqual(got, wantSpec) {
		t.Errorf("spec mode sets %v, want %v", got, wantSpec)
	}
	if got, want := annotation(adj, outcome.AnnotationSkipped), "kernel.domainname (cannot be set in the pod's user namespace: the kernel refuses it when runc in the pod writes it)"; got != want {
		t.Errorf("spec mode skips %q, want %q", got, want)
	}

	ns := newProbingPlugin()
	if _, err := ns.Configure(context.Background(), usernsConfig+"mode: namespace\n", "containerd", "1.7.0"); err != nil {
		t.Fatal(err)
	}
	ns.useFetcher(&fakeFetcher{own: map[string]string{}})
	var written []string
	ns.writeNamespaces = func(_ podns.Target, list []sysctl.Sysctl) []podns.WriteError {
		written = append(written, formatApplied(list))
		return nil
	}
	if err := ns.RunPodSandbox(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if want := []string{"kernel.domainname=pods,net.ipv4.tcp_keepalive_time=600"}; !reflect.DeepEqual(written, want) {
		t.Errorf("namespace mode writes %v, want %v", written, want)
	}
}

// A failed probe must not drop what is known: user-namespace pods would
// then get keys the kernel refuses them.
func TestApplyConfigKeepsProbeResultWhenProbeFails(t *testing.T) {
	p := newProbingPlugin()
	fakeUserNamespaceProbe(t, fixture.ProbedOn618)
	if err := p.applyConfig(fixture.MustParse(t, usernsConfig)); err != nil {
		t.Fatal(err)
	}
	want := policy.UserNamespaceRefusals{
		sysctl.WriterInPod: {"kernel.domainname": true},
		sysctl.WriterHost:  {"kernel.msgmax": true},
	}
	if got := p.current.Load().refused; !reflect.DeepEqual(got, want) {
		t.Fatalf("after a probe: %v, want %v", got, want)
	}

	probeErr := errors.New("the helper did not finish within 5s")
	fakeUserNamespaceProbe(t, func([]string) (map[sysctl.Writer]map[string]error, error) { return nil, probeErr })
	// The same keys, fewer: the last result still covers them.
	fewer := fixture.MustParse(t, "sysctls:\n  kernel.domainname: other\n  kernel.msgmax: 8192\n")
	if err := p.applyConfig(fewer); err != nil {
		t.Fatalf("a reload whose keys were probed before: %v", err)
	}
	if cur := p.current.Load(); cur.cfg != fewer || !reflect.DeepEqual(cur.refused, want) {
		t.Fatalf("in force: %v with %v; want the reload with the last result", cur.cfg.Sysctls, cur.refused)
	}
	// A key never probed: the reload is rejected, the config stays.
	newKey := fixture.MustParse(t, usernsConfig+"  net.core.somaxconn: 4096\n")
	err := p.applyConfig(newKey)
	if err == nil || !errors.Is(err, probeErr) || !strings.HasPrefix(err.Error(), "cannot tell which sysctls user-namespace pods may set: ") {
		t.Fatalf("a reload with an unprobed key: err = %v", err)
	}
	if p.current.Load().cfg != fewer {
		t.Fatal("a rejected reload replaced the config in force")
	}
}

// At start-up there is no earlier result to keep.
func TestApplyConfigFailsWithoutAnyProbeResult(t *testing.T) {
	p := newProbingPlugin()
	fakeUserNamespaceProbe(t, func([]string) (map[sysctl.Writer]map[string]error, error) {
		return nil, errors.New("helper: signal: killed")
	})
	if err := p.applyConfig(fixture.MustParse(t, usernsConfig)); err == nil {
		t.Fatal("config put in force without knowing what user-namespace pods may set")
	}
}

// On a node that allows no user namespace no pod has one: nothing is
// left out, and the config applies.
func TestApplyConfigUserNamespacesDisabled(t *testing.T) {
	p := newProbingPlugin()
	fakeUserNamespaceProbe(t, func([]string) (map[sysctl.Writer]map[string]error, error) {
		return nil, fmt.Errorf("%w: starting the helper: fork/exec /proc/self/exe: no space left on device", probe.ErrUserNamespacesDisabled)
	})
	cfg := fixture.MustParse(t, usernsConfig)
	if err := p.applyConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if got := p.current.Load().refused; got == nil || len(got) != 0 {
		t.Fatalf("RefusedInUserNamespace = %#v, want an empty result", got)
	}
}
