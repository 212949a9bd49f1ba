// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/outcome"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/nri-sysctl/nri-sysctl/plugin/internal/trusteddir"
	"github.com/nri-sysctl/nri-sysctl/test/fixture"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
)

// newMeteredTestPlugin is newTestPlugin with metrics served on a free
// loopback port, as --metrics-address 127.0.0.1:0 would.
func newMeteredTestPlugin(t *testing.T, cfgText string, f *fakeFetcher) (*plugin, *metrics) {
	t.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	p := newPlugin(log, nil, "")
	holdAsTheSandboxSays(p)
	p.metricsListener.flag = "127.0.0.1:0"
	t.Cleanup(p.metricsListener.close)
	if _, err := p.Configure(context.Background(), cfgText, "containerd", "2.4.2"); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	p.useFetcher(f)
	m := p.meter.Load()
	if m == nil {
		t.Fatal("Configure did not start metrics with --metrics-address set")
	}
	return p, m
}

// counts reads every counter the handlers move, by metric and label.
func counts(m *metrics) map[string]float64 {
	out := map[string]float64{
		"applied":                testutil.ToFloat64(m.sysctlsApplied),
		"lookups":                testutil.ToFloat64(m.lookups),
		"lookup_failures":        testutil.ToFloat64(m.lookupFailures),
		"namespace_writes":       testutil.ToFloat64(m.namespaceWrites),
		"namespace_write_failed": testutil.ToFloat64(m.namespaceWriteFailures),
		"lacking":                float64(m.lacking.total()),
	}
	for o := range outcome.Outcome(outcome.Count) {
		out["containers/"+o.String()] = testutil.ToFloat64(m.containers[o])
	}
	for c := range policy.SkipCode(policy.NumSkipCodes) {
		if c.Profile() {
			continue // counted by profile, below
		}
		out["skipped/"+c.Label()] = testutil.ToFloat64(m.sysctlsSkipped[c])
	}
	for _, r := range policy.ProfileOutcomes {
		out["profiles/"+string(r)] = testutil.ToFloat64(m.profiles[r])
	}
	return out
}

// wantMoved checks that exactly the given counters moved since before, by
// exactly the given amounts.
func wantMoved(t *testing.T, what string, before, after map[string]float64, moved map[string]float64) {
	t.Helper()
	for name, b := range before {
		if got, want := after[name]-b, moved[name]; got != want {
			t.Errorf("%s: %s moved by %v, want %v", what, name, got, want)
		}
	}
}

func TestMetricsCountSpecModeDecisions(t *testing.T) {
	f := &fakeFetcher{}
	p, m := newMeteredTestPlugin(t, testConfig, f)
	existing := &api.Container{Name: "app", Linux: &api.LinuxContainer{Sysctl: map[string]string{"kernel.msgmax": "1"}}}
	excluded := testPod("ex", "network", "ipc")
	excluded.Namespace = "kube-system"
	tests := []struct {
		name  string
		pod   *api.PodSandbox
		ctr   *api.Container
		own   map[string]string
		err   error
		moved map[string]float64
	}{
		{"ordinary pod", testPod("a", "network", "ipc", "uts"), &api.Container{Name: "app"}, nil, nil,
			map[string]float64{"containers/applied": 1, "applied": 3, "lookups": 1}},
		{"second container of that pod: no lookup", testPod("a", "network", "ipc", "uts"), &api.Container{Name: "side"}, nil, nil,
			map[string]float64{"containers/applied": 1, "applied": 3}},
		{"hostNetwork", testPod("b", "ipc", "uts"), hostNetContainer(), nil, nil,
			map[string]float64{"containers/applied": 1, "applied": 1, "skipped/host_namespace": 2, "lookups": 1}},
		{"pod's own value", testPod("c", "network", "ipc"), &api.Container{Name: "app"}, map[string]string{"net.ipv4.tcp_keepalive_intvl": "33"}, nil,
			map[string]float64{"containers/applied": 1, "applied": 2, "skipped/pod_own": 1, "lookups": 1}},
		{"key set by a lower-index plugin", testPod("d", "network", "ipc"), existing, nil, nil,
			map[string]float64{"containers/applied": 1, "applied": 2, "skipped/existing": 1, "lookups": 1}},
		{"hostNetwork and hostIPC: nothing to apply", testPod("e", "uts"), &api.Container{Name: "app"}, nil, nil,
			map[string]float64{"containers/nothing_to_apply": 1, "skipped/host_namespace": 3, "lookups": 1}},
		{"excluded: not looked up", excluded, &api.Container{Name: "app"}, nil, nil,
			map[string]float64{"containers/excluded": 1}},
		{"lookup fails", testPod("f", "network", "ipc"), &api.Container{Name: "app"}, nil, errors.New("connection refused"),
			map[string]float64{"containers/lookup_failed": 1, "lookups": 1, "lookup_failures": 1}},
	}
	for _, tc := range tests {
		f.own, f.err = tc.own, tc.err
		before := counts(m)
		if _, _, err := p.CreateContainer(context.Background(), tc.pod, tc.ctr); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		wantMoved(t, tc.name, before, counts(m), tc.moved)
	}
	if n := testutil.CollectAndCount(m.lookupSeconds); n != 1 {
		t.Errorf("lookup duration histogram: %d series, want 1", n)
	}
	if got := histogramCount(t, m, "nri_sysctl_pod_lookup_duration_seconds"); got != 6 {
		t.Errorf("lookup duration observations = %d, want one per lookup (6)", got)
	}
}

