// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

// In-process NRI tests: the real plugin, started as serveOnce starts it,
// against NRI's own runtime side (the adaptation package containerd
// embeds) over a real ttrpc connection on a temporary socket. They check
// what the runtime receives (the merged ContainerAdjustment), not what a
// handler returns, modelled on containerd/nri's pkg/adaptation/suite_test.go.

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/containerd/ttrpc"
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/outcome"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/nri-sysctl/nri-sysctl/test/fixture"
	"github.com/sirupsen/logrus"
	"google.golang.org/protobuf/proto"
)

const nriWait = 10 * time.Second

// nriDefaults: three defaults (two net keys, one IPC key), kube-system
// excluded.
const nriDefaults = fixture.Config

// nriRuntime is a container runtime as NRI sees it: NRI's adaptation with
// the pods and containers the runtime knows, which it hands to each plugin
// that connects (Synchronize).
type nriRuntime struct {
	r      *adaptation.Adaptation
	socket string

	mu   sync.Mutex
	pods []*api.PodSandbox
	ctrs []*api.Container
	// beforeSync runs when a plugin has registered and been configured,
	// just before the runtime synchronizes it; what it returns is
	// reported on synced, with the outcome, once Synchronize returns.
	beforeSync func() string
	synced     chan syncReport
}

type syncReport struct {
	before string
	err    error
}

