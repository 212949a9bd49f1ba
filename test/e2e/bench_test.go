// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

// Benchmarks of the container-creation path against the real containerd of
// this harness (docs/benchmarks.md). They are not tests: nothing
// here passes or fails on a timing. They fail only when the plugin did not
// do its job (a pod without its defaults, a per-pod cache that is not empty
// once every pod is gone) or when no report could be written.
//
// They run only when NRI_SYSCTL_BENCH is set (make bench, bench-smoke,
// bench-churn), never under make e2e.
//
// CRI calls are made with a CRI gRPC client over containerd's socket and
// timed around the call itself: a crictl process per call would add tens of
// milliseconds of fork, exec and dial to every sample, the same to every
// configuration, and push every ratio towards 1.
//
// Environment:
//
//	NRI_SYSCTL_BENCH              set to run the benchmarks at all
//	NRI_SYSCTL_BENCH_PODS         timed pods per configuration (default 100)
//	NRI_SYSCTL_BENCH_ROUND        pods per configuration per round (default 10)
//	NRI_SYSCTL_BENCH_CHURN_PODS   pods created and removed by the churn run (default 2000)
//	NRI_SYSCTL_BENCH_CHURN_WORKERS  pods in flight at once during churn (default 2)
//	NRI_SYSCTL_BENCH_OUT          directory for the reports (default <repo>/bin/bench)

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const benchNamespace = "bench"

// benchDefaults: 16 node defaults, each different from the kernel's value in
// a fresh pod (checked on every pod of the configurations without plugin).
var benchDefaults = map[string]string{
	"net.ipv4.tcp_keepalive_time":         "600",
	"net.ipv4.tcp_keepalive_intvl":        "15",
	"net.ipv4.tcp_keepalive_probes":       "5",
	"net.core.somaxconn":                  "1111",
	"net.ipv4.ip_unprivileged_port_start": "2000",
	"net.ipv4.tcp_fin_timeout":            "30",
	"net.ipv4.tcp_syn_retries":            "4",
	"net.ipv4.tcp_synack_retries":         "3",
	"net.ipv4.tcp_tw_reuse":               "1",
	"net.ipv4.tcp_slow_start_after_idle":  "0",
	"net.ipv4.tcp_mtu_probing":            "1",
	"net.ipv4.tcp_fastopen":               "3",
	"net.ipv4.tcp_retries2":               "8",
	"kernel.msgmax":                       "16384",
	"kernel.msgmnb":                       "32768",
	"kernel.shmmni":                       "8192",
}

// benchRules: a few rules; the first matches the benchmark's pods, so rule
// matching and overriding are on the measured path.
const benchRules = `rules:
  - name: web-backlog
    match: {namespaces: ["bench*"], labels: {tier: web}}
    sysctls: {net.core.somaxconn: "2222"}
  - name: batch
    match: {namespaces: ["batch-*"]}
    sysctls: {net.ipv4.tcp_fin_timeout: "20"}
  - name: sandboxed
    match: {runtimeHandlers: ["runsc*", "kata*"]}
    sysctls: {net.ipv4.tcp_keepalive_time: "300"}
exclude:
  namespaces: [kube-system]
  labels: {nri-sysctl: "off"}
`

// benchLabels are the labels of every benchmark pod.
var benchLabels = map[string]string{"tier": "web", "app": "bench"}

// benchWant is what a benchmark pod must see with nri-sysctl.
func benchWant() map[string]string {
	return merged(benchDefaults, map[string]string{"net.core.somaxconn": "2222"})
}

func benchConfigYAML() string { return defaultsYAML(benchDefaults) + benchRules }

func skipUnlessBench(t *testing.T) {
	t.Helper()
	if os.Getenv("NRI_SYSCTL_BENCH") == "" {
		t.Skip("benchmark: set NRI_SYSCTL_BENCH=1 (make bench, bench-smoke, bench-churn)")
	}
}

func envInt(t *testing.T, key string, def int) int {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", key, v)
	}
	return n
}

// ---- CRI client ----

type criClient struct {
	conn *grpc.ClientConn
	rt   runtimeapi.RuntimeServiceClient
}

func newCRIClient(t *testing.T, c *cluster) *criClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+c.grpcSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("CRI client: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	cl := &criClient{conn: conn, rt: runtimeapi.NewRuntimeServiceClient(conn)}
	// Dial now, so that no sample pays for it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.rt.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatalf("CRI Version: %v", err)
	}
	return cl
}

// podTiming is one pod's CRI calls. run+create+start is the measured path;
// stop and remove are reported for information.
type podTiming struct {
	Run, Create, Start, Stop, Remove time.Duration
}

func (p podTiming) total() time.Duration { return p.Run + p.Create + p.Start }

