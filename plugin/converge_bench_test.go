// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// convergeBenchPods is how many running pods the convergence benchmarks
// bring to a new config.
const convergeBenchPods = 200

// benchSandboxes starts n processes, each in its own network, IPC and UTS
// namespaces as a pod sandbox, stopped by pid when the benchmark ends, and
// returns them as the runtime would list their pods.
func benchSandboxes(b *testing.B, n int) []*api.PodSandbox {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	pods := make([]*api.PodSandbox, n)
	for i := range pods {
		cmd := exec.Command("sleep", "3600")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		pid := cmd.Process.Pid
		pods[i] = &api.PodSandbox{
			Id: fmt.Sprintf("bench%03d", i), Name: fmt.Sprintf("p%d", i), Namespace: "default", Pid: uint32(pid),
			Linux: &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{
				{Type: "network", Path: fmt.Sprintf("/proc/%d/ns/net", pid)}, {Type: "ipc"}, {Type: "uts"},
			}},
		}
	}
	return pods
}

// benchConfigs are two configs a reload alternates between: every key
// changes at each one.
var benchConfigs = [2]string{
	"sysctls:\n  net.ipv4.tcp_keepalive_time: 600\n  net.ipv4.tcp_keepalive_intvl: 60\n  kernel.msgmax: 16384\n",
	"sysctls:\n  net.ipv4.tcp_keepalive_time: 650\n  net.ipv4.tcp_keepalive_intvl: 61\n  kernel.msgmax: 16000\n",
}

// BenchmarkConvergeReload is the work from a reload to the last of 200
// running pods converged: one pass of the worker, reading each pod's
// values, planning, writing the three keys that changed, and saving its
// state, without the worker's rests. Compare with
// BenchmarkConvergeMinimalLoop in the same run.
func BenchmarkConvergeReload(b *testing.B) {
	pods := benchSandboxes(b, convergeBenchPods)
	p := newBenchConvergePlugin(b)
	if _, err := p.Synchronize(context.Background(), pods, nil); err != nil {
		b.Fatal(err)
	}
	reload(b, p, benchConfigs[1])
	p.convergePass(context.Background())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		reload(b, p, benchConfigs[i%2])
		p.convergePass(context.Background())
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/convergeBenchPods, "ns/pod")
	// Every pod holds the last config: the pass really wrote.
	want := "16000"
	if (b.N-1)%2 == 0 {
		want = "16384"
	}
	for _, pod := range pods[:3] {
		got := podns.Read(podns.Target{sysctl.IPC: {Pid: int(pod.Pid)}}, []string{"kernel.msgmax"})["kernel.msgmax"]
		if got.Err != nil || got.Value != want {
			b.Fatalf("pod %s: kernel.msgmax %+v, want %s", pod.Id, got, want)
		}
	}
}

// BenchmarkConvergeMinimalLoop is the least a convergence can do: enter
// each pod's namespaces and write the same three keys, nothing read,
// decided or kept.
func BenchmarkConvergeMinimalLoop(b *testing.B) {
	pods := benchSandboxes(b, convergeBenchPods)
	targets := make([]podns.Target, len(pods))
	for i, pod := range pods {
		_, targets[i] = readSandbox(pod, true)
	}
	values := [2][]sysctl.Sysctl{
		{sysctl.New("net.ipv4.tcp_keepalive_time", "600"), sysctl.New("net.ipv4.tcp_keepalive_intvl", "60"), sysctl.New("kernel.msgmax", "16384")},
		{sysctl.New("net.ipv4.tcp_keepalive_time", "650"), sysctl.New("net.ipv4.tcp_keepalive_intvl", "61"), sysctl.New("kernel.msgmax", "16000")},
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, t := range targets {
			if errs := podns.Write(t, values[i%2]); len(errs) > 0 {
				b.Fatal(errs)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/convergeBenchPods, "ns/pod")
}

func newBenchConvergePlugin(b *testing.B) *plugin {
	b.Helper()
	p := newTestPlugin(b, benchConfigs[0], &fakeFetcher{})
	// On a tmpfs, as /run is on most nodes (not on this machine kind,
	// whose /run is on its disk): /dev/shm.
	dir, err := os.MkdirTemp("/dev/shm", "nri-sysctl-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	p.openPodState(dir + "/pods")
	if p.podState == nil {
		b.Fatal("no pod state")
	}
	// The work alone: the worker's rests between pods (pacer) are in the
	// end-to-end benchmark's reload-to-the-last-pod time, not here.
	p.convergePace.share = 1
	p.visitNamespaces = podns.Visit // the real visit, not the tests' pair
	return p
}
