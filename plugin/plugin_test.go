// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"errors"
	"io"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/outcome"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/nri-sysctl/nri-sysctl/test/fixture"
	"github.com/sirupsen/logrus"
)

const testConfig = fixture.Config

type fakeFetcher struct {
	calls atomic.Int32
	own   map[string]string
	// runtime is what the runtime added to the sandbox's spec.
	runtime map[string]string
	err     error
}

func (f *fakeFetcher) Fetch(context.Context, string) (podsysctl.PodSysctls, error) {
	f.calls.Add(1)
	if f.err != nil {
		return podsysctl.PodSysctls{}, f.err
	}
	return podsysctl.PodSysctls{Own: f.own, Runtime: f.runtime, Source: podsysctl.SourceSandboxConfig}, nil
}

func newTestPlugin(t testing.TB, cfgText string, f *fakeFetcher) *plugin {
	t.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	p := newPlugin(log, nil, "")
	if _, err := p.Configure(context.Background(), cfgText, "containerd", "2.4.2"); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	p.useFetcher(f)
	// A convergence's visit reads and writes through readNamespaces and
	// writeNamespaces, as the test has swapped them by then.
	p.visitNamespaces = func(t podns.Target, keys []string, decide func(map[string]podns.Value) []sysctl.Sysctl) []podns.WriteError {
		writes := decide(p.readNamespaces(t, keys))
		if len(writes) == 0 {
			return nil
		}
		return p.writeNamespaces(t, writes)
	}
	holdAsTheSandboxSays(p)
	return p
}

// holdAsTheSandboxSays makes p hold each pod's process as its sandbox
// says, with nothing opened: for tests whose fake namespaces stand in for
// every pod's.
func holdAsTheSandboxSays(p *plugin) {
	p.held.take = func(pod *api.PodSandbox) (heldProcess, error) {
		_, target := readSandbox(pod, true)
		return fakeHeld{target}, nil
	}
}

// fakeHeld is a pod's process held in a test's fake namespaces.
type fakeHeld struct{ target podns.Target }

func (f fakeHeld) Target() (podns.Target, func(), error) { return f.target, func() {}, nil }
func (fakeHeld) Close()                                  {}

func testPod(id string, nsTypes ...string) *api.PodSandbox {
	pod := &api.PodSandbox{Id: id, Name: "p-" + id, Namespace: "default", Pid: noSuchPid, Linux: &api.LinuxPodSandbox{}}
	for _, t := range nsTypes {
		path := ""
		if t == "network" {
			path = "/var/run/netns/cni-" + id
		}
		pod.Linux.Namespaces = append(pod.Linux.Namespaces, &api.LinuxNamespace{Type: t, Path: path})
	}
	return pod
}

// hostNetContainer has the pause process's namespaces in its own list, as
// containerd gives it, even though for a hostNetwork pod they are the host's.
func hostNetContainer() *api.Container {
	return &api.Container{Name: "app", Linux: &api.LinuxContainer{Namespaces: []*api.LinuxNamespace{
		{Type: "network", Path: "/proc/1/ns/net"}, {Type: "ipc", Path: "/proc/1/ns/ipc"},
	}}}
}