// startNRIRuntime starts NRI's runtime side reporting containerd at
// version, with extra options. reportNRI false drops the NRI version from
// Configure, as every containerd before 2.3 does (its NRI, v0.11.0 or
// older, has no such field); true leaves the adaptation's own, v0.12.x.
func startNRIRuntime(t *testing.T, version string, reportNRI bool, extra ...adaptation.Option) *nriRuntime {
	t.Helper()
	dir := t.TempDir()
	rt := &nriRuntime{socket: filepath.Join(dir, "nri.sock"), synced: make(chan syncReport, 8)}
	opts := []adaptation.Option{
		adaptation.WithPluginPath(filepath.Join(dir, "plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(dir, "conf.d")),
		adaptation.WithSocketPath(rt.socket),
	}
	if !reportNRI {
		opts = append(opts, adaptation.WithTTRPCOptions([]ttrpc.ClientOpts{ttrpc.WithUnaryClientInterceptor(withoutNRIVersion)}, nil))
	}
	opts = append(opts, extra...)
	r, err := adaptation.New("containerd", version, rt.synchronize, rt.update, opts...)
	if err != nil {
		t.Fatalf("adaptation.New: %v", err)
	}
	if err := r.Start(); err != nil {
		t.Fatalf("adaptation Start: %v", err)
	}
	// Start synchronizes the pre-installed plugins (none): not a report
	// about a plugin.
	select {
	case <-rt.synced:
	default:
	}
	rt.r = r
	t.Cleanup(r.Stop)
	return rt
}

// withoutNRIVersion clears NRI_version in the runtime's Configure request.
func withoutNRIVersion(ctx context.Context, req *ttrpc.Request, resp *ttrpc.Response, _ *ttrpc.UnaryClientInfo, invoke ttrpc.Invoker) error {
	if req.Method == "Configure" {
		var cr api.ConfigureRequest
		if err := proto.Unmarshal(req.Payload, &cr); err != nil {
			return err
		}
		cr.NRIVersion = ""
		payload, err := proto.Marshal(&cr)
		if err != nil {
			return err
		}
		req.Payload = payload
	}
	return invoke(ctx, req, resp)
}

func (rt *nriRuntime) synchronize(ctx context.Context, cb adaptation.SyncCB) error {
	rt.mu.Lock()
	pods := append([]*api.PodSandbox(nil), rt.pods...)
	ctrs := append([]*api.Container(nil), rt.ctrs...)
	before := rt.beforeSync
	rt.mu.Unlock()
	var report syncReport
	if before != nil {
		report.before = before()
	}
	_, report.err = cb(ctx, pods, ctrs)
	select {
	case rt.synced <- report:
	default:
	}
	return report.err
}

func (rt *nriRuntime) update(context.Context, []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	return nil, nil
}

// runPod starts a pod sandbox as containerd does: RunPodSandbox to the
// plugins, while no plugin is being synchronized.
func (rt *nriRuntime) runPod(pod *api.PodSandbox) error {
	b := rt.r.BlockPluginSync()
	defer b.Unblock()
	if err := rt.r.RunPodSandbox(context.Background(), &adaptation.RunPodSandboxRequest{Pod: pod}); err != nil {
		return err
	}
	rt.mu.Lock()
	rt.pods = append(rt.pods, pod)
	rt.mu.Unlock()
	return nil
}

// createContainer creates a container and returns the adjustment the
// plugins' answers merge into. The container is kept, with the
// adjustment's annotations and the given state, for later Synchronize.
func (rt *nriRuntime) createContainer(pod *api.PodSandbox, ctr *api.Container, state api.ContainerState) (*api.ContainerAdjustment, error) {
	b := rt.r.BlockPluginSync()
	defer b.Unblock()
	ctr.PodSandboxId = pod.GetId()
	kept := proto.Clone(ctr).(*api.Container)
	resp, err := rt.r.CreateContainer(context.Background(), &adaptation.CreateContainerRequest{Pod: pod, Container: ctr})
	if err != nil {
		return nil, err
	}
	adj := resp.GetAdjust()
	for k, v := range adj.GetAnnotations() {
		if _, removed := api.IsMarkedForRemoval(k); removed {
			continue
		}
		if kept.Annotations == nil {
			kept.Annotations = map[string]string{}
		}
		kept.Annotations[k] = v
	}
	kept.State = state
	rt.mu.Lock()
	rt.ctrs = append(rt.ctrs, kept)
	rt.mu.Unlock()
	return adj, nil
}

// waitDropped waits until the runtime relays no more events to a plugin
// whose connection has closed: a request sent in the moment before it
// notices may fail, and then it is sent again, as a runtime would.
func (rt *nriRuntime) waitDropped(t *testing.T) {
	t.Helper()
	probe := &adaptation.RunPodSandboxRequest{Pod: nriPod("probe", "kube-system")}
	deadline := time.Now().Add(nriWait)
	for {
		b := rt.r.BlockPluginSync()
		err := rt.r.RunPodSandbox(context.Background(), probe)
		b.Unblock()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("runtime still relays events to a plugin that left: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startPod is RunPodSandbox then CreateContainer of one running container.
func (rt *nriRuntime) startPod(t *testing.T, pod *api.PodSandbox, ctr *api.Container) *api.ContainerAdjustment {
	t.Helper()
	if err := rt.runPod(pod); err != nil {
		t.Fatalf("RunPodSandbox %s: %v", pod.GetName(), err)
	}
	adj, err := rt.createContainer(pod, ctr, api.ContainerState_CONTAINER_RUNNING)
	if err != nil {
		t.Fatalf("CreateContainer %s: %v", pod.GetName(), err)
	}
	return adj
}

// nriPlugin is the plugin served by serveOnce, as runPlugin serves it.
type nriPlugin struct {
	p      *plugin
	log    *lockedLog
	cancel context.CancelFunc
	done   chan struct{}
	// Set when serveOnce returns (done closed).
	registered bool
	err        error
}

type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(b)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// newNRIPlugin makes the plugin as runPlugin does, with cfgText in force,
// pods looked up through f and namespace writes going to write.
func newNRIPlugin(t *testing.T, override runtimemode.Mode, cfgText string, f podsysctl.Fetcher, write func(podns.Target, []sysctl.Sysctl) []podns.WriteError) *nriPlugin {
	t.Helper()
	out := &lockedLog{}
	log := logrus.New()
	log.SetOutput(out)
	log.SetLevel(logrus.DebugLevel)
	p := newPlugin(log, nil, override)
	holdAsTheSandboxSays(p)
	p.useFetcher(f)
	if write != nil {
		p.writeNamespaces = write
	}
	cfg, err := config.Parse("test config", []byte(cfgText), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.applyConfig(cfg); err != nil {
		t.Fatal(err)
	}
	h := &nriPlugin{p: p, log: out}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("plugin log:\n%s", out.String())
		}
	})
	return h
}

// serve connects the plugin to the runtime through serveOnce, in the
// background, until stop.
func (h *nriPlugin) serve(t *testing.T, rt *nriRuntime, extra ...stub.Option) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan struct{})
	opts := append([]stub.Option{stub.WithSocketPath(rt.socket), stub.WithPluginName("sysctl"), stub.WithPluginIdx("90")}, extra...)
	go func() {
		defer close(h.done)
		h.registered, h.err = serveOnce(ctx, h.p, opts)
	}()
	t.Cleanup(func() { h.stop(t) })
}

// stop ends the plugin's connection and waits for serveOnce to return.
func (h *nriPlugin) stop(t *testing.T) {
	h.cancel()
	select {
	case <-h.done:
	case <-time.After(nriWait):
		t.Error("serveOnce did not return after its context was cancelled")
	}
}

// waitReady waits until the runtime has synchronized the plugin and added
// it to the plugins it sends events to, and checks that the plugin says
// it is ready (p.synchronized, which sends READY=1 to systemd).
func (h *nriPlugin) waitReady(t *testing.T, rt *nriRuntime) {
	t.Helper()
	select {
	case r := <-rt.synced:
		if r.err != nil {
			t.Fatalf("runtime's Synchronize of the plugin: %v", r.err)
		}
		if r.before != "" {
			t.Error(r.before)
		}
	case <-h.done:
		t.Fatalf("plugin left before it was synchronized: registered=%v err=%v", h.registered, h.err)
	case <-time.After(nriWait):
		t.Fatal("runtime did not synchronize the plugin in time")
	}
	select {
	case <-h.p.synchronized:
	default:
		t.Fatal("the runtime synchronized the plugin, but it does not say it is ready")
	}
	// The runtime holds its sync lock until it has added the plugin.
	rt.r.BlockPluginSync().Unblock()
}

// nriFetcher answers pod lookups: the pods' own sysctls by pod ID, or a
// failure for the IDs in fail. Read-only once made.
type nriFetcher struct {
	own  map[string]map[string]string
	fail map[string]bool
}

func (f nriFetcher) Fetch(_ context.Context, podID string) (podsysctl.PodSysctls, error) {
	if f.fail[podID] {
		return podsysctl.PodSysctls{}, errors.New("dial unix /run/containerd/containerd.sock: connection refused")
	}
	return podsysctl.PodSysctls{Own: f.own[podID], Source: podsysctl.SourceSandboxConfig}, nil
}

// nriPod is a pod sandbox as containerd reports it: its own namespaces in
// its list (a host namespace is missing), the network one by path.
func nriPod(id, namespace string, nsTypes ...string) *api.PodSandbox {
	pod := &api.PodSandbox{Id: id, Name: id, Namespace: namespace, Uid: "uid-" + id, Pid: noSuchPid, Linux: &api.LinuxPodSandbox{}}
	for _, typ := range nsTypes {
		ns := &api.LinuxNamespace{Type: typ}
		if typ == "network" {
			ns.Path = "/var/run/netns/cni-" + id
		}
		pod.Linux.Namespaces = append(pod.Linux.Namespaces, ns)
	}
	return pod
}

func nriContainer(id string) *api.Container {
	return &api.Container{Id: id, Name: "app-" + id}
}

// ours is the plugin's part of an adjustment: its sysctls and annotations.
type ours struct {
	sysctls                    map[string]string
	injected, skipped, outcome string
}

func oursOf(adj *api.ContainerAdjustment) ours {
	o := ours{
		injected: adj.GetAnnotations()[outcome.AnnotationInjected],
		skipped:  adj.GetAnnotations()[outcome.AnnotationSkipped],
		outcome:  adj.GetAnnotations()[outcome.AnnotationOutcome],
	}
	if s := adj.GetLinux().GetSysctl(); len(s) > 0 {
		o.sysctls = s
	}
	return o
}

// TestNRISpecMode: containerd 2.4.2 applies sysctl adjustments; each
// container gets in its spec what its pod lacks, and annotations that say
// what it got and why the rest was left out.
func TestNRISpecMode(t *testing.T) {
	rt := startNRIRuntime(t, "2.4.2", true)
	f := nriFetcher{own: map[string]map[string]string{"own": {"net.ipv4.tcp_keepalive_intvl": "33"}}}
	h := newNRIPlugin(t, "", nriDefaults, f, func(podns.Target, []sysctl.Sysctl) []podns.WriteError {
		t.Error("spec mode wrote into a pod's namespaces")
		return nil
	})
	h.serve(t, rt)
	h.waitReady(t, rt)
	if got := h.p.mode(); got != runtimemode.Spec {
		t.Fatalf("mode on containerd 2.4.2 = %s, want spec (runtime %+v)", got, *h.p.runtime.Load())
	}

	hostNetCtr := nriContainer("hostnet")
	hostNetCtr.Linux = &api.LinuxContainer{Namespaces: []*api.LinuxNamespace{
		{Type: "network", Path: "/proc/1/ns/net"}, {Type: "ipc", Path: "/proc/1/ns/ipc"}, {Type: "uts", Path: "/proc/1/ns/uts"},
	}}
	hostNet := "pod shares the host's namespace (network)"
	tests := []struct {
		name string
		pod  *api.PodSandbox
		ctr  *api.Container
		want ours
	}{
		{
			name: "ordinary pod gets every default",
			pod:  nriPod("ordinary", "default", "network", "ipc", "uts", "pid"),
			ctr:  nriContainer("ordinary"),
			want: ours{
				sysctls:  map[string]string{"kernel.msgmax": "16384", "net.ipv4.tcp_keepalive_intvl": "60", "net.ipv4.tcp_keepalive_time": "600"},
				injected: "kernel.msgmax=16384,net.ipv4.tcp_keepalive_intvl=60,net.ipv4.tcp_keepalive_time=600",
				outcome:  outcome.Applied.String(),
			},
		},
		{
			// The container's own list names the pause process's
			// namespaces; the pod's list says they are the host's.
			name: "hostNetwork pod gets no net keys",
			pod:  nriPod("hostnet", "default", "ipc", "uts", "pid"),
			ctr:  hostNetCtr,
			want: ours{
				sysctls:  map[string]string{"kernel.msgmax": "16384"},
				injected: "kernel.msgmax=16384",
				skipped:  "net.ipv4.tcp_keepalive_intvl (" + hostNet + "); net.ipv4.tcp_keepalive_time (" + hostNet + ")",
				outcome:  outcome.Applied.String(),
			},
		},
		{
			name: "pod's own value is left alone",
			pod:  nriPod("own", "default", "network", "ipc", "uts"),
			ctr:  nriContainer("own"),
			want: ours{
				sysctls:  map[string]string{"kernel.msgmax": "16384", "net.ipv4.tcp_keepalive_time": "600"},
				injected: "kernel.msgmax=16384,net.ipv4.tcp_keepalive_time=600",
				skipped:  "net.ipv4.tcp_keepalive_intvl (pod sets it itself)",
				outcome:  outcome.Applied.String(),
			},
		},
		{
			name: "excluded pod is left alone but for its outcome",
			pod:  nriPod("excluded", "kube-system", "network", "ipc", "uts"),
			ctr:  nriContainer("excluded"),
			want: ours{outcome: outcome.Excluded.String()},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := oursOf(rt.startPod(t, tc.pod, tc.ctr))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("containerd receives\n  %+v\nwant\n  %+v", got, tc.want)
			}
		})
	}
}