// histogramCount reads a histogram's sample count from the registry.
func histogramCount(t *testing.T, m *metrics, name string) uint64 {
	t.Helper()
	families, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("no %s in the registry", name)
	return 0
}

func TestMetricsCountNamespaceWrites(t *testing.T) {
	p, m := newMeteredTestPlugin(t, testConfig+"mode: namespace\nonError: warn\n", &fakeFetcher{})
	fail := true
	p.writeNamespaces = func(_ podns.Target, list []sysctl.Sysctl) []podns.WriteError {
		if fail {
			return []podns.WriteError{{Key: "kernel.msgmax", Value: "16384", Err: errors.New("invalid argument")}}
		}
		return nil
	}
	pod := testPod("n", "network", "ipc", "uts")
	before := counts(m)
	if err := p.RunPodSandbox(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	// Three keys tried, one failed; no container yet.
	wantMoved(t, "RunPodSandbox with a failed write", before, counts(m),
		map[string]float64{"namespace_writes": 3, "namespace_write_failed": 1, "lookups": 1})

	before = counts(m)
	if _, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "app"}); err != nil {
		t.Fatal(err)
	}
	// The failed key is tried again and fails again: the container has
	// the two written keys and a write_failed skip.
	wantMoved(t, "container while the key still fails", before, counts(m), map[string]float64{
		"namespace_writes": 1, "namespace_write_failed": 1,
		"containers/write_failed": 1, "applied": 2, "skipped/write_failed": 1,
	})

	fail = false
	before = counts(m)
	if _, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "side"}); err != nil {
		t.Fatal(err)
	}
	wantMoved(t, "container once the write works", before, counts(m),
		map[string]float64{"namespace_writes": 1, "containers/applied": 1, "applied": 3})
}

// The lacking gauge starts from Synchronize's count and drops as pods are
// removed or healed; a container that gets nothing heals nothing.
func TestMetricsLackingDefaults(t *testing.T) {
	f := &fakeFetcher{}
	p, m := newMeteredTestPlugin(t, testConfig, f)
	running := api.ContainerState_CONTAINER_RUNNING
	pods := []*api.PodSandbox{testPod("p1", "network"), testPod("p2", "network"), testPod("p3", "network")}
	ctrs := []*api.Container{
		{Id: "c1", PodSandboxId: "p1", State: running},
		{Id: "c2", PodSandboxId: "p1", State: running},
		{Id: "c3", PodSandboxId: "p2", State: running},
		{Id: "c4", PodSandboxId: "p3", State: running, Annotations: map[string]string{outcome.AnnotationOutcome: outcome.Applied.String()}},
	}
	if _, err := p.Synchronize(context.Background(), pods, ctrs); err != nil {
		t.Fatal(err)
	}
	lacking := func() float64 { return counts(m)["lacking"] }
	if got := lacking(); got != 3 {
		t.Fatalf("after Synchronize: %v lacking, want 3", got)
	}
	f.err = errors.New("connection refused")
	if _, _, err := p.CreateContainer(context.Background(), pods[0], &api.Container{Name: "new"}); err != nil {
		t.Fatal(err)
	}
	if got := lacking(); got != 3 {
		t.Fatalf("a container whose lookup failed healed its pod: %v lacking, want 3", got)
	}
	f.err = nil
	if _, _, err := p.CreateContainer(context.Background(), pods[0], &api.Container{Name: "new"}); err != nil {
		t.Fatal(err)
	}
	if got := lacking(); got != 1 {
		t.Fatalf("after p1 got its defaults: %v lacking, want 1", got)
	}
	if err := p.RemovePodSandbox(context.Background(), pods[2]); err != nil {
		t.Fatal(err)
	}
	if got := lacking(); got != 1 {
		t.Fatalf("removing p3, which lacked nothing: %v lacking, want 1", got)
	}
	if err := p.RemovePodSandbox(context.Background(), pods[1]); err != nil {
		t.Fatal(err)
	}
	if got := lacking(); got != 0 {
		t.Fatalf("after p2 was removed: %v lacking, want 0", got)
	}
}

