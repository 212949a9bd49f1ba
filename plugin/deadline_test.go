// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/outcome"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// stuckFetcher ignores its context: it answers only when release is
// closed, as a step that does not honour the deadline would.
type stuckFetcher struct{ release chan struct{} }

func (f stuckFetcher) Fetch(context.Context, string) (podsysctl.PodSysctls, error) {
	<-f.release
	return podsysctl.PodSysctls{}, errors.New("released")
}

// A decision that does not end by the runtime's deadline is
// answered anyway, before the deadline: timed_out on a node that skips,
// a refusal (retried by the kubelet) with onLookupError: fail.
func TestCreateContainerAnswersWhateverDecideDoes(t *testing.T) {
	for _, tt := range []struct {
		name    string
		extra   string
		wantErr bool
	}{
		{"onLookupError skip", "", false},
		{"onLookupError fail", "onLookupError: fail\n", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestPlugin(t, testConfig+tt.extra, &fakeFetcher{})
			stuck := stuckFetcher{release: make(chan struct{})}
			defer close(stuck.release)
			p.useFetcher(stuck)
			ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
			defer cancel()
			deadline, _ := ctx.Deadline()
			adj, _, err := p.CreateContainer(ctx, testPod("t1", "network"), &api.Container{Name: "app"})
			if late := time.Since(deadline); late > -10*time.Millisecond {
				t.Errorf("answered %v after the runtime's deadline (want before it)", late)
			}
			if tt.wantErr {
				if !errors.Is(err, errLookupRefused) {
					t.Fatalf("err = %v, want a refusal (%v)", err, errLookupRefused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := annotation(adj, outcome.AnnotationOutcome); got != outcome.TimedOut.String() {
				t.Errorf("outcome %q, want %q", got, outcome.TimedOut.String())
			}
		})
	}
}

// With onLookupError: fail a pod that cannot be looked
// up gets a refused container, not a bare one; the default keeps today's
// behaviour (lookup_failed, created).
func TestOnLookupError(t *testing.T) {
	for _, tt := range []struct {
		extra       string
		wantRefused bool
	}{{"", false}, {"onLookupError: skip\n", false}, {"onLookupError: fail\n", true}} {
		for _, mode := range []string{"spec", "namespace"} {
			t.Run(mode+"/"+strings.TrimSpace(tt.extra), func(t *testing.T) {
				p := newTestPlugin(t, testConfig+"mode: "+mode+"\n"+tt.extra, &fakeFetcher{err: errors.New("containerd unreachable")})
				p.writeNamespaces = (&recordingWriter{}).write
				pod := testPod("l1", "network", "ipc")
				if err := p.RunPodSandbox(context.Background(), pod); err != nil {
					t.Fatalf("RunPodSandbox: %v (the sandbox is never refused for a lookup)", err)
				}
				adj, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "app"})
				if tt.wantRefused {
					if !errors.Is(err, errLookupRefused) || adj != nil {
						t.Fatalf("CreateContainer = %v, %v; want a refusal", adj, err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if got := annotation(adj, outcome.AnnotationOutcome); got != outcome.LookupFailed.String() {
					t.Errorf("outcome %q, want %q", got, outcome.LookupFailed.String())
				}
			})
		}
	}
}

// What the plugin writes on a container is bounded whatever the
// pod carries: a 256 KiB profiles annotation (the Kubernetes limit for
// all of a pod's annotations) gets one short skip, and a config whose 300
// keys all skip gets a skipped annotation cut at maxAnnotationBytes.
func TestAnnotationsAreBounded(t *testing.T) {
	t.Run("profiles annotation at the Kubernetes limit", func(t *testing.T) {
		p := newTestPlugin(t, testConfig, &fakeFetcher{})
		pod := testPod("a1", "network", "ipc")
		var names strings.Builder
		for i := 0; names.Len() < 256<<10; i++ {
			fmt.Fprintf(&names, "p%d,", i)
		}
		pod.Annotations = map[string]string{config.ProfilesAnnotation: names.String()[:256<<10]}
		adj, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "app"})
		if err != nil {
			t.Fatal(err)
		}
		skipped := annotation(adj, outcome.AnnotationSkipped)
		if !strings.HasPrefix(skipped, config.ProfilesAnnotation+" (no profile applied: the annotation is 262144 bytes long") || len(skipped) > 200 {
			t.Errorf("skipped annotation (%d bytes) = %.300q", len(skipped), skipped)
		}
		if got := annotation(adj, outcome.AnnotationInjected); got != "kernel.msgmax=16384,net.ipv4.tcp_keepalive_intvl=60,net.ipv4.tcp_keepalive_time=600" {
			t.Errorf("injected %q: the pod must keep its defaults", got)
		}
	})
	t.Run("a config whose every key skips", func(t *testing.T) {
		var cfg strings.Builder
		cfg.WriteString("sysctls:\n")
		for i := range 300 {
			fmt.Fprintf(&cfg, "  net.ipv4.conf.eth%d.rp_filter: 2\n", i)
		}
		p := newTestPlugin(t, cfg.String(), &fakeFetcher{})
		adj, _, err := p.CreateContainer(context.Background(), testPod("a2", "ipc"), &api.Container{Name: "app"})
		if err != nil {
			t.Fatal(err)
		}
		skipped := annotation(adj, outcome.AnnotationSkipped)
		if len(skipped) > maxAnnotationBytes || !strings.HasSuffix(skipped, fmt.Sprintf(" more, cut at %d bytes)", maxAnnotationBytes)) {
			t.Errorf("skipped annotation is %d bytes, ends %q; want at most %d, with the cut marker", len(skipped), skipped[max(0, len(skipped)-60):], maxAnnotationBytes)
		}
	})
}

func TestJoinBounded(t *testing.T) {
	for _, tt := range []struct {
		parts []string
		most  int
		want  string
	}{
		{nil, 100, ""},
		{[]string{"a", "b"}, 100, "a,b"},
		{[]string{"aaaa", "bbbb"}, 9, "aaaa,bbbb"},
		{[]string{strings.Repeat("a", 40), strings.Repeat("b", 40), "c"}, 80, strings.Repeat("a", 40) + " ... (2 more, cut at 80 bytes)"},
		{[]string{strings.Repeat("a", 200)}, 80, " ... (1 more, cut at 80 bytes)"},
	} {
		got := joinBounded(tt.parts, ",", tt.most)
		if got != tt.want {
			t.Errorf("joinBounded(%d parts, %d) = %q, want %q", len(tt.parts), tt.most, got, tt.want)
		}
		if len(got) > tt.most {
			t.Errorf("joinBounded(%d parts, %d) is %d bytes", len(tt.parts), tt.most, len(got))
		}
	}
}

// A namespace-mode RunPodSandbox whose write does not return (a kernel
// that hangs, say) is answered before the deadline, and the pod's first
// container is then asked to heal it.
func TestRunPodSandboxAnswersWhateverTheWriteDoes(t *testing.T) {
	p := newTestPlugin(t, testConfig+"mode: namespace\n", &fakeFetcher{})
	release := make(chan struct{})
	defer close(release)
	p.writeNamespaces = func(podns.Target, []sysctl.Sysctl) []podns.WriteError {
		<-release
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	deadline, _ := ctx.Deadline()
	if err := p.RunPodSandbox(ctx, testPod("w1", "network", "ipc")); err != nil {
		t.Fatal(err)
	}
	if late := time.Since(deadline); late > -10*time.Millisecond {
		t.Errorf("answered %v after the runtime's deadline (want before it)", late)
	}
}

// The injected annotation reads back as written: a value with commas (a
// list), spaces or tabs is one value, and a cut annotation gives its
// whole entries and nothing for the keys cut off.
func TestParseAppliedReadsWhatFormatAppliedWrote(t *testing.T) {
	list := []sysctl.Sysctl{
		sysctl.New("net.ipv4.ip_local_reserved_ports", "30000-30010,31000"),
		sysctl.New("net.ipv4.ping_group_range", "0\t2147483647"),
		sysctl.New("net.ipv4.tcp_rmem", "4096 131072 6291456"),
		sysctl.New("net.ipv4.tcp_keepalive_time", "600"),
	}
	want := map[string]string{}
	for _, s := range list {
		want[s.Key()] = s.Value()
	}
	if got := parseApplied(formatApplied(list)); !maps.Equal(got, want) {
		t.Errorf("parseApplied(formatApplied) = %q, want %q", got, want)
	}

	var long []sysctl.Sysctl
	for i := range 400 {
		long = append(long, sysctl.New(fmt.Sprintf("net.ipv4.conf.eth%d.rp_filter", i), "1,2"))
	}
	text := formatApplied(long)
	if !cutMarkerPattern.MatchString(text) {
		t.Fatalf("%d keys did not cut the annotation: %d bytes", len(long), len(text))
	}
	got := parseApplied(text)
	if len(got) == 0 || len(got) == len(long) {
		t.Fatalf("a cut annotation gave %d keys of %d", len(got), len(long))
	}
	for k, v := range got {
		if v != "1,2" {
			t.Errorf("cut annotation: %s=%q, want every entry read whole as 1,2", k, v)
		}
	}
	if _, ok := got[long[len(got)].Key()]; ok {
		t.Errorf("a key cut off the annotation was read: %s", long[len(got)].Key())
	}
}