type benchPod struct {
	podID, ctrID string
	cfg          *runtimeapi.PodSandboxConfig
}

// startPod runs a pod sandbox with one container (sleep) and starts it,
// timing each CRI call.
func (cl *criClient) startPod(c *cluster, name string) (*benchPod, podTiming, error) {
	var tm podTiming
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	uid := randomUID()
	logDir := filepath.Join(c.tmp, "pods", benchNamespace+"_"+name+"_"+uid)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, tm, err
	}
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: benchNamespace, Uid: uid},
		Hostname:     dnsLabel(name),
		LogDirectory: logDir,
		Labels:       benchLabels,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{
					Network: runtimeapi.NamespaceMode_POD,
					Pid:     runtimeapi.NamespaceMode_CONTAINER,
					Ipc:     runtimeapi.NamespaceMode_POD,
				},
			},
		},
	}
	t0 := time.Now()
	runResp, err := cl.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	tm.Run = time.Since(t0)
	if err != nil {
		return nil, tm, fmt.Errorf("RunPodSandbox %s: %w", name, err)
	}
	p := &benchPod{podID: runResp.GetPodSandboxId(), cfg: cfg}
	ctrCfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Image:    &runtimeapi.ImageSpec{Image: busyboxImage},
		Command:  []string{"sleep", "3600"},
		LogPath:  "app.log",
		Linux:    &runtimeapi.LinuxContainerConfig{},
	}
	t0 = time.Now()
	createResp, err := cl.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: p.podID, Config: ctrCfg, SandboxConfig: cfg})
	tm.Create = time.Since(t0)
	if err != nil {
		return p, tm, fmt.Errorf("CreateContainer in %s: %w", name, err)
	}
	p.ctrID = createResp.GetContainerId()
	t0 = time.Now()
	_, err = cl.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: p.ctrID})
	tm.Start = time.Since(t0)
	if err != nil {
		return p, tm, fmt.Errorf("StartContainer in %s: %w", name, err)
	}
	return p, tm, nil
}

// removePod stops and removes a pod, timing both calls.
func (cl *criClient) removePod(p *benchPod, tm *podTiming) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	_, err := cl.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.podID})
	tm.Stop = time.Since(t0)
	if err != nil {
		return fmt.Errorf("StopPodSandbox %s: %w", p.podID, err)
	}
	t0 = time.Now()
	_, err = cl.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.podID})
	tm.Remove = time.Since(t0)
	if err != nil {
		return fmt.Errorf("RemovePodSandbox %s: %w", p.podID, err)
	}
	return nil
}

// readSysctls reads keys inside a running container with one CRI ExecSync.
func (cl *criClient) readSysctls(ctrID string, keys []string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := append([]string{"sh", "-c", sysctlScript, "sh"}, keys...)
	resp, err := cl.rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: ctrID, Cmd: cmd, Timeout: 20})
	if err != nil {
		return nil, fmt.Errorf("ExecSync in %s: %w", ctrID, err)
	}
	if resp.GetExitCode() != 0 {
		return nil, fmt.Errorf("ExecSync in %s: exit %d: %s", ctrID, resp.GetExitCode(), resp.GetStderr())
	}
	vals := parseKeyValues(string(resp.GetStdout()))
	for _, k := range keys {
		if _, ok := vals[k]; !ok {
			return nil, fmt.Errorf("no value for %s in %q", k, resp.GetStdout())
		}
	}
	return vals, nil
}

// ---- plugin processes ----

// benchPlugin is a plugin process started for a benchmark. Its stderr is
// read as it is written, so that the moment it registers with NRI is known
// to the millisecond (logrus stamps only whole seconds).
type benchPlugin struct {
	*pluginProc
	name       string
	startup    time.Duration // exec to "registered with NRI"
	mode       string
	ready      chan struct{}
	cacheLines atomic.Int64 // `msg="pod records" pods=N` lines seen
	cacheLast  atomic.Int64 // N of the last one
}

var (
	cacheLineRE = regexp.MustCompile(`msg="pod records" pods=(\d+)`)
	modeLineRE  = regexp.MustCompile(`msg="registered with NRI" mode=(\w+)`)
)