func TestMetricsConfigReloadsAndInfo(t *testing.T) {
	p, m := newMeteredTestPlugin(t, testConfig, &fakeFetcher{})
	text := "sysctls:\n  net.ipv4.tcp_keepalive_time: 300\n"
	good := trusteddir.WriteConfig(t, text)
	p.reload(good)
	bad := trusteddir.WriteConfig(t, "sysctls:\n  vm.swappiness: 1\n")
	p.reload(bad)
	p.reload(bad)
	if got := testutil.ToFloat64(m.reloadsSucceeded); got != 1 {
		t.Errorf("successful reloads = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.reloadsFailed); got != 2 {
		t.Errorf("failed reloads = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.lastReloadSucceeded); got <= 0 {
		t.Errorf("last successful reload at %v, want a time", got)
	}
	sum := sha256.Sum256([]byte(text))
	want := `
# HELP nri_sysctl_config_info The config in force: hash is the first 12 hex digits of the SHA-256 of its text, mode the mode in force. Always 1.
# TYPE nri_sysctl_config_info gauge
nri_sysctl_config_info{hash="` + hex.EncodeToString(sum[:])[:12] + `",mode="spec"} 1
`
	if err := testutil.GatherAndCompare(m.registry, strings.NewReader(want), "nri_sysctl_config_info"); err != nil {
		t.Error(err)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// /healthz: 503 until the plugin is configured and synchronized, 503 again
// once the connection ends, until the new connection is synchronized.
func TestHealthz(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	p := newPlugin(log, nil, "")
	p.metricsListener.flag = "127.0.0.1:0"
	t.Cleanup(p.metricsListener.close)
	p.connect = func(*config.Config) (podsysctl.Fetcher, error) { return &fakeFetcher{}, nil }
	if err := p.applyConfig(fixture.MustParse(t, testConfig)); err != nil {
		t.Fatal(err)
	}
	url := "http://" + p.metricsListener.bound
	check := func(when string, want int) {
		t.Helper()
		if code, body := get(t, url+"/healthz"); code != want {
			t.Errorf("%s: /healthz %d %q, want %d", when, code, body, want)
		}
	}
	check("before registration", http.StatusServiceUnavailable)
	if _, err := p.Configure(context.Background(), "", "containerd", "2.4.2"); err != nil {
		t.Fatal(err)
	}
	check("configured, not synchronized", http.StatusServiceUnavailable)
	if _, err := p.Synchronize(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	check("configured and synchronized", http.StatusOK)
	if code, body := get(t, url+"/metrics"); code != http.StatusOK || !strings.Contains(body, "nri_sysctl_registered 1") {
		t.Errorf("/metrics: %d, want nri_sysctl_registered 1 in:\n%s", code, body)
	}
	p.meter.Load().connected(false) // what serveOnce does when the connection ends
	check("after the connection ended", http.StatusServiceUnavailable)
	if _, err := p.Configure(context.Background(), "", "containerd", "2.4.2"); err != nil {
		t.Fatal(err)
	}
	check("registered again, not yet synchronized on the new connection", http.StatusServiceUnavailable)
	if _, err := p.Synchronize(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	check("synchronized again", http.StatusOK)
}

// Every metric is nri_sysctl_*, and the ones documented in docs/operating.md are
// there from the first scrape (counters with their labels at 0).
func TestMetricsNames(t *testing.T) {
	_, m := newMeteredTestPlugin(t, testConfig, &fakeFetcher{})
	families, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "nri_sysctl_") {
			t.Errorf("metric %s is not nri_sysctl_*", f.GetName())
		}
		names = append(names, f.GetName())
	}
	for _, want := range []string{
		"nri_sysctl_containers_total", "nri_sysctl_sysctls_applied_total", "nri_sysctl_sysctls_skipped_total",
		"nri_sysctl_pod_lookups_total", "nri_sysctl_pod_lookup_failures_total", "nri_sysctl_pod_lookup_duration_seconds",
		"nri_sysctl_namespace_writes_total", "nri_sysctl_namespace_write_failures_total",
		"nri_sysctl_config_reloads_total", "nri_sysctl_config_last_reload_success_timestamp_seconds",
		"nri_sysctl_config_info", "nri_sysctl_containers_lacking_defaults", "nri_sysctl_registered",
		"nri_sysctl_profiles_total",
	} {
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+want+" ") {
			t.Errorf("no %s in %v", want, names)
		}
	}
	if n := testutil.CollectAndCount(m.registry, "nri_sysctl_profiles_total"); n != len(policy.ProfileOutcomes) {
		t.Errorf("nri_sysctl_profiles_total has %d series, want one per result (%d)", n, len(policy.ProfileOutcomes))
	}
	if n := testutil.CollectAndCount(m.registry, "nri_sysctl_sysctls_skipped_total"); n != int(policy.NumSkipCodes)-3 {
		t.Errorf("nri_sysctl_sysctls_skipped_total has %d series, want one per sysctl skip code, none for profiles", n)
	}
	if n := testutil.CollectAndCount(m.registry, "nri_sysctl_containers_total"); n != outcome.Count {
		t.Errorf("nri_sysctl_containers_total has %d series, want one per outcome (%d)", n, outcome.Count)
	}
}

// Each outcome is counted under its own label, and a value that is no
// outcome under none: it used to be counted as write_failed.
func TestContainerOutcomeCountsOnlyItsOwnLabel(t *testing.T) {
	_, m := newMeteredTestPlugin(t, testConfig, &fakeFetcher{})
	for o := range outcome.Outcome(outcome.Count + 1) {
		before := counts(m)
		m.containerOutcome(o)
		moved := map[string]float64{}
		if o < outcome.Count {
			moved["containers/"+o.String()] = 1
		}
		wantMoved(t, fmt.Sprintf("outcome %d", o), before, counts(m), moved)
	}
}

// The skip metric's labels are the codes' table, in the order of the codes.
func TestSkipCodeLabels(t *testing.T) {
	want := []string{"host_namespace", "pod_own", "existing", "user_namespace", "write_failed", "convergence", "profile_unknown", "profile_not_allowed", "profiles_refused"}
	var got []string
	for c := range policy.SkipCode(policy.NumSkipCodes) {
		got = append(got, c.Label())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("skip labels %v, want %v", got, want)
	}
}

func TestMetricsAddressFlag(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{{"", true}, {"127.0.0.1:9465", true}, {":9465", true}, {"[::1]:9465", true}, {"9465", false}, {"127.0.0.1:", false}} {
		if err := checkMetricsAddress(tc.addr); (err == nil) != tc.ok {
			t.Errorf("%q: %v, want ok=%v", tc.addr, err, tc.ok)
		}
	}
}

// The safety net behind the kernel check: a value that passed the probe but fails in a pod
// (namespace mode, onError: fail) fails RunPodSandbox with the key, the
// value and the errno, and is counted as a write_failed container (the pod
// gets none) and a namespace write failure.
func TestMetricsCountFailedRunPodSandbox(t *testing.T) {
	p, m := newMeteredTestPlugin(t, testConfig+"mode: namespace\n", &fakeFetcher{})
	p.writeNamespaces = (&recordingWriter{fail: map[string]bool{"kernel.msgmax": true}}).write
	before := counts(m)
	err := p.RunPodSandbox(context.Background(), testPod("f", "network", "ipc", "uts"))
	if err == nil || !strings.Contains(err.Error(), `kernel.msgmax "16384": invalid argument`) {
		t.Fatalf("RunPodSandbox: %v, want an error naming the key, the value and the errno", err)
	}
	wantMoved(t, "RunPodSandbox failing on a write", before, counts(m),
		map[string]float64{"namespace_writes": 3, "namespace_write_failed": 1, "containers/write_failed": 1, "lookups": 1})
}

// Connections that send one request and then sit idle
// were all kept (no idle timeout, no cap), so any pod could grow the plugin
// until its memory limit killed it. Past the cap the oldest idle one is
// shed, and /healthz still answers.
func TestMetricsListenerShedsIdleConnections(t *testing.T) {
	p, _ := newMeteredTestPlugin(t, testConfig, &fakeFetcher{})
	addr := p.metricsListener.bound
	var idle []net.Conn
	for range metricsMaxConns + 8 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("connection %d: %v", len(idle), err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		idle = append(idle, c)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("/healthz with %d idle connections open: %v", len(idle), err)
	}
	resp.Body.Close()
	// Past the cap the server closed the connections it shed: which
	// ones depends on when each was marked idle, so count them.
	var closed atomic.Int32
	var wg sync.WaitGroup
	for _, c := range idle {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				closed.Add(1)
			}
		}()
	}
	wg.Wait()
	if want := len(idle) + 1 - metricsMaxConns; int(closed.Load()) < want {
		t.Fatalf("the server closed %d of %d idle connections, want at least %d past the cap of %d", closed.Load(), len(idle), want, metricsMaxConns)
	}
	if srv := p.metricsListener.server; srv.IdleTimeout == 0 || srv.ReadTimeout == 0 || srv.WriteTimeout == 0 || srv.MaxHeaderBytes == 0 {
		t.Errorf("metrics server without idle, read or write timeouts or a header limit: %+v", srv)
	}
}