func TestCreateContainerSpecMode(t *testing.T) {
	tests := []struct {
		name           string
		pod            *api.PodSandbox
		ctr            *api.Container
		own            map[string]string
		wantSysctl     map[string]string
		wantAnnotation string
	}{
		{
			name:           "ordinary pod gets every default",
			pod:            testPod("a", "network", "ipc", "uts", "pid"),
			ctr:            &api.Container{Name: "app"},
			wantSysctl:     map[string]string{"kernel.msgmax": "16384", "net.ipv4.tcp_keepalive_intvl": "60", "net.ipv4.tcp_keepalive_time": "600"},
			wantAnnotation: "kernel.msgmax=16384,net.ipv4.tcp_keepalive_intvl=60,net.ipv4.tcp_keepalive_time=600",
		},
		{
			name:           "hostNetwork: decided from the pod's list, not the container's",
			pod:            testPod("b", "ipc", "uts", "pid"),
			ctr:            hostNetContainer(),
			wantSysctl:     map[string]string{"kernel.msgmax": "16384"},
			wantAnnotation: "kernel.msgmax=16384",
		},
		{
			name:           "hostIPC pod",
			pod:            testPod("c", "network", "uts", "pid"),
			ctr:            &api.Container{Name: "app"},
			wantSysctl:     map[string]string{"net.ipv4.tcp_keepalive_intvl": "60", "net.ipv4.tcp_keepalive_time": "600"},
			wantAnnotation: "net.ipv4.tcp_keepalive_intvl=60,net.ipv4.tcp_keepalive_time=600",
		},
		{
			name:           "pod's own value wins",
			pod:            testPod("d", "network", "ipc"),
			ctr:            &api.Container{Name: "app"},
			own:            map[string]string{"net.ipv4.tcp_keepalive_intvl": "33"},
			wantSysctl:     map[string]string{"kernel.msgmax": "16384", "net.ipv4.tcp_keepalive_time": "600"},
			wantAnnotation: "kernel.msgmax=16384,net.ipv4.tcp_keepalive_time=600",
		},
		{
			name:           "key set by a lower-index plugin is kept",
			pod:            testPod("e", "network", "ipc"),
			ctr:            &api.Container{Name: "app", Linux: &api.LinuxContainer{Sysctl: map[string]string{"kernel.msgmax": "1"}}},
			wantSysctl:     map[string]string{"net.ipv4.tcp_keepalive_intvl": "60", "net.ipv4.tcp_keepalive_time": "600"},
			wantAnnotation: "net.ipv4.tcp_keepalive_intvl=60,net.ipv4.tcp_keepalive_time=600",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPlugin(t, testConfig, &fakeFetcher{own: tc.own})
			adj, updates, err := p.CreateContainer(context.Background(), tc.pod, tc.ctr)
			if err != nil || updates != nil {
				t.Fatalf("CreateContainer: %v %v", updates, err)
			}
			if got := adj.GetLinux().GetSysctl(); !reflect.DeepEqual(got, tc.wantSysctl) {
				t.Errorf("sysctls = %v, want %v", got, tc.wantSysctl)
			}
			if got := annotation(adj, outcome.AnnotationInjected); got != tc.wantAnnotation {
				t.Errorf("annotation = %q, want %q", got, tc.wantAnnotation)
			}
		})
	}
}

func annotation(adj *api.ContainerAdjustment, key string) string {
	for k, v := range adj.GetAnnotations() {
		if k == key {
			return v
		}
	}
	return ""
}

func TestCreateContainerExcludedPodIsNotLookedUp(t *testing.T) {
	f := &fakeFetcher{}
	p := newTestPlugin(t, testConfig, f)
	pod := testPod("x", "network", "ipc")
	pod.Namespace = "kube-system"
	adj, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "app"})
	if err != nil || len(adj.GetLinux().GetSysctl()) > 0 || annotation(adj, outcome.AnnotationInjected) != "" || annotation(adj, outcome.AnnotationOutcome) != outcome.Excluded.String() {
		t.Fatalf("excluded pod: adj=%v err=%v; want only the outcome annotation", adj, err)
	}
	if f.calls.Load() != 0 {
		t.Fatal("excluded pod was looked up in containerd")
	}
}