func startBenchPlugin(t *testing.T, c *cluster, name, bin string, args ...string) *benchPlugin {
	t.Helper()
	bp := &benchPlugin{
		pluginProc: &pluginProc{c: c, logPath: filepath.Join(c.logDir, c.nextID("bench-"+name)+".log"), exited: make(chan struct{})},
		name:       name,
		ready:      make(chan struct{}),
	}
	bp.cacheLast.Store(-1)
	logFile, err := os.Create(bp.logPath)
	if err != nil {
		t.Fatal(err)
	}
	bp.cmd = exec.Command(bin, args...)
	bp.cmd.Stdout = logFile
	bp.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := bp.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := bp.cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		registered := false
		for sc.Scan() {
			line := sc.Text()
			if !registered && strings.Contains(line, readyLine) {
				bp.startup = time.Since(t0)
				if m := modeLineRE.FindStringSubmatch(line); m != nil {
					bp.mode = m[1]
				}
				registered = true
				close(bp.ready)
			}
			if m := cacheLineRE.FindStringSubmatch(line); m != nil {
				n, _ := strconv.ParseInt(m[1], 10, 64)
				bp.cacheLast.Store(n)
				bp.cacheLines.Add(1)
			}
			fmt.Fprintln(logFile, line)
		}
		bp.waitErr = bp.cmd.Wait()
		logFile.Close()
		close(bp.exited)
	}()
	c.mu.Lock()
	c.plugins[bp.pluginProc] = true
	c.mu.Unlock()
	t.Cleanup(bp.stop)
	select {
	case <-bp.ready:
	case <-bp.exited:
		t.Fatalf("%s exited before registering with NRI: %v\n%s", name, bp.waitErr, tail(bp.logPath, 40))
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not register with NRI within 30s\n%s", name, tail(bp.logPath, 40))
	}
	return bp
}

// memory returns VmHWM (peak resident set) and VmRSS in KiB.
func (bp *benchPlugin) memory() (hwm, rss int64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", bp.cmd.Process.Pid))
	if err != nil {
		return -1, -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmHWM:":
			hwm = n
		case "VmRSS:":
			rss = n
		}
	}
	return hwm, rss
}

// stopAndCheck stops a plugin and reports whether it had crashed meanwhile.
func (bp *benchPlugin) stopAndCheck(t *testing.T) {
	t.Helper()
	select {
	case <-bp.exited:
		t.Fatalf("%s exited during the benchmark: %v\n%s", bp.name, bp.waitErr, tail(bp.logPath, 40))
	default:
	}
	bp.stop()
}

// buildNoopPlugin builds test/noop-plugin into the cluster's temp dir.
func buildNoopPlugin(t *testing.T, c *cluster) string {
	t.Helper()
	out := filepath.Join(c.workDir, "noop-plugin")
	if _, err := os.Stat(out); err == nil {
		return out
	}
	cmd := exec.Command("go", "build", "-o", out, "./test/noop-plugin")
	cmd.Dir = c.repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./test/noop-plugin: %v\n%s", err, b)
	}
	return out
}

// ---- statistics ----

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

type dist struct {
	N             int
	P50, P90, P99 time.Duration
	Min, Max      time.Duration
}

func distOf(samples []time.Duration) dist {
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return dist{}
	}
	return dist{N: len(s), P50: percentile(s, 50), P90: percentile(s, 90), P99: percentile(s, 99), Min: s[0], Max: s[len(s)-1]}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

func ratio(a, b time.Duration) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", float64(a)/float64(b))
}

// ---- the create-path benchmark ----

// stages of a pod, in report order.
var benchStages = []string{"RunPodSandbox", "CreateContainer", "StartContainer", "pod (run+create+start)", "StopPodSandbox", "RemovePodSandbox"}

func (p podTiming) stage(name string) time.Duration {
	switch name {
	case "RunPodSandbox":
		return p.Run
	case "CreateContainer":
		return p.Create
	case "StartContainer":
		return p.Start
	case "StopPodSandbox":
		return p.Stop
	case "RemovePodSandbox":
		return p.Remove
	}
	return p.total()
}

// benchConfig is one configuration under test.
type benchConfig struct {
	Name string
	// start starts its plugin, or is nil for "no plugin".
	start func(t *testing.T) *benchPlugin
	// want is what every pod must see; nil means none of benchWant.
	want map[string]string
	// metricsAddr is where its plugin serves /metrics, or "" for none.
	metricsAddr string

	// Scrapes counts the GET /metrics answered while its pods ran.
	Scrapes int

	Pods     []podTiming
	Startups []time.Duration
	PeakKiB  []int64
	Modes    map[string]bool
}

type benchReport struct {
	Containerd string
	Mode       string
	Started    time.Time
	Duration   time.Duration
	PodsPer    int
	RoundSize  int
	Host       string
	Configs    []*benchConfig
	Fetch      dist
	FetchCold  time.Duration
	FetchSrc   string
}

