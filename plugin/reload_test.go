// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/nsthread"
	"github.com/nri-sysctl/nri-sysctl/pkg/outcome"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/nri-sysctl/nri-sysctl/plugin/internal/trusteddir"
	"github.com/nri-sysctl/nri-sysctl/test/fixture"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// Review finding 13: the containerd a config names and the config itself go
// into force as one: a pod is looked up through the connection of the
// config it is decided with, never the previous config's.
func TestReloadSwapsConfigAndLookupTogether(t *testing.T) {
	p := newTestPlugin(t, testConfig, &fakeFetcher{})
	byAddress := map[string]*fakeFetcher{
		"/run/a.sock": {own: map[string]string{"net.ipv4.tcp_keepalive_time": "1"}},
		"/run/b.sock": {own: map[string]string{"net.ipv4.tcp_keepalive_intvl": "2"}},
	}
	p.connect = func(cfg *config.Config) (podsysctl.Fetcher, error) { return byAddress[cfg.ContainerdAddress], nil }
	p.reload(trusteddir.WriteConfig(t, testConfig+"containerdAddress: /run/a.sock\n"))
	podA := testPod("ra", "network", "ipc")
	if err := p.RunPodSandbox(context.Background(), podA); err != nil {
		t.Fatal(err)
	}
	p.reload(trusteddir.WriteConfig(t, testConfig+"containerdAddress: /run/b.sock\n"))
	adjA, _, _ := p.CreateContainer(context.Background(), podA, &api.Container{Name: "app"})
	adjB, _, _ := p.CreateContainer(context.Background(), testPod("rb", "network", "ipc"), &api.Container{Name: "app"})
	if _, set := adjA.GetLinux().GetSysctl()["net.ipv4.tcp_keepalive_time"]; set {
		t.Errorf("pod first seen under a.sock's config was looked up elsewhere: %v", adjA.GetLinux().GetSysctl())
	}
	if _, set := adjB.GetLinux().GetSysctl()["net.ipv4.tcp_keepalive_intvl"]; set {
		t.Errorf("pod first seen under b.sock's config was looked up elsewhere: %v", adjB.GetLinux().GetSysctl())
	}
	if byAddress["/run/a.sock"].calls.Load() != 1 || byAddress["/run/b.sock"].calls.Load() != 1 {
		t.Errorf("lookups: a.sock %d, b.sock %d; want one each", byAddress["/run/a.sock"].calls.Load(), byAddress["/run/b.sock"].calls.Load())
	}
}

func TestLoadInitialConfig(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	p := newPlugin(log, nil, "")
	missing := t.TempDir() + "/none.yaml"
	if _, err := p.loadInitialConfig(missing, true); err != nil {
		t.Fatalf("pre-installed plugin without a file waits for Configure: %v", err)
	}
	if _, err := p.loadInitialConfig(missing, false); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("a plugin run by hand needs its file: %v", err)
	}
}

func TestReloadKeepsOldConfigOnError(t *testing.T) {
	p := newTestPlugin(t, testConfig, &fakeFetcher{})
	path := trusteddir.WriteConfig(t, "sysctls:\n  net.ipv4.tcp_keepalive_time: 300\n")
	p.reload(path)
	if got := p.current.Load().cfg.Sysctls; len(got) != 1 || got[0].Value != "300" {
		t.Fatalf("after good reload: %v", got)
	}
	bad := trusteddir.WriteConfig(t, "sysctls:\n  net.ipv4.tcp_keepalive_time: 100\n  vm.swappiness: 1\n")
	p.reload(bad)
	if got := p.current.Load().cfg.Sysctls; len(got) != 1 || got[0].Value != "300" {
		t.Fatalf("a bad reload must keep the old config whole: %v", got)
	}
}