// TestNRINamespaceMode: containerd 2.1.9 drops sysctl adjustments, so the
// plugin writes into the pod's namespaces at RunPodSandbox and the
// container's annotations say what is really there (review finding 1).
func TestNRINamespaceMode(t *testing.T) {
	rt := startNRIRuntime(t, "2.1.9", false)
	type write struct {
		target podns.Target
		keys   string
	}
	var (
		mu     sync.Mutex
		writes []write
	)
	failNet := "/var/run/netns/cni-failing"
	writer := func(target podns.Target, list []sysctl.Sysctl) []podns.WriteError {
		mu.Lock()
		defer mu.Unlock()
		writes = append(writes, write{target, formatApplied(list)})
		var errs []podns.WriteError
		for _, s := range list {
			if target[sysctl.Net].Path == failNet && s.Key() == "kernel.msgmax" {
				errs = append(errs, podns.WriteError{Key: s.Key(), Value: s.Value(), Err: errors.New("invalid argument")})
			}
		}
		return errs
	}
	takeWrites := func() []write {
		mu.Lock()
		defer mu.Unlock()
		w := writes
		writes = nil
		return w
	}
	h := newNRIPlugin(t, "", nriDefaults+"onError: warn\n", nriFetcher{}, writer)
	h.serve(t, rt)
	h.waitReady(t, rt)
	if got := h.p.mode(); got != runtimemode.Namespace {
		t.Fatalf("mode on containerd 2.1.9 = %s, want namespace (runtime %+v)", got, *h.p.runtime.Load())
	}
	all := "kernel.msgmax=16384,net.ipv4.tcp_keepalive_intvl=60,net.ipv4.tcp_keepalive_time=600"

	t.Run("written at RunPodSandbox", func(t *testing.T) {
		pod := nriPod("good", "default", "network", "ipc", "uts", "pid")
		if err := rt.runPod(pod); err != nil {
			t.Fatal(err)
		}
		want := []write{{podns.Target{sysctl.Net: {Path: "/var/run/netns/cni-good"}, sysctl.IPC: {Pid: noSuchPid, NetPath: "/var/run/netns/cni-good"}, sysctl.UTS: {Pid: noSuchPid, NetPath: "/var/run/netns/cni-good"}}, all}}
		if got := takeWrites(); !reflect.DeepEqual(got, want) {
			t.Fatalf("writes at RunPodSandbox = %+v, want %+v", got, want)
		}
		adj, err := rt.createContainer(pod, nriContainer("good"), api.ContainerState_CONTAINER_RUNNING)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := oursOf(adj), (ours{injected: all, outcome: outcome.Applied.String()}); !reflect.DeepEqual(got, want) {
			t.Errorf("containerd receives %+v, want %+v (no sysctls: it would drop them)", got, want)
		}
		if got := takeWrites(); len(got) != 0 {
			t.Errorf("wrote again at CreateContainer: %+v", got)
		}
	})

	t.Run("onError warn: a failed key is not claimed", func(t *testing.T) {
		pod := nriPod("failing", "default", "network", "ipc", "uts", "pid")
		if err := rt.runPod(pod); err != nil {
			t.Fatalf("onError: warn must let the pod start: %v", err)
		}
		if got := takeWrites(); len(got) != 1 || got[0].keys != all {
			t.Fatalf("writes at RunPodSandbox = %+v, want one of %s", got, all)
		}
		adj, err := rt.createContainer(pod, nriContainer("failing"), api.ContainerState_CONTAINER_RUNNING)
		if err != nil {
			t.Fatal(err)
		}
		got := oursOf(adj)
		if got.sysctls != nil {
			t.Errorf("sysctls in the adjustment: %v", got.sysctls)
		}
		if want := "net.ipv4.tcp_keepalive_intvl=60,net.ipv4.tcp_keepalive_time=600"; got.injected != want {
			t.Errorf("%s = %q, want %q: kernel.msgmax was never written", outcome.AnnotationInjected, got.injected, want)
		}
		if !strings.Contains(got.skipped, "kernel.msgmax (write failed: invalid argument)") {
			t.Errorf("%s = %q, want kernel.msgmax with its write failure", outcome.AnnotationSkipped, got.skipped)
		}
		if got.outcome != outcome.WriteFailed.String() {
			t.Errorf("%s = %q, want %q", outcome.AnnotationOutcome, got.outcome, outcome.WriteFailed.String())
		}
		// The failed key, and only it, is tried again at the container.
		if w := takeWrites(); len(w) != 1 || w[0].keys != "kernel.msgmax=16384" {
			t.Errorf("writes at CreateContainer = %+v, want the failed key once", w)
		}
	})
}