// TestBenchCreatePath times RunPodSandbox, CreateContainer and
// StartContainer with no plugin, with the no-op NRI plugin, with
// nri-sysctl, and with nri-sysctl serving metrics (scraped every second),
// interleaved round by round so that drift on this machine hits all four
// alike.
func TestBenchCreatePath(t *testing.T) {
	skipUnlessBench(t)
	c := getCluster(t)
	bin := pluginBinary(t)
	noopBin := buildNoopPlugin(t, c)
	cl := newCRIClient(t, c)
	pods := envInt(t, "NRI_SYSCTL_BENCH_PODS", 100)
	roundSize := min(envInt(t, "NRI_SYSCTL_BENCH_ROUND", 10), pods)
	cfgPath := writePluginConfig(t, benchConfigYAML())
	want := benchWant()
	keys := sortedKeys(want)
	for _, k := range keys {
		if c.kernel[k] == want[k] {
			t.Fatalf("%s is %s already without the plugin: the check would prove nothing", k, want[k])
		}
	}

	configs := []*benchConfig{
		{Name: "none"},
		{Name: "noop", start: func(t *testing.T) *benchPlugin {
			return startBenchPlugin(t, c, "noop", noopBin, "--nri-socket", c.nriSock, "--plugin-idx", "90")
		}},
		{Name: "nri-sysctl", want: want, start: func(t *testing.T) *benchPlugin {
			// The production log level: debug logs every decision.
			return startBenchPlugin(t, c, "nri-sysctl", bin,
				"--config", cfgPath, "--nri-socket", c.nriSock, "--pod-state-dir", filepath.Join(c.tmp, "pod-state"),
				"--containerd-address", c.grpcSock, "--containerd-namespace", k8sNamespace,
				"--log-level", "info")
		}},
	}
	metricsOn := &benchConfig{Name: "nri-sysctl+metrics", want: want, metricsAddr: freeAddress(t)}
	metricsOn.start = func(t *testing.T) *benchPlugin {
		return startBenchPlugin(t, c, metricsOn.Name, bin,
			"--config", cfgPath, "--nri-socket", c.nriSock, "--pod-state-dir", filepath.Join(c.tmp, "pod-state"),
			"--containerd-address", c.grpcSock, "--containerd-namespace", k8sNamespace,
			"--log-level", "info", "--metrics-address", metricsOn.metricsAddr)
	}
	configs = append(configs, metricsOn)
	for _, cfg := range configs {
		cfg.Modes = map[string]bool{}
	}
	rep := &benchReport{Containerd: c.version, Started: time.Now(), PodsPer: pods, RoundSize: roundSize, Host: hostSummary(), Configs: configs}

	// One pod: timed unless warm-up, verified always, removed always.
	seq := 0
	onePod := func(t *testing.T, cfg *benchConfig, timed bool) {
		seq++
		name := fmt.Sprintf("%s-%d", dnsLabel(cfg.Name), seq)
		p, tm, err := cl.startPod(c, name)
		if err != nil {
			if p != nil {
				_ = cl.removePod(p, &tm)
			}
			t.Fatalf("config %s: %v", cfg.Name, err)
		}
		got, err := cl.readSysctls(p.ctrID, keys)
		if err != nil {
			_ = cl.removePod(p, &tm)
			t.Fatalf("config %s: %v", cfg.Name, err)
		}
		verifyBenchPod(t, cfg, name, got, want)
		if err := cl.removePod(p, &tm); err != nil {
			t.Fatalf("config %s: %v", cfg.Name, err)
		}
		if timed {
			cfg.Pods = append(cfg.Pods, tm)
		}
	}

	rounds := (pods + roundSize - 1) / roundSize
	logf("bench: containerd %s, %d pod(s) per configuration in %d round(s) of %d", c.version, pods, rounds, roundSize)
	for r := 0; r < rounds; r++ {
		n := min(roundSize, pods-r*roundSize)
		for i := range configs {
			cfg := configs[(i+r)%len(configs)]
			var bp *benchPlugin
			if cfg.start != nil {
				bp = cfg.start(t)
				cfg.Startups = append(cfg.Startups, bp.startup)
				if bp.mode != "" {
					cfg.Modes[bp.mode] = true
				}
			}
			stopScraping := startScraper(t, cfg)
			onePod(t, cfg, false) // warm-up: the plugin's first lookups, caches
			for j := 0; j < n; j++ {
				onePod(t, cfg, true)
			}
			stopScraping()
			if cfg.metricsAddr != "" {
				checkBenchMetrics(t, cfg, n+1)
			}
			if bp != nil {
				hwm, _ := bp.memory()
				cfg.PeakKiB = append(cfg.PeakKiB, hwm)
				bp.stopAndCheck(t)
			}
		}
		logf("bench: round %d/%d done", r+1, rounds)
	}
	if metricsOn.Scrapes == 0 {
		t.Fatalf("config %s: /metrics answered no scrape while its pods ran", metricsOn.Name)
	}
	for m := range configs[2].Modes {
		rep.Mode = m
	}

	// The real lookup the plugin makes on a cache miss, against this
	// containerd: podsysctl's gRPC Fetch of a live pod.
	rep.Fetch, rep.FetchCold, rep.FetchSrc = benchFetch(t, c, cl)
	rep.Duration = time.Since(rep.Started)

	text := rep.markdown()
	t.Log("\n" + text)
	writeBenchReport(t, "bench-"+c.version, text, rep)
}