// A pod whose own sysctls cannot be read gets nothing (never clobber its
// values); the lookup is tried again at its next container, and once it
// works the pod gets its defaults.
func TestCreateContainerUnknownPodSysctlsSetsNothingUntilALookupWorks(t *testing.T) {
	for _, mode := range []string{"spec", "namespace"} {
		t.Run(mode, func(t *testing.T) {
			f := &fakeFetcher{err: errors.New("dial unix /run/containerd/containerd.sock: connection refused")}
			p := newTestPlugin(t, testConfig+"mode: "+mode+"\n", f)
			var wrote []string
			p.writeNamespaces = func(_ podns.Target, list []sysctl.Sysctl) []podns.WriteError {
				wrote = append(wrote, formatApplied(list))
				return nil
			}
			pod := testPod("y", "network", "ipc")
			for i := 0; i < 3; i++ {
				adj, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "app"})
				if err != nil || len(adj.GetLinux().GetSysctl()) > 0 || annotation(adj, outcome.AnnotationInjected) != "" {
					t.Fatalf("unknown pod sysctls must not fail or set anything: adj=%v err=%v", adj, err)
				}
				if got := annotation(adj, outcome.AnnotationOutcome); got != outcome.LookupFailed.String() {
					t.Fatalf("outcome annotation %q, want %q", got, outcome.LookupFailed.String())
				}
			}
			if n := f.calls.Load(); n != 3 {
				t.Fatalf("looked up %d times, want once per container while it fails", n)
			}
			if len(wrote) != 0 {
				t.Fatalf("wrote %v into a pod whose own sysctls are unknown", wrote)
			}
			f.err = nil
			adj, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "app"})
			if err != nil || annotation(adj, outcome.AnnotationInjected) != "kernel.msgmax=16384,net.ipv4.tcp_keepalive_intvl=60,net.ipv4.tcp_keepalive_time=600" {
				t.Fatalf("after the lookup worked: adj=%v err=%v", adj, err)
			}
			if mode == "namespace" && len(wrote) != 1 {
				t.Fatalf("namespace writes %v, want one", wrote)
			}
		})
	}
}

func TestRemovePodSandboxDropsCache(t *testing.T) {
	p := newTestPlugin(t, testConfig, &fakeFetcher{})
	pod := testPod("z", "network")
	if _, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "app"}); err != nil {
		t.Fatal(err)
	}
	if p.records.len() != 1 {
		t.Fatalf("cache has %d pods, want 1", p.records.len())
	}
	if err := p.RemovePodSandbox(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if p.records.len() != 0 {
		t.Fatalf("cache has %d pods after RemovePodSandbox, want 0", p.records.len())
	}
}

func TestConfigureChoosesMode(t *testing.T) {
	tests := []struct {
		override, cfgMode, runtime, version string
		want                                runtimemode.Mode
	}{
		{"", "", "containerd", "2.4.2", runtimemode.Spec},
		{"", "", "containerd", "2.1.9+unknown", runtimemode.Namespace},
		{"", "", "containerd", "garbage", runtimemode.Namespace},
		{"", "namespace", "containerd", "2.4.2", runtimemode.Namespace},
		{"spec", "namespace", "containerd", "2.1.9", runtimemode.Spec},
		{"auto", "", "containerd", "1.7.27", runtimemode.Namespace},
	}
	for _, tc := range tests {
		log := logrus.New()
		log.SetOutput(io.Discard)
		p := newPlugin(log, nil, runtimemode.Mode(tc.override))
		text := "sysctls: {net.ipv4.tcp_keepalive_time: 600}\n"
		if tc.cfgMode != "" {
			text += "mode: " + tc.cfgMode + "\n"
		}
		if _, err := p.Configure(context.Background(), text, tc.runtime, tc.version); err != nil {
			t.Fatal(err)
		}
		if got := p.mode(); got != tc.want {
			t.Errorf("override=%q config=%q %s %s: mode %s, want %s", tc.override, tc.cfgMode, tc.runtime, tc.version, got, tc.want)
		}
	}
}

func TestConfigureRejectsBadConfigText(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	p := newPlugin(log, nil, "")
	if _, err := p.Configure(context.Background(), "sysctls: {net.ipv4.tcp_keepalive_time: 600}\n", "containerd", "2.4.2"); err != nil {
		t.Fatal(err)
	}
	_, err := p.Configure(context.Background(), "sysctls:\n  vm.swappiness: 10\n", "containerd", "2.4.2")
	if err == nil || !strings.Contains(err.Error(), "NRI plugin config:2: sysctls.vm.swappiness: vm.swappiness is not namespaced") {
		t.Fatalf("err = %v", err)
	}
	if got := p.current.Load().cfg.Sysctls; len(got) != 1 || got[0].Key != "net.ipv4.tcp_keepalive_time" {
		t.Fatalf("a rejected config must leave the old one in force, have %v", got)
	}
}