// TestNRISynchronizeAndReady: a restarted plugin counts the running
// containers created while it was away, not those it handled before,
// though nothing was set on them (review finding 2); it is ready only once
// the runtime has synchronized it.
func TestNRISynchronizeAndReady(t *testing.T) {
	rules := `
rules:
  - name: web
    match: {namespaces: [web]}
    sysctls: {net.core.somaxconn: 4096}
exclude:
  namespaces: [kube-system]
`
	rt := startNRIRuntime(t, "2.4.2", true)
	f := nriFetcher{fail: map[string]bool{"web-unknown": true}}
	checkNotReadyYet := func(h *nriPlugin) func() string {
		return func() string {
			if h.p.runtime.Load() == nil {
				return "the runtime synchronizes a plugin it has not configured"
			}
			select {
			case <-h.p.synchronized:
				return "the plugin said it was ready before the runtime's Synchronize"
			default:
				return ""
			}
		}
	}

	// First run: a rules-only config.
	first := newNRIPlugin(t, "", rules, f, nil)
	rt.mu.Lock()
	rt.beforeSync = checkNotReadyYet(first)
	rt.mu.Unlock()
	first.serve(t, rt)
	first.waitReady(t, rt)
	handled := []struct {
		pod  *api.PodSandbox
		want ours
	}{
		{nriPod("web-a", "web", "network"), ours{sysctls: map[string]string{"net.core.somaxconn": "4096"}, injected: "net.core.somaxconn=4096", outcome: outcome.Applied.String()}},
		{nriPod("default-b", "default", "network"), ours{outcome: outcome.NothingToApply.String()}},
		{nriPod("web-unknown", "web", "network"), ours{outcome: outcome.LookupFailed.String()}},
	}
	for _, c := range handled {
		if got := oursOf(rt.startPod(t, c.pod, nriContainer(c.pod.GetId()))); !reflect.DeepEqual(got, c.want) {
			t.Fatalf("pod %s: containerd receives %+v, want %+v", c.pod.GetId(), got, c.want)
		}
	}
	if n := lackingLogged(first.log.String()); n != 0 {
		t.Fatalf("first run: %d container(s) lacking, want 0", n)
	}

	// The plugin is away; pods start without it.
	first.stop(t)
	rt.waitDropped(t)
	rt.startPod(t, nriPod("away-c", "default", "network"), nriContainer("away-c"))
	rt.startPod(t, nriPod("away-d", "web", "network"), nriContainer("away-d"))
	rt.startPod(t, nriPod("away-sys", "kube-system", "network"), nriContainer("away-sys"))
	if _, err := rt.createContainer(nriPod("away-c", "default", "network"), nriContainer("away-c-done"), api.ContainerState_CONTAINER_STOPPED); err != nil {
		t.Fatal(err)
	}

	// It comes back with defaults added: every pod not excluded now calls
	// for something, so only the annotations tell who was handled.
	second := newNRIPlugin(t, "", "sysctls: {net.ipv4.tcp_keepalive_time: 600}\n"+rules, f, nil)
	rt.mu.Lock()
	rt.beforeSync = checkNotReadyYet(second)
	rt.mu.Unlock()
	second.serve(t, rt)
	second.waitReady(t, rt)
	if n := lackingLogged(second.log.String()); n != 2 {
		t.Errorf("Synchronize counts %d container(s) lacking the defaults, want 2 (away-c, away-d)", n)
	}
	if log := second.log.String(); !strings.Contains(log, "pod=away-c") || !strings.Contains(log, "pod=away-d") || strings.Contains(log, "pod=default-b") {
		t.Errorf("log does not name exactly the pods lacking the defaults:\n%s", log)
	}
	// From now on it decides: a new container gets the defaults.
	adj, err := rt.createContainer(nriPod("fresh", "default", "network"), nriContainer("fresh"), api.ContainerState_CONTAINER_RUNNING)
	if err != nil {
		t.Fatal(err)
	}
	if got := oursOf(adj); got.injected != "net.ipv4.tcp_keepalive_time=600" {
		t.Errorf("after the restart a new container gets %+v", got)
	}
}