// startScraper scrapes the configuration's /metrics every second while its
// pods run, as Prometheus would (its usual interval is 15-60 s), so that
// "metrics on" includes serving them. It returns the function that stops it.
func startScraper(t *testing.T, cfg *benchConfig) (stop func()) {
	if cfg.metricsAddr == "" {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan int)
	go func() {
		answered := 0
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				finished <- answered
				return
			case <-tick.C:
				if code, _ := httpGet("http://" + cfg.metricsAddr + "/metrics"); code == http.StatusOK {
					answered++
				}
			}
		}
	}()
	return func() {
		close(done)
		cfg.Scrapes += <-finished
	}
}

// checkBenchMetrics: a fresh plugin that decided pods containers counts
// exactly that many applied, and no other outcome.
func checkBenchMetrics(t *testing.T, cfg *benchConfig, pods int) {
	t.Helper()
	got := scrape(t, cfg.metricsAddr)
	for k, v := range got {
		if !strings.HasPrefix(k, "nri_sysctl_containers_total{") {
			continue
		}
		want := 0.0
		if k == `nri_sysctl_containers_total{outcome="applied"}` {
			want = float64(pods)
		}
		if v != want {
			t.Fatalf("config %s: %s = %v after %d pod(s), want %v", cfg.Name, k, v, pods, want)
		}
	}
	if got[`nri_sysctl_containers_total{outcome="applied"}`] != float64(pods) {
		t.Fatalf("config %s: no applied containers in /metrics after %d pod(s): %v", cfg.Name, pods, got)
	}
}

// verifyBenchPod: pods of nri-sysctl have every value, the others none.
func verifyBenchPod(t *testing.T, cfg *benchConfig, pod string, got, want map[string]string) {
	t.Helper()
	for _, k := range sortedKeys(want) {
		switch {
		case cfg.want != nil && got[k] != cfg.want[k]:
			t.Fatalf("config %s, pod %s: %s = %q, want %q", cfg.Name, pod, k, got[k], cfg.want[k])
		case cfg.want == nil && got[k] == want[k]:
			t.Fatalf("config %s, pod %s: %s = %q, nri-sysctl's value, without nri-sysctl", cfg.Name, pod, k, got[k])
		}
	}
}