func TestRunPodSandboxNamespaceMode(t *testing.T) {
	type call struct {
		target podns.Target
		keys   []string
	}
	tests := []struct {
		name     string
		onError  string
		writeErr bool
		wantErr  bool
	}{
		{name: "writes succeed"},
		{name: "a failed write fails the pod", writeErr: true, wantErr: true},
		{name: "onError warn lets the pod start", onError: "warn", writeErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			text := testConfig + "mode: namespace\n"
			if tc.onError != "" {
				text += "onError: " + tc.onError + "\n"
			}
			p := newTestPlugin(t, text, &fakeFetcher{own: map[string]string{"net.ipv4.tcp_keepalive_intvl": "33"}})
			var calls []call
			p.writeNamespaces = func(target podns.Target, list []sysctl.Sysctl) []podns.WriteError {
				c := call{target: target}
				for _, s := range list {
					c.keys = append(c.keys, s.Key()+"="+s.Value())
				}
				calls = append(calls, c)
				if tc.writeErr {
					return []podns.WriteError{{Key: "kernel.msgmax", Value: "16384", Err: errors.New("invalid argument")}}
				}
				return nil
			}
			// hostIPC pod: only net keys, and not the pod's own.
			pod := testPod("n", "network", "uts")
			err := p.RunPodSandbox(context.Background(), pod)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if tc.wantErr && !strings.Contains(err.Error(), `kernel.msgmax "16384": invalid argument`) {
				t.Fatalf("error does not say what failed: %v", err)
			}
			want := []call{{
				target: podns.Target{sysctl.Net: {Path: "/var/run/netns/cni-n"}, sysctl.UTS: {Pid: noSuchPid, NetPath: "/var/run/netns/cni-n"}},
				keys:   []string{"net.ipv4.tcp_keepalive_time=600"},
			}}
			if !reflect.DeepEqual(calls, want) {
				t.Fatalf("writes = %+v, want %+v", calls, want)
			}
			// In namespace mode containers get the annotation but no
			// spec sysctls (the runtime would drop them).
			adj, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "app"})
			if err != nil {
				t.Fatal(err)
			}
			if len(adj.GetLinux().GetSysctl()) != 0 || annotation(adj, outcome.AnnotationInjected) != "net.ipv4.tcp_keepalive_time=600" {
				t.Fatalf("namespace-mode adjustment = %v", adj)
			}
		})
	}
}

func TestRunPodSandboxSpecModeWritesNothing(t *testing.T) {
	p := newTestPlugin(t, testConfig, &fakeFetcher{})
	p.writeNamespaces = func(podns.Target, []sysctl.Sysctl) []podns.WriteError {
		t.Fatal("spec mode wrote into namespaces")
		return nil
	}
	if err := p.RunPodSandbox(context.Background(), testPod("s", "network", "ipc")); err != nil {
		t.Fatal(err)
	}
}

func TestSynchronizeCountsContainersWithoutDefaults(t *testing.T) {
	var buf strings.Builder
	p := newTestPlugin(t, testConfig, &fakeFetcher{})
	p.log.SetOutput(&buf)
	pods := []*api.PodSandbox{testPod("p1", "network"), testPod("p2", "network")}
	pods[1].Namespace = "kube-system" // excluded: never counted
	running := api.ContainerState_CONTAINER_RUNNING
	ctrs := []*api.Container{
		{Id: "c1", PodSandboxId: "p1", State: running, Annotations: map[string]string{outcome.AnnotationInjected: "x=1"}},
		{Id: "c2", PodSandboxId: "p1", State: running},
		{Id: "c3", PodSandboxId: "p1", State: running, Annotations: map[string]string{outcome.AnnotationSkipped: "x (y)"}},
		{Id: "c4", PodSandboxId: "p1", State: api.ContainerState_CONTAINER_STOPPED},
		{Id: "c5", PodSandboxId: "p2", State: running},
		{Id: "c6", PodSandboxId: "p1", State: running},
	}
	if _, err := p.Synchronize(context.Background(), pods, ctrs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "running containers lack the node's sysctl defaults") || !strings.Contains(buf.String(), "containers=2") {
		t.Fatalf("log = %q", buf.String())
	}
}

