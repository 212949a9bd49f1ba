package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/sirupsen/logrus"
)

// recordingWriter stands in for podns.Write: it records each call and
// fails the keys in fail.
type recordingWriter struct {
	mu    sync.Mutex
	calls []string
	fail  map[string]bool
}

func (w *recordingWriter) write(_ podns.Target, list []sysctl.Sysctl) []podns.WriteError {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, formatApplied(list))
	var errs []podns.WriteError
	for _, s := range list {
		if w.fail[s.Key()] {
			errs = append(errs, podns.WriteError{Key: s.Key(), Err: errors.New("invalid argument")})
		}
	}
	return errs
}

// Review finding 1: with onError: warn and a failed write, the container's
// annotation claims only what really is in the pod's namespaces, and the
// failed key is tried again at the next container.
func TestNamespaceModeAnnotatesOnlyWhatWasWritten(t *testing.T) {
	p := newTestPlugin(t, testConfig+"mode: namespace\nonError: warn\n", &fakeFetcher{})
	w := &recordingWriter{fail: map[string]bool{"kernel.msgmax": true}}
	p.writeNamespaces = w.write
	pod := testPod("w", "network", "ipc", "uts")
	if err := p.RunPodSandbox(context.Background(), pod); err != nil {
		t.Fatalf("onError warn: %v", err)
	}
	adj, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := annotation(adj, annotationInjected), "net.ipv4.tcp_keepalive_intvl=60,net.ipv4.tcp_keepalive_time=600"; got != want {
		t.Errorf("injected = %q, want %q (kernel.msgmax was never written)", got, want)
	}
	if got := annotation(adj, annotationSkipped); !strings.Contains(got, "kernel.msgmax (write failed: invalid argument)") {
		t.Errorf("skipped = %q, want kernel.msgmax with its write failure", got)
	}
	if got := annotation(adj, annotationOutcome); got != outcomeWriteFailed.String() {
		t.Errorf("outcome = %q, want %q", got, outcomeWriteFailed.String())
	}
	// Each container creation tries the failed key again, and only that one.
	w.fail = nil
	adj, _, err = p.CreateContainer(context.Background(), pod, &api.Container{Name: "second"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(w.calls, " | "), "kernel.msgmax=16384,net.ipv4.tcp_keepalive_intvl=60,net.ipv4.tcp_keepalive_time=600 | kernel.msgmax=16384 | kernel.msgmax=16384"; got != want {
		t.Errorf("writes %q, want %q", got, want)
	}
	if got := annotation(adj, annotationOutcome); got != outcomeApplied.String() {
		t.Errorf("after the retry, outcome = %q, want %q", got, outcomeApplied.String())
	}
	if got := annotation(adj, annotationInjected); !strings.Contains(got, "kernel.msgmax=16384") {
		t.Errorf("after the retry, injected = %q lacks kernel.msgmax", got)
	}
}

// Issue 17 (and finding 1): a pod whose RunPodSandbox the plugin missed gets
// its sysctls written at its next container's creation, into its own
// namespaces, and only then; excluded and host-namespace pods stay alone.
func TestNamespaceModeHealsPodStartedWhileAway(t *testing.T) {
	for _, tc := range []struct {
		name       string
		pod        *api.PodSandbox
		wantWrites string
	}{
		{"ordinary pod", testPod("h1", "network", "ipc", "uts"), "kernel.msgmax=16384,net.ipv4.tcp_keepalive_intvl=60,net.ipv4.tcp_keepalive_time=600"},
		{"hostNetwork and hostIPC pod", testPod("h2", "uts"), ""},
		{"excluded pod", func() *api.PodSandbox { p := testPod("h3", "network", "ipc"); p.Namespace = "kube-system"; return p }(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPlugin(t, testConfig+"mode: namespace\n", &fakeFetcher{})
			w := &recordingWriter{}
			p.writeNamespaces = w.write
			// No RunPodSandbox: the plugin was down when the pod started.
			for _, name := range []string{"app", "sidecar"} {
				if _, _, err := p.CreateContainer(context.Background(), tc.pod, &api.Container{Name: name}); err != nil {
					t.Fatal(err)
				}
			}
			if got := strings.Join(w.calls, " | "); got != tc.wantWrites {
				t.Errorf("writes %q, want %q (once, at the first container)", got, tc.wantWrites)
			}
		})
	}
}

// A healing write that fails with onError: fail fails the container, with
// the key named, as at RunPodSandbox.
func TestNamespaceModeHealFailureFailsTheContainer(t *testing.T) {
	p := newTestPlugin(t, testConfig+"mode: namespace\n", &fakeFetcher{})
	p.writeNamespaces = (&recordingWriter{fail: map[string]bool{"kernel.msgmax": true}}).write
	_, _, err := p.CreateContainer(context.Background(), testPod("hf", "network", "ipc"), &api.Container{Name: "app"})
	if err == nil || !strings.Contains(err.Error(), "kernel.msgmax: invalid argument") {
		t.Fatalf("err = %v, want the failed key", err)
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

// Review finding 3: a bogus --mode is refused at start.
func TestBogusModeFlagIsRefused(t *testing.T) {
	var stderr strings.Builder
	if _, err := parseRunFlags([]string{"--mode", "bogus"}, &stderr); err == nil {
		t.Fatal("--mode bogus accepted")
	}
	if !strings.Contains(stderr.String(), `unknown mode "bogus"`) {
		t.Errorf("stderr %q does not say why", stderr.String())
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
	p.reload(writeFile(t, testConfig+"mode: namespace\n"))
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

// Issue 10: spec mode forced on a runtime whose NRI panics on sysctl
// adjustments fails the registration (and a reload asking for it is
// rejected whole); auto mode picks namespace there.
func TestForcedSpecModeRefusedOnCrashingRuntime(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	p := newPlugin(log, nil, runtimemode.Spec)
	_, err := p.Configure(context.Background(), "", "containerd", "2.2.9")
	if err == nil || !strings.Contains(err.Error(), "2.2.9") || !strings.Contains(err.Error(), "panics") {
		t.Fatalf("Configure with --mode spec on containerd 2.2.9: err = %v, want a refusal naming the version and the panic", err)
	}

	q := newTestPlugin(t, testConfig, &fakeFetcher{})
	if _, err := q.Configure(context.Background(), "", "containerd", "2.2.9"); err != nil {
		t.Fatal(err)
	}
	if q.mode() != runtimemode.Namespace {
		t.Fatalf("auto mode on 2.2.9: %s, want namespace", q.mode())
	}
	q.reload(writeFile(t, "sysctls: {net.core.somaxconn: 1024}\nmode: spec\n"))
	if got := q.current.Load().cfg.Sysctls; len(got) != 3 || q.mode() != runtimemode.Namespace {
		t.Fatalf("a reload asking for spec mode on 2.2.9 must be rejected whole: mode %s, sysctls %v", q.mode(), got)
	}
}

// Review finding 8: a lookup that hangs is given up before the runtime's
// deadline, and the container is created without defaults.
func TestHandlersAnswerBeforeTheDeadline(t *testing.T) {
	p := newTestPlugin(t, testConfig, &fakeFetcher{})
	p.useFetcher(blockingFetcher{})
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	deadline, _ := ctx.Deadline()
	adj, _, err := p.CreateContainer(ctx, testPod("d1", "network"), &api.Container{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if late := time.Since(deadline); late > -20*time.Millisecond {
		t.Errorf("answered %v after the runtime's deadline (want before it, with a margin)", late)
	}
	if got := annotation(adj, annotationOutcome); got != outcomeLookupFailed.String() {
		t.Errorf("outcome %q, want %q", got, outcomeLookupFailed.String())
	}
}

// blockingFetcher answers only when its context ends.
type blockingFetcher struct{}

func (blockingFetcher) Fetch(ctx context.Context, _ string) (podsysctl.PodSysctls, error) {
	<-ctx.Done()
	return podsysctl.PodSysctls{}, ctx.Err()
}

// Review finding 8: nothing is written into a pod once the deadline passed.
func TestNoNamespaceWriteAfterTheDeadline(t *testing.T) {
	p := newTestPlugin(t, testConfig+"mode: namespace\nonError: warn\n", &fakeFetcher{})
	w := &recordingWriter{}
	p.writeNamespaces = w.write
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	// The lookup is served from the record, so only the write is at stake.
	rec := p.record(testPod("d2", "network", "ipc"))
	rec.own, rec.lookedUp = podsysctl.PodSysctls{Source: podsysctl.SourceSandboxConfig}, true
	if err := p.RunPodSandbox(ctx, testPod("d2", "network", "ipc")); err != nil {
		t.Fatal(err)
	}
	if len(w.calls) != 0 {
		t.Fatalf("wrote %v after the deadline", w.calls)
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

// Review finding 13: a key another plugin set in slash form is recognised.
func TestExistingSlashFormKeyIsKept(t *testing.T) {
	p := newTestPlugin(t, testConfig, &fakeFetcher{})
	ctr := &api.Container{Name: "app", Linux: &api.LinuxContainer{Sysctl: map[string]string{"net/ipv4/tcp_keepalive_time": "900"}}}
	adj, _, err := p.CreateContainer(context.Background(), testPod("sl", "network", "ipc"), ctr)
	if err != nil {
		t.Fatal(err)
	}
	if _, set := adj.GetLinux().GetSysctl()["net.ipv4.tcp_keepalive_time"]; set {
		t.Errorf("set tcp_keepalive_time although another plugin set it as net/ipv4/tcp_keepalive_time: %v", adj.GetLinux().GetSysctl())
	}
}

// Issue 10: the NRI version the stub infers for a runtime that reported
// none is not taken for a report (the stub calls containerd 2.3 v0.11.0).
func TestReportedNRIVersion(t *testing.T) {
	for _, tc := range []struct{ stub, runtime, version, want string }{
		{"v0.12.3", "containerd", "2.4.2", "v0.12.3"},
		{"v0.11.0", "containerd", "v2.3.7", ""}, // the stub's guess
		{"v0.11.0", "containerd", "v2.2.9", ""},
		{api.UnknownVersion, "containerd", "2.2.9", ""}, // no guess without the "v"
		{"", "containerd", "2.1.9", ""},
		{api.UnknownVersion, "cri-o", "1.36.0", ""},
	} {
		if got := reportedNRIVersion(tc.stub, tc.runtime, tc.version); got != tc.want {
			t.Errorf("reportedNRIVersion(%q, %s %s) = %q, want %q", tc.stub, tc.runtime, tc.version, got, tc.want)
		}
	}
}

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
	p.reload(writeFile(t, testConfig+"containerdAddress: /run/a.sock\n"))
	podA := testPod("ra", "network", "ipc")
	if err := p.RunPodSandbox(context.Background(), podA); err != nil {
		t.Fatal(err)
	}
	p.reload(writeFile(t, testConfig+"containerdAddress: /run/b.sock\n"))
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