// benchFetch times podsysctl's lookup of a pod against the running
// containerd: once cold (the plugin's first lookup dials), then warm.
func benchFetch(t *testing.T, c *cluster, cl *criClient) (warm dist, cold time.Duration, source string) {
	t.Helper()
	var live []*benchPod
	defer func() {
		for _, p := range live {
			var tm podTiming
			_ = cl.removePod(p, &tm)
		}
	}()
	for i := 0; i < 5; i++ {
		p, _, err := cl.startPod(c, fmt.Sprintf("fetch-%d", i))
		if p != nil {
			live = append(live, p)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	f, err := podsysctl.NewContainerd(c.grpcSock, k8sNamespace, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	t0 := time.Now()
	res, err := f.Fetch(ctx, live[0].podID)
	cold = time.Since(t0)
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	source = res.Source
	var samples []time.Duration
	for i := 0; i < 200; i++ {
		t0 := time.Now()
		if _, err := f.Fetch(ctx, live[i%len(live)].podID); err != nil {
			t.Fatalf("Fetch: %v", err)
		}
		samples = append(samples, time.Since(t0))
	}
	return distOf(samples), cold, source
}

func hostSummary() string {
	var mem string
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		mem = strings.TrimSpace(strings.TrimPrefix(strings.SplitN(string(data), "\n", 2)[0], "MemTotal:"))
	}
	var uts syscall.Utsname
	_ = syscall.Uname(&uts)
	rel := make([]byte, 0, len(uts.Release))
	for _, b := range uts.Release {
		if b == 0 {
			break
		}
		rel = append(rel, byte(b))
	}
	load, _ := os.ReadFile("/proc/loadavg")
	return fmt.Sprintf("%d CPU(s), MemTotal %s, kernel %s, %s, load average at start %s",
		runtime.NumCPU(), mem, rel, runtime.Version(), strings.Join(strings.Fields(string(load))[:3], " "))
}

func (r *benchReport) markdown() string {
	var b strings.Builder
	mode := r.Mode
	if mode == "" {
		mode = "?"
	}
	fmt.Fprintf(&b, "## containerd %s, nri-sysctl in %s mode\n\n", r.Containerd, mode)
	fmt.Fprintf(&b, "%s. %d timed pod(s) per configuration, rounds of %d, order rotated each round; %s in all.\n\n",
		r.Host, r.PodsPer, r.RoundSize, r.Duration.Round(time.Second))
	fmt.Fprintf(&b, "| CRI call | config | p50 ms | p90 ms | p99 ms | min ms | max ms |\n|---|---|---:|---:|---:|---:|---:|\n")
	for _, st := range benchStages {
		for _, cfg := range r.Configs {
			d := distOf(cfg.stageSamples(st))
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", st, cfg.Name, ms(d.P50), ms(d.P90), ms(d.P99), ms(d.Min), ms(d.Max))
		}
	}
	// a: no plugin, b: no-op plugin, c: nri-sysctl, d: nri-sysctl with metrics on.
	fmt.Fprintf(&b, "\nRatios (c: nri-sysctl, d: nri-sysctl with metrics on and scraped every second; over a: no plugin, b: the no-op plugin):\n\n")
	fmt.Fprintf(&b, "| CRI call | c/a p50 | c/a p99 | c/b p50 | c/b p99 | d/b p50 | d/b p99 | d/c p50 | d/c p99 |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, st := range benchStages[:4] {
		var d [4]dist
		for i := range d {
			d[i] = distOf(r.Configs[i].stageSamples(st))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", st,
			ratio(d[2].P50, d[0].P50), ratio(d[2].P99, d[0].P99), ratio(d[2].P50, d[1].P50), ratio(d[2].P99, d[1].P99),
			ratio(d[3].P50, d[1].P50), ratio(d[3].P99, d[1].P99), ratio(d[3].P50, d[2].P50), ratio(d[3].P99, d[2].P99))
	}
	fmt.Fprintf(&b, "\n/metrics answered %d scrape(s) during d's pods.\n", r.Configs[3].Scrapes)
	pod := benchStages[3]
	fmt.Fprintf(&b, "\nPod p50 ratios with their 95%% interval (bootstrap, %d resamples of each configuration's pods): whether a difference is measurable at all.\n\n| ratio | p50 | 95%% interval |\n|---|---:|---|\n", bootstrapResamples)
	for _, pair := range [][2]int{{2, 1}, {3, 1}, {3, 2}} {
		x, y := r.Configs[pair[0]].stageSamples(pod), r.Configs[pair[1]].stageSamples(pod)
		lo, hi := bootstrapRatio(x, y, 50, 25)
		fmt.Fprintf(&b, "| %s / %s | %s | %.3f-%.3f |\n", r.Configs[pair[0]].Name, r.Configs[pair[1]].Name, ratio(distOf(x).P50, distOf(y).P50), lo, hi)
	}
	fmt.Fprintf(&b, "\n| plugin | start-up to registered: median ms (min-max, n) | peak RSS (VmHWM) KiB: max over rounds |\n|---|---|---:|\n")
	for _, cfg := range r.Configs[1:] {
		d := distOf(cfg.Startups)
		var peak int64
		for _, k := range cfg.PeakKiB {
			peak = max(peak, k)
		}
		fmt.Fprintf(&b, "| %s | %s (%s-%s, %d) | %d |\n", cfg.Name, ms(d.P50), ms(d.Min), ms(d.Max), d.N, peak)
	}
	fmt.Fprintf(&b, "\nnri-sysctl's lookup of a pod's own sysctls in containerd (podsysctl.Containerd.Fetch, source %q): first call %s ms (dials), then p50 %s ms, p99 %s ms over %d calls.\n",
		r.FetchSrc, ms(r.FetchCold), ms(r.Fetch.P50), ms(r.Fetch.P99), r.Fetch.N)
	return b.String()
}

const bootstrapResamples = 2000

// bootstrapRatio is the interval of pth(x)/pth(y), the p-th percentile of
// each, over resamples with replacement of x and y that leaves tail
// per mille of the resampled ratios out at each end (25: the 95%
// interval): how far one run's ratio moves by chance alone. Samples taken
// close together are not independent, so it is a lower bound on that
// spread. Fixed seed: the same samples give the same interval.
func bootstrapRatio(x, y []time.Duration, p float64, tail int) (lo, hi float64) {
	if len(x) == 0 || len(y) == 0 {
		return 0, 0
	}
	rng := rand.New(rand.NewPCG(1, 2))
	resample := func(s []time.Duration, into []time.Duration) time.Duration {
		for i := range into {
			into[i] = s[rng.IntN(len(s))]
		}
		slices.Sort(into)
		return percentile(into, p)
	}
	bufX, bufY := make([]time.Duration, len(x)), make([]time.Duration, len(y))
	ratios := make([]float64, bootstrapResamples)
	for i := range ratios {
		ratios[i] = float64(resample(x, bufX)) / float64(resample(y, bufY))
	}
	slices.Sort(ratios)
	return ratios[bootstrapResamples*tail/1000], ratios[bootstrapResamples*(1000-tail)/1000-1]
}

func (cfg *benchConfig) stageSamples(stage string) []time.Duration {
	out := make([]time.Duration, len(cfg.Pods))
	for i, p := range cfg.Pods {
		out[i] = p.stage(stage)
	}
	return out
}

// writeBenchReport writes the report as markdown and JSON and checks that
// it is there.
func writeBenchReport(t *testing.T, base, text string, v any) {
	t.Helper()
	dir := os.Getenv("NRI_SYSCTL_BENCH_OUT")
	if dir == "" {
		dir = filepath.Join(getCluster(t).repoRoot, "bin", "bench")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stamp := time.Now().Format("20060102-150405")
	md := filepath.Join(dir, base+"-"+stamp+".md")
	if err := os.WriteFile(md, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(strings.TrimSuffix(md, ".md")+".json", data, 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(md); err != nil || fi.Size() == 0 {
		t.Fatalf("report %s was not written: %v", md, err)
	}
	logf("bench: report written to %s", md)
}

// ---- churn ----

type churnSample struct {
	Pods       int
	HWMKiB     int64
	RSSKiB     int64
	CacheAfter int64
}

// TestBenchChurn creates and removes many pods under one nri-sysctl
// process and records its memory along the way. The plugin logs the size
// of its per-pod cache on every RemovePodSandbox (at debug level); once
// every pod is gone it must be empty.
func TestBenchChurn(t *testing.T) {
	skipUnlessBench(t)
	c := getCluster(t)
	bin := pluginBinary(t)
	cl := newCRIClient(t, c)
	total := envInt(t, "NRI_SYSCTL_BENCH_CHURN_PODS", 2000)
	workers := envInt(t, "NRI_SYSCTL_BENCH_CHURN_WORKERS", 2)
	cfgPath := writePluginConfig(t, benchConfigYAML())
	want := benchWant()
	keys := sortedKeys(want)
	bp := startBenchPlugin(t, c, "nri-sysctl", bin,
		"--config", cfgPath, "--nri-socket", c.nriSock, "--pod-state-dir", filepath.Join(c.tmp, "pod-state"),
		"--containerd-address", c.grpcSock, "--containerd-namespace", k8sNamespace,
		"--log-level", "debug")
	hwm0, rss0 := bp.memory()
	start := time.Now()

	var (
		next    atomic.Int64
		done    atomic.Int64
		mu      sync.Mutex
		samples []churnSample
		errs    []error
		wg      sync.WaitGroup
	)
	sampleEvery := 100
	record := func(n int) {
		hwm, rss := bp.memory()
		mu.Lock()
		samples = append(samples, churnSample{Pods: n, HWMKiB: hwm, RSSKiB: rss, CacheAfter: -1})
		mu.Unlock()
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				if i > total {
					return
				}
				p, tm, err := cl.startPod(c, fmt.Sprintf("churn-%d", i))
				if err == nil && i%sampleEvery == 1 {
					// Spot check, not every pod: the create-path
					// benchmark checks each of its pods.
					var got map[string]string
					if got, err = cl.readSysctls(p.ctrID, keys); err == nil {
						for _, k := range keys {
							if got[k] != want[k] {
								err = fmt.Errorf("churn pod %d: %s = %q, want %q", i, k, got[k], want[k])
								break
							}
						}
					}
				}
				if p != nil {
					if rmErr := cl.removePod(p, &tm); err == nil {
						err = rmErr
					}
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					next.Store(int64(total)) // stop the others
					return
				}
				if d := int(done.Add(1)); d%sampleEvery == 0 || d == total {
					record(d)
					if d%500 == 0 {
						logf("churn: %d/%d pods, plugin VmRSS %d KiB", d, total, samples[len(samples)-1].RSSKiB)
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("churn stopped: %v", errors.Join(errs...))
	}
	elapsed := time.Since(start)

	// One last pod, alone: its RemovePodSandbox logs the final cache size,
	// whatever order concurrent removals logged theirs in.
	before := bp.cacheLines.Load()
	p, tm, err := cl.startPod(c, "churn-last")
	if p != nil {
		if rmErr := cl.removePod(p, &tm); err == nil {
			err = rmErr
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for bp.cacheLines.Load() == before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if bp.cacheLines.Load() == before {
		t.Fatalf("the plugin logged no %q line on the last RemovePodSandbox (is it logging at debug level?)\n%s", `msg="pod records"`, tail(bp.logPath, 20))
	}
	cacheEnd := bp.cacheLast.Load()
	hwmEnd, rssEnd := bp.memory()

	var b strings.Builder
	fmt.Fprintf(&b, "## churn: containerd %s, nri-sysctl in %s mode\n\n", c.version, bp.mode)
	fmt.Fprintf(&b, "%s. %d pods created and removed (%d at a time) in %s under one plugin process (log level debug).\n\n",
		hostSummary(), total+1, workers, elapsed.Round(time.Second))
	fmt.Fprintf(&b, "| pods so far | VmRSS KiB | VmHWM KiB |\n|---:|---:|---:|\n| 0 (registered) | %d | %d |\n", rss0, hwm0)
	sort.Slice(samples, func(i, j int) bool { return samples[i].Pods < samples[j].Pods })
	for _, s := range samples {
		if s.Pods == 100 || s.Pods%500 == 0 || s.Pods == total {
			fmt.Fprintf(&b, "| %d | %d | %d |\n", s.Pods, s.RSSKiB, s.HWMKiB)
		}
	}
	fmt.Fprintf(&b, "| %d (all removed) | %d | %d |\n", total+1, rssEnd, hwmEnd)
	fmt.Fprintf(&b, "\nAfter the last RemovePodSandbox the plugin holds %d pod record(s) (%d RemovePodSandbox events logged).\n", cacheEnd, bp.cacheLines.Load())
	text := b.String()
	t.Log("\n" + text)
	writeBenchReport(t, "churn-"+c.version, text, map[string]any{
		"containerd": c.version, "mode": bp.mode, "pods": total + 1, "workers": workers, "elapsed": elapsed.String(),
		"start": churnSample{HWMKiB: hwm0, RSSKiB: rss0}, "samples": samples,
		"end": churnSample{Pods: total + 1, HWMKiB: hwmEnd, RSSKiB: rssEnd, CacheAfter: cacheEnd},
	})
	if cacheEnd != 0 {
		t.Errorf("after every pod was removed the plugin still holds %d pod record(s), want 0", cacheEnd)
	}
	bp.stopAndCheck(t)
}

// TestBootstrapP50Ratio: the 95% interval of p50s holds 1 for two samples of one
// distribution, and excludes it when one is twice the other.
func TestBootstrapP50Ratio(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	sample := func(scale float64) []time.Duration {
		s := make([]time.Duration, 300)
		for i := range s {
			s[i] = time.Duration(scale * (100 + 20*rng.NormFloat64()) * float64(time.Millisecond))
		}
		return s
	}
	base, same, double := sample(1), sample(1), sample(2)
	if lo, hi := bootstrapRatio(same, base, 50, 25); lo > 1 || hi < 1 || hi-lo > 0.1 {
		t.Errorf("same distribution: interval %.3f-%.3f, want one around 1 and narrower than 0.1", lo, hi)
	}
	if lo, hi := bootstrapRatio(double, base, 50, 25); lo < 1.8 || hi > 2.2 {
		t.Errorf("twice the time: interval %.3f-%.3f, want one inside 1.8-2.2", lo, hi)
	}
}

// TestRatioInterval: the chance interval (5th-95th percentile) of a ratio is a point when
// neither side varies, and otherwise a band around the true ratio.
func TestRatioInterval(t *testing.T) {
	flat := func(d time.Duration, n int) []time.Duration { return slices.Repeat([]time.Duration{d}, n) }
	if lo, hi := bootstrapRatio(flat(110*time.Millisecond, 50), flat(100*time.Millisecond, 50), 90, 50); math.Abs(lo-1.1) > 1e-9 || math.Abs(hi-1.1) > 1e-9 {
		t.Errorf("constant samples: interval %.4f-%.4f, want 1.1-1.1", lo, hi)
	}
	var idle, busy []time.Duration
	for i := range 150 {
		d := time.Duration(100+i) * time.Millisecond
		idle, busy = append(idle, d), append(busy, d*11/10)
	}
	for _, p := range []float64{50, 90} {
		lo, hi := bootstrapRatio(busy, idle, p, 50)
		if lo >= 1.1 || hi <= 1.1 || hi-lo < 0.01 || lo < 0.9 || hi > 1.3 {
			t.Errorf("p%v of spread samples 10%% apart: interval %.4f-%.4f, want a band around 1.1", p, lo, hi)
		}
	}
	if lo, hi := bootstrapRatio(nil, flat(time.Millisecond, 3), 90, 50); lo != 0 || hi != 0 {
		t.Errorf("no samples: %v-%v, want 0-0", lo, hi)
	}
}
