// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

// The metrics listener under idle connections: any
// pod could open connections to a DaemonSet's metrics port, send one
// request each and keep them, until the plugin's memory limit killed it.
// This benchmark opens 10,000 such connections to the real binary and
// reads its RSS and the health probe's latency meanwhile (make
// bench-smoke runs it; docs/benchmarks.md has the figures). It needs no
// containerd: the listener runs before the plugin registers.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rssKiB reads a process's VmRSS and VmHWM.
func rssKiB(t *testing.T, pid int) (rss, peak int) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	return memoryKiB(data)
}

// memoryKiB reads VmRSS and VmHWM from the text of /proc/<pid>/status.
func memoryKiB(status []byte) (rss, peak int) {
	for _, line := range strings.Split(string(status), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		n, _ := strconv.Atoi(fields[1])
		switch fields[0] {
		case "VmRSS:":
			rss = n
		case "VmHWM:":
			peak = n
		}
	}
	return rss, peak
}

func TestBenchIdleConnections(t *testing.T) {
	skipUnlessBench(t)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	bin := envOr("NRI_SYSCTL_BIN", filepath.Join(wd, "..", "..", "bin", "nri-sysctl"))
	conns := envInt(t, "NRI_SYSCTL_BENCH_IDLE_CONNS", 10000)
	path := envOr("NRI_SYSCTL_BENCH_IDLE_PATH", "/healthz")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("sysctls:\n  net.ipv4.tcp_keepalive_time: 600\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddress(t)
	// No NRI socket: the plugin retries registering while it serves.
	// The temp dir is below a world-writable /tmp.
	cmd := exec.Command(bin, "--config", cfg, "--allow-insecure-config", "--skip-kernel-check", "--nri-socket", filepath.Join(dir, "none.sock"), "--pod-state-dir", filepath.Join(dir, "pod-state"), "--metrics-address", addr, "--log-level", "warn")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { stopProcess(cmd.Process.Pid, exited, 5*time.Second) })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if code, _ := httpGet("http://" + addr + "/healthz"); code != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the metrics listener did not answer within 10s; the plugin said:\n%s", stderr.String())
		}
	}
	before, _ := rssKiB(t, cmd.Process.Pid)

	// Each connection sends one request, reads the answer and stays open.
	open := make([]net.Conn, 0, conns)
	t.Cleanup(func() {
		for _, c := range open {
			c.Close()
		}
	})
	for i := range conns {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		open = append(open, c)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		c.SetDeadline(time.Time{})
	}
	// The kubelet's probe, on a connection of its own, meanwhile.
	var took []time.Duration
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for range 20 {
		start := time.Now()
		resp, err := client.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatalf("/healthz with %d connections open: %v", conns, err)
		}
		resp.Body.Close()
		took = append(took, time.Since(start))
	}
	after, peak := rssKiB(t, cmd.Process.Pid)
	slices.Sort(took)
	t.Logf("%s: %d idle connections (GET %s): RSS %.1f MiB before, %.1f MiB after (peak %.1f MiB); /healthz p50 %s, max %s over %d probes",
		bin, conns, path, float64(before)/1024, float64(after)/1024, float64(peak)/1024, took[len(took)/2].Round(time.Microsecond), took[len(took)-1].Round(time.Microsecond), len(took))
	if peak > 32*1024 {
		t.Errorf("peak RSS %.1f MiB with %d idle connections, want under 32 MiB", float64(peak)/1024, conns)
	}
	if took[len(took)-1] > time.Second {
		t.Errorf("/healthz took %s with %d idle connections, want under 1s", took[len(took)-1], conns)
	}
}
