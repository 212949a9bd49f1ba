// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/outcome"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/nri-sysctl/nri-sysctl/test/fixture"
	"github.com/sirupsen/logrus"
)

const profileConfig = fixture.ProfilesConfig

func profilePod(id, namespace, profiles string) *api.PodSandbox {
	pod := testPod(id, "network", "ipc", "uts")
	pod.Namespace = namespace
	pod.Annotations = map[string]string{config.ProfilesAnnotation: profiles}
	return pod
}

// The container's annotations say what each profile gave, in the skipped
// annotation's "name (reason)" form; the rest still applies.
func TestProfileAnnotationsOnTheContainer(t *testing.T) {
	p := newTestPlugin(t, profileConfig, &fakeFetcher{})
	tests := []struct {
		name                      string
		pod                       *api.PodSandbox
		own                       map[string]string
		injected, skipped, result string
	}{
		{"allowed, then a later one", profilePod("a", "trading-eu", "low-latency,many-conns"), nil,
			"net.core.somaxconn=8192,net.ipv4.tcp_keepalive_time=600,net.ipv4.tcp_slow_start_after_idle=0", "", "applied"},
		{"not allowed and unknown", profilePod("b", "default", "low-latency,x"), nil,
			"net.core.somaxconn=1024,net.ipv4.tcp_keepalive_time=600",
			"profile/low-latency (not allowed in namespace default); profile/x (no such profile)", "applied"},
		{"the pod's own value wins", profilePod("c", "trading-eu", "low-latency"), map[string]string{"net.core.somaxconn": "10"},
			"net.ipv4.tcp_keepalive_time=600,net.ipv4.tcp_slow_start_after_idle=0", "net.core.somaxconn (pod sets it itself)", "applied"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p.useFetcher(&fakeFetcher{own: tc.own})
			adj, _, err := p.CreateContainer(context.Background(), tc.pod, &api.Container{Name: "app"})
			if err != nil {
				t.Fatal(err)
			}
			ann := adj.GetAnnotations()
			if got := ann[outcome.AnnotationInjected]; got != tc.injected {
				t.Errorf("injected = %q, want %q", got, tc.injected)
			}
			if got := ann[outcome.AnnotationSkipped]; got != tc.skipped {
				t.Errorf("skipped = %q, want %q", got, tc.skipped)
			}
			if got := ann[outcome.AnnotationOutcome]; got != tc.result {
				t.Errorf("outcome = %q, want %q", got, tc.result)
			}
		})
	}
	adj, _, err := p.CreateContainer(context.Background(), func() *api.PodSandbox {
		pod := profilePod("d", "trading-eu", "low-latency")
		pod.Annotations["nri-sysctl.io/off"] = "true"
		return pod
	}(), &api.Container{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if ann := adj.GetAnnotations(); ann[outcome.AnnotationOutcome] != "excluded" || ann[outcome.AnnotationInjected] != "" || ann[outcome.AnnotationSkipped] != "" {
		t.Errorf("excluded pod annotations = %v, want the outcome excluded alone", ann)
	}
}

// nri_sysctl_profiles_total counts once per pod and profile, however many
// containers the pod has, and profile skips are no sysctl skips.
func TestProfileMetricCountedOncePerPod(t *testing.T) {
	p, m := newMeteredTestPlugin(t, profileConfig, &fakeFetcher{})
	var logs bytes.Buffer
	p.log.SetOutput(&logs)
	p.log.SetFormatter(&logrus.TextFormatter{DisableTimestamp: true})
	before := counts(m)
	pods := []*api.PodSandbox{
		profilePod("a", "trading-eu", "low-latency,many-conns"),
		profilePod("b", "default", "low-latency,x"),
	}
	for _, pod := range pods {
		for _, name := range []string{"app", "sidecar", "third"} {
			if _, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: name}); err != nil {
				t.Fatal(err)
			}
		}
	}
	wantMoved(t, "two pods of three containers", before, counts(m), map[string]float64{
		"profiles/applied": 2, "profiles/not_allowed": 1, "profiles/unknown": 1,
		"containers/applied": 6, "applied": 3*3 + 3*2, "lookups": 2,
	})
	for _, want := range []string{
		`level=warning msg="profile not applied; the pod gets the rest" namespace=default pod=p-b profile=low-latency reason="not allowed in namespace default" result=not_allowed`,
		`level=warning msg="profile not applied; the pod gets the rest" namespace=default pod=p-b profile=x reason="no such profile" result=unknown`,
	} {
		if n := strings.Count(logs.String(), want); n != 1 {
			t.Errorf("log has %d lines %s, want 1; log:\n%s", n, want, logs.String())
		}
	}
}

// Namespace mode: the profile's keys are written into the pod's namespaces
// at RunPodSandbox, and the profile is counted once for the pod, not again
// at each container.
func TestProfileInNamespaceMode(t *testing.T) {
	p, m := newMeteredTestPlugin(t, profileConfig+"mode: namespace\n", &fakeFetcher{})
	var written []string
	p.writeNamespaces = func(_ podns.Target, list []sysctl.Sysctl) []podns.WriteError {
		for _, s := range list {
			written = append(written, s.Key()+"="+s.Value())
		}
		return nil
	}
	pod := profilePod("n", "trading-eu", "low-latency,x")
	before := counts(m)
	if err := p.RunPodSandbox(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	want := []string{"net.core.somaxconn=4096", "net.ipv4.tcp_keepalive_time=600", "net.ipv4.tcp_slow_start_after_idle=0"}
	if !slices.Equal(written, want) {
		t.Errorf("written %v, want %v", written, want)
	}
	for _, name := range []string{"app", "side"} {
		adj, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if got := adj.GetAnnotations()[outcome.AnnotationSkipped]; got != "profile/x (no such profile)" {
			t.Errorf("%s: skipped = %q", name, got)
		}
	}
	wantMoved(t, "namespace-mode pod of two containers", before, counts(m), map[string]float64{
		"profiles/applied": 1, "profiles/unknown": 1,
		"containers/applied": 2, "applied": 6, "lookups": 1, "namespace_writes": 3,
	})
}

// The plugin logs validate's warning at each load, with file, line and key.
func TestLoadLogsUnboundedProfiles(t *testing.T) {
	var logs bytes.Buffer
	log := logrus.New()
	log.SetOutput(&logs)
	log.SetFormatter(&logrus.TextFormatter{DisableTimestamp: true})
	p := newPlugin(log, nil, "")
	if _, err := p.Configure(context.Background(), profileConfig, "containerd", "2.4.2"); err != nil {
		t.Fatal(err)
	}
	want := `level=warning msg="not in Kubernetes' safe set, and the profile has no allowedNamespaces: a pod in any namespace can ask for it" file=`
	if n := strings.Count(logs.String(), want); n != 1 {
		t.Errorf("log has %d warnings, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "key=profiles.many-conns.sysctls.net.core.somaxconn line=10") {
		t.Errorf("warning lacks key and line:\n%s", logs.String())
	}
}