// Review finding 2: containers the plugin handled correctly (no rule
// matched; lookup failed) carry an outcome, so a restarted plugin does not
// report them as created while it was away.
func TestSynchronizeDoesNotCountHandledContainers(t *testing.T) {
	rulesOnly := "rules:\n  - name: web\n    match: {namespaces: [web]}\n    sysctls: {net.core.somaxconn: 4096}\n"
	for _, tc := range []struct {
		name string
		cfg  string
		f    *fakeFetcher
	}{
		{"rules-only config, no rule matched", rulesOnly, &fakeFetcher{}},
		{"lookup failed", testConfig, &fakeFetcher{err: errors.New("connection refused")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf strings.Builder
			p := newTestPlugin(t, tc.cfg, tc.f)
			p.log.SetOutput(&buf)
			pod := testPod("s1", "network", "ipc")
			adj, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "app"})
			if err != nil {
				t.Fatal(err)
			}
			ctr := &api.Container{Id: "c1", Name: "app", PodSandboxId: "s1", State: api.ContainerState_CONTAINER_RUNNING, Annotations: adj.GetAnnotations()}
			if _, err := p.Synchronize(context.Background(), []*api.PodSandbox{pod}, []*api.Container{ctr}); err != nil {
				t.Fatal(err)
			}
			if n := lackingLogged(buf.String()); n != 0 {
				t.Errorf("%d container(s) reported lacking the defaults, want 0; log: %s", n, buf.String())
			}
		})
	}
}

// Review finding 9: READY=1 waits for the runtime's Synchronize.
func TestSynchronizedOnlyAfterSynchronize(t *testing.T) {
	p := newTestPlugin(t, testConfig, &fakeFetcher{})
	select {
	case <-p.synchronized:
		t.Fatal("synchronized before Synchronize")
	default:
	}
	if _, err := p.Synchronize(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.synchronized:
	default:
		t.Fatal("not synchronized after Synchronize")
	}
}

// Pods removed while the plugin was not connected never get a
// RemovePodSandbox; Synchronize on the next connection forgets them.
func TestSynchronizeForgetsPodsRemovedWhileAway(t *testing.T) {
	f := &fakeFetcher{}
	p := newConcPlugin(t, "2.4.2", f, io.Discard)
	ctx := context.Background()
	gone, kept := testPod("gone", "network"), testPod("kept", "network")
	for _, pod := range []*api.PodSandbox{gone, kept} {
		if _, _, err := p.CreateContainer(ctx, pod, &api.Container{Name: "app"}); err != nil {
			t.Fatal(err)
		}
	}
	if p.records.len() != 2 {
		t.Fatalf("cache has %d pods, want 2", p.records.len())
	}
	if _, err := p.Synchronize(ctx, []*api.PodSandbox{kept}, nil); err != nil {
		t.Fatal(err)
	}
	if p.records.len() != 1 {
		t.Fatalf("after Synchronize without pod gone: %d pods cached, want 1", p.records.len())
	}
	if p.hasRecord("gone") || !p.hasRecord("kept") {
		t.Fatalf("records: gone %v (want false), kept %v (want true)", p.hasRecord("gone"), p.hasRecord("kept"))
	}
	// The kept pod is not looked up again.
	if _, _, err := p.CreateContainer(ctx, kept, &api.Container{Name: "second"}); err != nil {
		t.Fatal(err)
	}
	if n := f.calls.Load(); n != 2 {
		t.Fatalf("%d lookups, want 2 (one per pod)", n)
	}
}
