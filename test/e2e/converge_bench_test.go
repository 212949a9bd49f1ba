// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestBenchConvergeCreatePath (NRI_SYSCTL_BENCH=1, make
// bench-converge): with NRI_SYSCTL_BENCH_RUNNING (default 200) pods
// running, the time from a reload to the last of them converged, and pod
// create+start while they converge against idle, in alternating blocks of
// one run (idle-busy, busy-idle, ...; an idle block after a busy one, and
// the first, start once a pass the plugin may have asked for is over).
// Values are read inside a sample of the running pods.
//
// NRI_SYSCTL_BENCH_RUNNING_PODS=keep is the control: the same reloads,
// with the plugin's --running-pods keep, so that what the busy blocks
// cost without any convergence (the harness's reloads and scrapes, the
// plugin's checks of each config) is measured the same way. A reload
// then waits for the plugin's reload counter, and the running pods must
// still hold the first config's values. NRI_SYSCTL_BENCH_RELOAD_EVERY (a
// duration; 0, the default: back to back) spaces the busy blocks'
// reloads, so that the control reloads as often as a converging run.
// NRI_SYSCTL_BENCH_STATE=tmpfs keeps the plugin's pod state on a tmpfs
// (/dev/shm), as /run is on a node, instead of the run's directory.
// NRI_SYSCTL_BENCH_BLOCKS (even, default 10) and NRI_SYSCTL_BENCH_PODS
// (default 20) size the timed part: a ratio known to about +/-0.02 needs
// some 1,200 pods a side here (docs/benchmarks.md).
func TestBenchConvergeCreatePath(t *testing.T) {
	skipUnlessBench(t)
	c := getCluster(t)
	running := envInt(t, "NRI_SYSCTL_BENCH_RUNNING", 200)
	keep := os.Getenv("NRI_SYSCTL_BENCH_RUNNING_PODS") == "keep"
	var reloadEvery time.Duration
	if v := os.Getenv("NRI_SYSCTL_BENCH_RELOAD_EVERY"); v != "" {
		var err error
		if reloadEvery, err = time.ParseDuration(v); err != nil {
			t.Fatalf("NRI_SYSCTL_BENCH_RELOAD_EVERY=%q: %v", v, err)
		}
	}
	blocks, perBlock := envInt(t, "NRI_SYSCTL_BENCH_BLOCKS", 10), envInt(t, "NRI_SYSCTL_BENCH_PODS", 20)
	if blocks%2 != 0 {
		t.Fatalf("NRI_SYSCTL_BENCH_BLOCKS=%d: want an even number, as many idle blocks as busy ones", blocks)
	}
	configs := [2]map[string]string{
		{"net.ipv4.tcp_keepalive_time": "600", "net.ipv4.tcp_keepalive_intvl": "60", "kernel.msgmax": "16384"},
		{"net.ipv4.tcp_keepalive_time": "650", "net.ipv4.tcp_keepalive_intvl": "61", "kernel.msgmax": "16000"},
	}
	keys := sortedKeys(configs[0])
	addr := freeAddress(t)
	args := []string{"--metrics-address", addr, "--log-level", "info"}
	if keep {
		args = append(args, "--running-pods", "keep")
	}
	if os.Getenv("NRI_SYSCTL_BENCH_STATE") == "tmpfs" {
		dir, err := os.MkdirTemp("/dev/shm", "nri-sysctl-bench-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		args = append(args, "--pod-state-dir", dir+"/pods")
	}
	p := startPlugin(t, defaultsYAML(configs[0]), args...)
	cl := newCRIClient(t, c)
	var pods []*benchPod
	t.Cleanup(func() {
		for _, pod := range pods {
			_ = cl.removePod(pod, &podTiming{})
		}
	})
	for i := range running {
		pod, _, err := cl.startPod(c, fmt.Sprintf("running-%d", i))
		if pod != nil {
			pods = append(pods, pod)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// reload puts configs[i%2] in force and waits until every running pod
	// has its keys written (the counter; keep: until the reload is done),
	// returning how long that took.
	// reloaded and busyWith name, in the log, what a reload waits for and
	// what the busy blocks do.
	counter, perReload := `nri_sysctl_converge_keys_total{result="written"}`, float64(len(pods)*len(keys))
	reloaded, busyWith := fmt.Sprintf("the last of %d running pods converged", len(pods)), fmt.Sprintf("%d running pods converge", len(pods))
	if keep {
		counter, perReload = `nri_sysctl_config_reloads_total{result="success"}`, 1
		reloaded, busyWith = "its end, running pods kept (control)", "the plugin reloads (control, no convergence)"
	}
	reloads := 0
	reload := func() time.Duration {
		before := scrape(t, addr)[counter]
		reloads++
		rewriteConfig(t, p.configPath, defaultsYAML(configs[reloads%2]))
		start := time.Now()
		sighup(t, p)
		want := before + perReload
		for time.Since(start) < time.Minute {
			if scrape(t, addr)[counter] >= want {
				return time.Since(start)
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("%d running pods: %s = %v a minute after the reload, want %v", len(pods), counter, scrape(t, addr)[counter], want)
		return 0
	}
	var took []time.Duration
	cpuBefore := cpuTimeOf(p.cmd.Process.Pid)
	for range 5 {
		took = append(took, reload())
	}
	// The plugin's CPU over the reloads, per pod and pass: what the pace
	// (convergeShare) rests twice over, so what sets the reload's time.
	cpuPerPod := (cpuTimeOf(p.cmd.Process.Pid) - cpuBefore) / time.Duration(len(took)*len(pods))
	for _, pod := range []*benchPod{pods[0], pods[len(pods)/2], pods[len(pods)-1]} {
		got, err := cl.readSysctls(pod.ctrID, keys)
		if err != nil {
			t.Fatal(err)
		}
		if keep {
			wantSysctls(t, "running pod after the reloads, kept", got, configs[0])
			continue
		}
		wantSysctls(t, "running pod after the reloads", got, configs[reloads%2])
	}
	conv := distOf(took)
	t.Logf("reload to %s: p50 %s ms, min %s, max %s (%d reloads, %d keys each); the plugin's CPU time per pod and pass %s ms", reloaded, ms(conv.P50), ms(conv.Min), ms(conv.Max), len(took), len(keys), ms(cpuPerPod))

	// Pods created while the running pods converge, against idle, in
	// alternating blocks. Idle blocks scrape /metrics as often as reload
	// waits on it, so that the harness's own load is the same in both and
	// the ratio is the convergence's.
	var idle, busy benchSide
	const blockHead = 2
	// busyTook: each pass's reload to the last pod while pods are created
	// (the reloads above are made on a node creating none). Only the
	// block's goroutine appends, and it has ended before it is read.
	var busyTook []time.Duration
	// blockP50s: each block's p50 in its order, printed so that a drift of
	// the machine over the run shows.
	var blockP50s []string
	for b := range blocks {
		converging := busyBlock(b)
		side, sideName := &idle, "idle"
		if converging {
			side, sideName = &busy, "busy"
		}
		if !converging && (b == 0 || busyBlock(b-1)) {
			// A pass may have asked for another specLanding (30 s,
			// plugin/converge.go) after it, for a pod whose container
			// was decided under the older config: let that pass run
			// before the idle block, so that idle is idle.
			time.Sleep(idleSettle)
		}
		stop, done := make(chan struct{}), make(chan struct{})
		blockStart, blockCPU := time.Now(), cpuTimeOf(p.cmd.Process.Pid)
		passesBefore := len(busyTook)
		go func() {
			defer close(done)
			var lastReload time.Time
			for {
				select {
				case <-stop:
					return
				default:
				}
				if !converging || time.Since(lastReload) < reloadEvery {
					scrape(t, addr)
					time.Sleep(50 * time.Millisecond)
					continue
				}
				lastReload = time.Now()
				busyTook = append(busyTook, reload())
			}
		}()
		first := len(side.all) // this block's pods are side.all[first:]
		for i := range perBlock {
			pod, tm, err := cl.startPod(c, fmt.Sprintf("timed-%d-%d", b, i))
			if err != nil {
				t.Fatal(err)
			}
			side.all = append(side.all, tm.total())
			if i >= blockHead {
				side.rest = append(side.rest, tm.total())
			}
			if err := cl.removePod(pod, &podTiming{}); err != nil {
				t.Fatal(err)
			}
		}
		cpu, wall := cpuTimeOf(p.cmd.Process.Pid)-blockCPU, time.Since(blockStart)
		side.cpu += cpu
		side.wall += wall
		blockP50s = append(blockP50s, fmt.Sprintf("%s %s (plugin CPU %.1f ms/s)", sideName, ms(distOf(side.all[first:]).P50), perSecond(cpu, wall)))
		close(stop)
		<-done
		if converging && len(busyTook) == passesBefore {
			t.Fatalf("block %d: no convergence pass finished while its pods were created", b)
		}
	}
	t.Logf("each block's create+start p50, in order (ms): %s", strings.Join(blockP50s, ", "))
	di, db := distOf(idle.all), distOf(busy.all)
	t.Logf("pod create+start, idle: p50 %s ms, p90 %s ms (%d pods)", ms(di.P50), ms(di.P90), di.N)
	t.Logf("pod create+start, while %s: p50 %s ms, p90 %s ms (%d pods, %d reloads)", busyWith, ms(db.P50), ms(db.P90), db.N, len(busyTook))
	t.Logf("ratio busy/idle: p50 %s, p90 %s", ratio(db.P50, di.P50), ratio(db.P90, di.P90))
	t.Logf("the plugin's CPU while pods are created: idle blocks %.1f ms a second, busy blocks %.1f ms a second", perSecond(idle.cpu, idle.wall), perSecond(busy.cpu, busy.wall))
	bt := distOf(busyTook)
	t.Logf("reload to %s while pods are created: p50 %s ms, min %s, max %s (%d reloads)", reloaded, ms(bt.P50), ms(bt.Min), ms(bt.Max), bt.N)
	lo50, hi50 := bootstrapRatio(busy.all, idle.all, 50, 50)
	lo90, hi90 := bootstrapRatio(busy.all, idle.all, 90, 50)
	t.Logf("ratio by chance alone (bootstrap, 5th-95th percentile): p50 %.3f-%.3f, p90 %.3f-%.3f", lo50, hi50, lo90, hi90)
	if dri, drb := distOf(idle.rest), distOf(busy.rest); dri.N > 0 && drb.N > 0 {
		lo50, hi50 = bootstrapRatio(busy.rest, idle.rest, 50, 50)
		lo90, hi90 = bootstrapRatio(busy.rest, idle.rest, 90, 50)
		t.Logf("without each block's first %d pods: ratio p50 %s, p90 %s (%d and %d pods; by chance alone p50 %.3f-%.3f, p90 %.3f-%.3f)", blockHead, ratio(drb.P50, dri.P50), ratio(drb.P90, dri.P90), drb.N, dri.N, lo50, hi50, lo90, hi90)
	}
}

// idleSettle: before an idle block that follows a busy one (and before the
// first), the plugin's specLanding (30 s) and a pass at full pace over the
// running pods.
const idleSettle = 40 * time.Second

// busyBlock says whether block b of TestBenchConvergeCreatePath converges.
// The pairs alternate their order (idle then busy, busy then idle), so
// that a steady drift of the machine over the run, faster or slower,
// falls on both sides alike.
func busyBlock(b int) bool {
	return (b%2 == 1) != ((b/2)%2 == 1)
}

// benchSide is one side of TestBenchConvergeCreatePath's blocks, idle or
// busy: each pod's create+start (all), the same without each block's first
// pods (rest: they start beside a busy block's first reload and its
// checks, a throw-away namespace set and the user namespace helper), and
// the plugin's CPU time over the blocks' wall time (what it costs the
// machine while pods are created, waits included).
type benchSide struct {
	all, rest []time.Duration
	cpu, wall time.Duration
}

// perSecond is used over wall, in milliseconds a second.
func perSecond(used, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return float64(used.Milliseconds()) / wall.Seconds()
}

// TestBusyBlockOrder: each pair of blocks has one busy and one idle block,
// and over whole rounds of four a steady drift (a block's index standing
// for its time) weighs on both sides alike; plain alternation leaves the
// busy side half a block later on average.
func TestBusyBlockOrder(t *testing.T) {
	for blocks := 4; blocks <= 24; blocks += 4 {
		var idleSum, busySum int
		for b := range blocks {
			if b%2 == 1 && busyBlock(b) == busyBlock(b-1) {
				t.Fatalf("blocks %d and %d: both busy or both idle", b-1, b)
			}
			if busyBlock(b) {
				busySum += b
			} else {
				idleSum += b
			}
		}
		if idleSum != busySum {
			t.Errorf("%d blocks: the busy blocks' indices add up to %d, the idle ones' to %d; want them equal", blocks, busySum, idleSum)
		}
	}
}