// TestNRIRefusesSpecModeOn22: spec mode forced on containerd 2.2.9, whose
// NRI v0.11.0 panics on the first sysctl adjustment, fails the
// registration: the runtime never sends the plugin an event.
func TestNRIRefusesSpecModeOn22(t *testing.T) {
	rt := startNRIRuntime(t, "2.2.9", false)
	h := newNRIPlugin(t, runtimemode.Spec, nriDefaults, nriFetcher{}, nil)
	h.serve(t, rt)
	select {
	case <-h.done:
	case <-time.After(nriWait):
		t.Fatal("plugin still connected: registration with spec mode on containerd 2.2.9 did not fail")
	}
	// The runtime closes the connection on the refusal: the stub returns
	// either the refusal or the closed connection, whichever it reads
	// first (seen once in a loaded make test: "ttrpc: closed").
	refused := h.err != nil && (strings.Contains(h.err.Error(), "refusing spec mode") ||
		strings.Contains(h.err.Error(), "ttrpc: closed") && strings.Contains(h.log.String(), "refusing spec mode"))
	if h.registered || !refused {
		t.Fatalf("serveOnce = registered %v, %v; want a refused registration", h.registered, h.err)
	}
	select {
	case <-h.p.synchronized:
		t.Fatal("a refused plugin was synchronized")
	default:
	}
	// Whatever the runtime now does, the plugin is not in it.
	pod := nriPod("after", "default", "network", "ipc", "uts")
	if got := oursOf(rt.startPod(t, pod, nriContainer("after"))); !reflect.DeepEqual(got, ours{}) {
		t.Fatalf("containerd receives %+v from a refused plugin", got)
	}
}
