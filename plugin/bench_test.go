// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/outcome"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/sirupsen/logrus"
)

// Benchmarks of nri-sysctl's own handlers, in process: what the plugin
// adds on top of NRI's ttrpc round trips when containerd calls it. The pod
// lookup is a fake that answers at once; its real cost (a gRPC call to
// containerd) is measured by the end-to-end benchmark.

// benchPluginConfig: 16 defaults and a few rules, as in `make bench`.
func benchPluginConfig() string {
	var b strings.Builder
	b.WriteString("sysctls:\n")
	for i, k := range []string{
		"net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
		"net.core.somaxconn", "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_fin_timeout",
		"net.ipv4.tcp_syn_retries", "net.ipv4.tcp_synack_retries", "net.ipv4.tcp_tw_reuse",
		"net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_mtu_probing", "net.ipv4.tcp_fastopen",
		"net.ipv4.tcp_retries2", "kernel.msgmax", "kernel.msgmnb", "kernel.shmmni",
	} {
		fmt.Fprintf(&b, "  %s: %d\n", k, i+1)
	}
	b.WriteString(`rules:
  - name: web-backlog
    match: {namespaces: ["bench*"], labels: {tier: web}}
    sysctls: {net.core.somaxconn: 2222}
  - name: batch
    match: {namespaces: ["batch-*"]}
    sysctls: {net.ipv4.tcp_fin_timeout: 20}
  - name: sandboxed
    match: {runtimeHandlers: ["runsc*", "kata*"]}
    sysctls: {net.ipv4.tcp_keepalive_time: 300}
exclude:
  namespaces: [kube-system]
  labels: {nri-sysctl: "off"}
`)
	return b.String()
}

type instantFetcher struct{}

func (instantFetcher) Fetch(context.Context, string) (podsysctl.PodSysctls, error) {
	return podsysctl.PodSysctls{Own: map[string]string{"net.ipv4.tcp_keepalive_intvl": "33"}, Source: podsysctl.SourceSandboxConfig}, nil
}

func newBenchPlugin(b *testing.B, runtimeVersion string) *plugin {
	b.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	log.SetLevel(logrus.InfoLevel) // the production default
	p := newPlugin(log, nil, "")
	if _, err := p.Configure(context.Background(), benchPluginConfig(), "containerd", runtimeVersion); err != nil {
		b.Fatal(err)
	}
	p.useFetcher(instantFetcher{})
	return p
}

func benchPodSandbox(id string) *api.PodSandbox {
	return &api.PodSandbox{
		Id: id, Name: "web-" + id, Namespace: "bench", Uid: "uid-" + id, Pid: noSuchPid,
		Labels:         map[string]string{"tier": "web", "app": "bench"},
		RuntimeHandler: "runc",
		Linux: &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{
			{Type: "network", Path: "/var/run/netns/cni-" + id}, {Type: "ipc"}, {Type: "uts"}, {Type: "pid"},
		}},
	}
}

func benchContainer() *api.Container {
	return &api.Container{Name: "app", Linux: &api.LinuxContainer{Sysctl: map[string]string{}}}
}

// BenchmarkCreateContainerCached: spec mode, a container of a pod already
// looked up (its second and later containers).
func BenchmarkCreateContainerCached(b *testing.B) { benchCreateContainerCached(b, false) }

// BenchmarkCreateContainerCachedMetrics is BenchmarkCreateContainerCached
// with metrics on (--metrics-address): what counting costs per container.
func BenchmarkCreateContainerCachedMetrics(b *testing.B) { benchCreateContainerCached(b, true) }

func benchCreateContainerCached(b *testing.B, metricsOn bool) {
	p := newBenchPlugin(b, "2.4.2")
	if metricsOn {
		p.meter.Store(p.newMetrics())
		p.useFetcher(instantFetcher{})
	}
	ctx := context.Background()
	pod, ctr := benchPodSandbox("p0"), benchContainer()
	adj, _, err := p.CreateContainer(ctx, pod, ctr)
	// 16 defaults less the pod's own tcp_keepalive_intvl.
	if err != nil || len(adj.GetLinux().GetSysctl()) != 15 {
		b.Fatalf("adjustment %v, %v: want 15 sysctls", adj.GetLinux().GetSysctl(), err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := p.CreateContainer(ctx, pod, ctr); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPodLifecycleSpecMode: one pod with one container in spec mode,
// every event nri-sysctl subscribes to: RunPodSandbox (nothing to do),
// CreateContainer (lookup miss, decision, adjustment) and RemovePodSandbox.
func BenchmarkPodLifecycleSpecMode(b *testing.B) {
	p := newBenchPlugin(b, "2.4.2")
	ctx := context.Background()
	pods := make([]*api.PodSandbox, 256)
	for i := range pods {
		pods[i] = benchPodSandbox(fmt.Sprintf("p%d", i))
	}
	ctr := benchContainer()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		pod := pods[i%len(pods)]
		i++
		if err := p.RunPodSandbox(ctx, pod); err != nil {
			b.Fatal(err)
		}
		if _, _, err := p.CreateContainer(ctx, pod, ctr); err != nil {
			b.Fatal(err)
		}
		if err := p.RemovePodSandbox(ctx, pod); err != nil {
			b.Fatal(err)
		}
	}
	if n := p.records.len(); n != 0 {
		b.Fatalf("%d pod(s) left in the cache", n)
	}
}

// BenchmarkMetricsDecided: what metrics on add to one container's
// decision (15 keys applied, 1 skipped, as in the Cached benchmarks).
func BenchmarkMetricsDecided(b *testing.B) {
	p := newBenchPlugin(b, "2.4.2")
	m := p.newMetrics()
	rec := p.record(benchPodSandbox("p0"))
	d, _, ok := p.decideForPod(context.Background(), rec, nil)
	if !ok || len(d.Apply) != 15 || len(d.Skipped) != 1 {
		b.Fatalf("decision %+v: want 15 applied, 1 skipped", d)
	}
	b.ReportAllocs()
	for b.Loop() {
		m.decided("p0", outcome.Applied, d.Apply, d.Skipped)
	}
}
