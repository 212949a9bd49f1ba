// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/outcome"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
)

// recordingWriter stands in for podns.Write: it records each call and
// fails the keys in fail.
type recordingWriter struct {
	mu    sync.Mutex
	calls []string
	fail  map[string]bool
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
	if got, want := annotation(adj, outcome.AnnotationInjected), "net.ipv4.tcp_keepalive_intvl=60,net.ipv4.tcp_keepalive_time=600"; got != want {
		t.Errorf("injected = %q, want %q (kernel.msgmax was never written)", got, want)
	}
	if got := annotation(adj, outcome.AnnotationSkipped); !strings.Contains(got, "kernel.msgmax (write failed: invalid argument)") {
		t.Errorf("skipped = %q, want kernel.msgmax with its write failure", got)
	}
	if got := annotation(adj, outcome.AnnotationOutcome); got != outcome.WriteFailed.String() {
		t.Errorf("outcome = %q, want %q", got, outcome.WriteFailed.String())
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
	if got := annotation(adj, outcome.AnnotationOutcome); got != outcome.Applied.String() {
		t.Errorf("after the retry, outcome = %q, want %q", got, outcome.Applied.String())
	}
	if got := annotation(adj, outcome.AnnotationInjected); !strings.Contains(got, "kernel.msgmax=16384") {
		t.Errorf("after the retry, injected = %q lacks kernel.msgmax", got)
	}
}

// A pod whose RunPodSandbox the plugin missed gets
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
	if err == nil || !strings.Contains(err.Error(), `kernel.msgmax "16384": invalid argument`) {
		t.Fatalf("err = %v, want the failed key", err)
	}
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