// A reload between two containers of one pod does not split the pod: both
// get the config in force when the pod came; the next pod gets the new one.
// In namespace mode the annotation matches what RunPodSandbox wrote.
func TestReloadAppliesToNewPodsOnly(t *testing.T) {
	for _, version := range []string{"2.4.2", "2.1.9+unknown"} {
		t.Run(version, func(t *testing.T) {
			p := newConcPlugin(t, version, &fakeFetcher{}, io.Discard)
			var wrote []string
			p.writeNamespaces = func(_ podns.Target, list []sysctl.Sysctl) []podns.WriteError {
				wrote = append(wrote, canonicalWrite(list))
				return nil
			}
			ctx := context.Background()
			pod := testPod("old", "network", "ipc")
			if err := p.RunPodSandbox(ctx, pod); err != nil {
				t.Fatal(err)
			}
			first, _, _ := p.CreateContainer(ctx, pod, &api.Container{Name: "first"})
			p.reload(trusteddir.WriteConfig(t, concCfgB))
			second, _, _ := p.CreateContainer(ctx, pod, &api.Container{Name: "second"})
			if canonicalAdj(first) != canonicalAdj(second) {
				t.Fatalf("containers of one pod differ across a reload:\n%s\n---\n%s", canonicalAdj(first), canonicalAdj(second))
			}
			wantA := "kernel.msgmax=16384,net.ipv4.tcp_keepalive_intvl=60,net.ipv4.tcp_keepalive_time=600"
			if got := annotation(second, outcome.AnnotationInjected); got != wantA {
				t.Fatalf("second container of the old pod: %q, want config A's %q", got, wantA)
			}
			newPod := testPod("new", "network", "ipc")
			if err := p.RunPodSandbox(ctx, newPod); err != nil {
				t.Fatal(err)
			}
			third, _, _ := p.CreateContainer(ctx, newPod, &api.Container{Name: "third"})
			wantB := "net.core.somaxconn=4096,net.ipv4.tcp_keepalive_time=300"
			if got := annotation(third, outcome.AnnotationInjected); got != wantB {
				t.Fatalf("pod created after the reload: %q, want config B's %q", got, wantB)
			}
			if p.mode() == "namespace" {
				want := []string{
					canonical(map[string]string{"kernel.msgmax": "16384", "net.ipv4.tcp_keepalive_intvl": "60", "net.ipv4.tcp_keepalive_time": "600"}, nil),
					canonical(map[string]string{"net.core.somaxconn": "4096", "net.ipv4.tcp_keepalive_time": "300"}, nil),
				}
				if !reflect.DeepEqual(wrote, want) {
					t.Fatalf("namespace writes %q, want %q", wrote, want)
				}
			}
		})
	}
}

// A reload re-reads the host's values; the expanded keys reach the policy.
func TestReloadInheritsHostValues(t *testing.T) {
	p := newTestPlugin(t, testConfig, &fakeFetcher{})
	p.check = func(map[string][]string) (map[string]error, map[string]map[string]sysctl.Stored, error) {
		return nil, nil, nil
	}
	fakeUserNamespaceProbe(t, func([]string) (map[sysctl.Writer]map[string]error, error) { return nil, nil })
	p.reload(trusteddir.WriteConfig(t, "inheritFromHost: [net.ipv4.tcp_keepalive_time]\n"))
	cfg := p.current.Load().cfg
	want := []config.Entry{{Key: "net.ipv4.tcp_keepalive_time", Value: fixture.HostValue(t, "net/ipv4/tcp_keepalive_time"), Line: 1, Source: config.SourceHost, Pattern: "net.ipv4.tcp_keepalive_time"}}
	if !reflect.DeepEqual(cfg.Sysctls, want) {
		t.Errorf("after the reload: %+v, want %+v", cfg.Sysctls, want)
	}
}

// Review finding 3: a reloaded mode applies to pods created after it,
// without a reconnect; pods already seen keep theirs.
func TestReloadedModeAppliesToNewPods(t *testing.T) {
	p := newTestPlugin(t, testConfig, &fakeFetcher{})
	w := &recordingWriter{}
	p.writeNamespaces = w.write
	old := testPod("m1", "network", "ipc")
	if err := p.RunPodSandbox(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	p.reload(trusteddir.WriteConfig(t, testConfig+"mode: namespace\n"))
	if p.mode() != runtimemode.Namespace {
		t.Fatalf("mode after reload: %s, want namespace", p.mode())
	}
	adj, _, _ := p.CreateContainer(context.Background(), old, &api.Container{Name: "app"})
	if len(adj.GetLinux().GetSysctl()) == 0 || len(w.calls) != 0 {
		t.Errorf("a pod first seen in spec mode must stay in spec mode: adj %v, writes %v", adj, w.calls)
	}
	adj, _, _ = p.CreateContainer(context.Background(), testPod("m2", "network", "ipc"), &api.Container{Name: "app"})
	if len(adj.GetLinux().GetSysctl()) != 0 || len(w.calls) != 1 {
		t.Errorf("a new pod must get namespace mode: adj %v, writes %v", adj, w.calls)
	}
}

// A pod first seen while a reload that changes mode: is being
// put in force must get one load's config and mode, never the old config
// with the new mode (they were two atomics, stored mode first). The hook
// runs where the second store came.
func TestReloadSwapsConfigAndModeAsOne(t *testing.T) {
	p := newTestPlugin(t, testConfig, &fakeFetcher{})
	if p.mode() != runtimemode.Spec {
		t.Fatalf("mode %s on 2.4.2, want spec", p.mode())
	}
	old := p.current.Load().cfg
	var rec *podRecord
	beforeConfigStore = func() { rec = p.record(testPod("mid-reload", "network", "ipc", "uts")) }
	t.Cleanup(func() { beforeConfigStore = nil })
	p.reload(trusteddir.WriteConfig(t, testConfig+"mode: namespace\n"))
	if p.mode() != runtimemode.Namespace {
		t.Fatalf("the reload did not put namespace mode in force: %s", p.mode())
	}
	if rec == nil {
		t.Fatal("the hook did not run")
	}
	if rec.cfg.cfg != old || rec.cfg.mode != runtimemode.Spec {
		t.Fatalf("the pod seen mid-reload has config mode %q in mode %s: a config and a mode of different loads", rec.cfg.cfg.Mode, rec.cfg.mode)
	}
}

// A reload reads and checks its file at the lowest priority, beside the
// runtime's requests (the kernel check and the user namespace probe make
// namespaces); putting it in force, under the lock Configure takes, is not
// lowered.
func TestReloadChecksInTheBackground(t *testing.T) {
	p := newTestPlugin(t, testConfig, &fakeFetcher{})
	checked, probed, stored := -1, -1, -1
	p.check = func(map[string][]string) (map[string]error, map[string]map[string]sysctl.Stored, error) {
		checked = threadNiceForTest(t)
		return nil, nil, nil
	}
	fakeUserNamespaceProbe(t, func([]string) (map[sysctl.Writer]map[string]error, error) {
		probed = threadNiceForTest(t)
		return nil, nil
	})
	beforeConfigStore = func() { stored = threadNiceForTest(t) }
	t.Cleanup(func() { beforeConfigStore = nil })
	p.reload(trusteddir.WriteConfig(t, "sysctls:\n  net.ipv4.tcp_keepalive_time: 610\n"))
	if got := p.current.Load().cfg.Sysctls; len(got) != 1 || got[0].Value != "610" {
		t.Fatalf("the reload did not put the file in force: %+v", got)
	}
	if checked != nsthread.BackgroundNice || probed != nsthread.BackgroundNice || stored != 0 {
		t.Errorf("nice: the kernel check at %d, the user namespace probe at %d (want %d for both), putting it in force under the lock at %d (want 0)",
			checked, probed, nsthread.BackgroundNice, stored)
	}
}

// threadNiceForTest is the calling thread's nice value (-1 on an error,
// reported; callable from any goroutine).
func threadNiceForTest(t *testing.T) int {
	prio, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		t.Error(err)
		return -1
	}
	return 20 - prio // the raw system call returns 20 - nice
}

// A reload's log line and Event say what it reaches under the setting in
// force: running pods too, unless runningPods is keep.
func TestReloadSaysWhatItReaches(t *testing.T) {
	p := newTestPlugin(t, testConfig, &fakeFetcher{})
	cfg := p.current.Load().cfg
	if got := p.reloadReaches(cfg); !strings.Contains(got, "running pods as they converge") {
		t.Errorf("under converge: %q, want it to name running pods", got)
	}
	p.runningPodsOverride = config.RunningPodsKeep
	if got := p.reloadReaches(cfg); strings.Contains(got, "running pods") || !strings.Contains(got, "created from now on") {
		t.Errorf("under keep: %q, want pods created from now on only", got)
	}
}
