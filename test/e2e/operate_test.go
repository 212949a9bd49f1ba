// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

// Operating the plugin: its Prometheus metrics and /healthz,
// `nri-sysctl explain` against what the plugin really does, and
// `nri-sysctl audit` against pods started while no plugin ran. Values are
// read inside containers; counters are read from the plugin's /metrics.

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// freeAddress returns a loopback address with a port nobody listens on.
func freeAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// httpGet returns the status and body, or status 0 when nothing answers.
func httpGet(url string) (int, string) {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// scrape reads /metrics into "name{labels}" -> value, nri_sysctl_* only.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	code, body := httpGet("http://" + addr + "/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics on %s: %d %s", addr, code, body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		if !strings.HasPrefix(line, "nri_sysctl_") {
			t.Errorf("metric outside nri_sysctl_*: %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// wantDeltas checks that every series in want moved by exactly its amount
// between two scrapes, and that no other counter of the plugin's moved.
func wantDeltas(t *testing.T, what string, before, after map[string]float64, want map[string]float64) {
	t.Helper()
	names := map[string]bool{}
	for k := range after {
		names[k] = true
	}
	for k := range want {
		names[k] = true
	}
	var keys []string
	for k := range names {
		if strings.Contains(k, "_total") || strings.HasPrefix(k, "nri_sysctl_pod_lookup_duration_seconds_count") || strings.HasPrefix(k, "nri_sysctl_containers_lacking_defaults") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var moved []string
	for _, k := range keys {
		d := after[k] - before[k]
		if d != 0 {
			moved = append(moved, fmt.Sprintf("%s +%v", k, d))
		}
		if d != want[k] {
			t.Errorf("%s: %s moved by %v, want %v", what, k, d, want[k])
		}
	}
	t.Logf("%s: %s", what, strings.Join(moved, ", "))
}

// waitHealthz polls /healthz until it answers with want.
func waitHealthz(t *testing.T, addr string, want int, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		code, body := httpGet("http://" + addr + "/healthz")
		if code == want {
			return strings.TrimSpace(body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz on %s: %d %q after %s, want %d", addr, code, body, timeout, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

const operateExcluded = "e2e-op-excluded"

// TestOperateMetrics: a plugin started with --metrics-address before its
// NRI socket exists answers /healthz 503, and 200 once registered,
// synchronized and containerd answers its lookups. Pods of each kind move
// the counters by exactly what they should; a second plugin instance that
// cannot look pods up stays unready (503 naming containerd) and counts
// lookup_failed.
func TestOperateMetrics(t *testing.T) {
	c := getCluster(t)
	checkMeaningful(t, nodeDefaults)
	own := map[string]string{"net.ipv4.tcp_keepalive_intvl": "33"}
	checkMeaningful(t, own)
	// runningPods: keep, so that the counters move by the create path's
	// work alone: the second instance's convergence pass over the running
	// pods, each looked up and failing, came at no fixed time and was
	// counted beside the new pod's lookups (CI, 2026-12-06: 6, want 2).
	cfgText := defaultsYAML(nodeDefaults) + "exclude:\n  namespaces: [" + operateExcluded + "]\nrunningPods: keep\n"
	cfg := writePluginConfig(t, cfgText)
	addr := freeAddress(t)
	// The NRI socket the plugin is pointed at appears later, as a link to
	// containerd's (as in TestServiceSdNotify).
	link := filepath.Join(c.tmp, c.nextID("nri-link")+".sock")
	t.Cleanup(func() { os.Remove(link) })
	p := launchPlugin(t, nil, pluginArgs(c, cfg, []string{"--nri-socket", link, "--metrics-address", addr})...)

	why := waitHealthz(t, addr, http.StatusServiceUnavailable, 10*time.Second)
	t.Logf("before registration: /healthz 503 %q", why)
	if got := scrape(t, addr)["nri_sysctl_registered"]; got != 0 {
		t.Errorf("nri_sysctl_registered = %v before registration, want 0", got)
	}
	if err := os.Symlink(c.nriSock, link); err != nil {
		t.Fatal(err)
	}
	p.waitRegistered(t, 1, 30*time.Second)
	why = waitHealthz(t, addr, http.StatusOK, 10*time.Second)
	t.Logf("after registration and Synchronize: /healthz 200 %q", why)

	before := scrape(t, addr)
	if before["nri_sysctl_registered"] != 1 {
		t.Errorf("nri_sysctl_registered = %v, want 1", before["nri_sysctl_registered"])
	}
	mode := "namespace"
	if specModeExpected(c) {
		mode = "spec"
	}
	sum := sha256.Sum256([]byte(cfgText))
	info := fmt.Sprintf(`nri_sysctl_config_info{hash="%s",mode="%s"}`, hex.EncodeToString(sum[:])[:12], mode)
	if before[info] != 1 {
		t.Errorf("want %s 1 in /metrics; have %v", info, seriesOf(before, "nri_sysctl_config_info"))
	}

	keys := sortedKeys(nodeDefaults)
	for _, spec := range []PodSpec{
		{Name: "plain", Namespace: "e2e-op"},
		{Name: "excluded", Namespace: operateExcluded},
		{Name: "hostnet", Namespace: "e2e-op", HostNetwork: true},
		{Name: "own", Namespace: "e2e-op", Sysctls: own},
	} {
		pod := runPod(t, spec)
		id := runContainer(t, pod, "app")
		t.Logf("pod %s: %v", spec.Name, readSysctls(t, id, keys...))
	}
	after := scrape(t, addr)
	// plain gets all 5 keys; hostnet only kernel.msgmax (its 4 net keys
	// are the host's); own all but its own tcp_keepalive_intvl.
	want := map[string]float64{
		`nri_sysctl_containers_total{outcome="applied"}`:            3,
		`nri_sysctl_containers_total{outcome="excluded"}`:           1,
		`nri_sysctl_sysctls_applied_total`:                          5 + 1 + 4,
		`nri_sysctl_sysctls_skipped_total{reason="host_namespace"}`: 4,
		`nri_sysctl_sysctls_skipped_total{reason="pod_own"}`:        1,
		`nri_sysctl_pod_lookups_total`:                              3, // the excluded pod is not looked up
		`nri_sysctl_pod_lookup_duration_seconds_count`:              3,
	}
	if mode == "namespace" {
		want[`nri_sysctl_namespace_writes_total`] = 5 + 1 + 4
	}
	wantDeltas(t, "four pods (plain, excluded, hostNetwork, own value)", before, after, want)

	// A second instance that cannot reach containerd for lookups: its
	// pod gets nothing, counted as lookup_failed; the pod is looked up at
	// RunPodSandbox and again at its container.
	p.stop()
	failing := freeAddress(t)
	startPlugin(t, cfgText, "--containerd-address", filepath.Join(c.tmp, "no-such-containerd.sock"), "--metrics-address", failing)
	// Registered and synchronized, but not ready: pods cannot be looked
	// up, so they would get nothing.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, body := httpGet("http://" + failing + "/healthz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "pods cannot be looked up: containerd does not answer") {
			t.Logf("/healthz with no containerd to look pods up in: %d %s", code, strings.TrimSpace(body))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz with no containerd to look pods up in: %d %q, want 503 naming containerd", code, body)
		}
	}
	before = scrape(t, failing)
	pod := runPod(t, PodSpec{Name: "nolookup", Namespace: "e2e-op"})
	id := runContainer(t, pod, "app")
	wantSysctls(t, "pod whose lookup failed", readSysctls(t, id, keys...), only(c.kernel, keys...))
	want = map[string]float64{
		`nri_sysctl_containers_total{outcome="lookup_failed"}`: 1,
		`nri_sysctl_pod_lookups_total`:                         2,
		`nri_sysctl_pod_lookup_failures_total`:                 2,
		`nri_sysctl_pod_lookup_duration_seconds_count`:         2,
	}
	// The lookup started at RunPodSandbox runs in the background in spec
	// mode: wait for it to be counted, then check that nothing more moved.
	deadline := time.Now().Add(5 * time.Second)
	for after = scrape(t, failing); after[`nri_sysctl_pod_lookups_total`]-before[`nri_sysctl_pod_lookups_total`] < 2 && time.Now().Before(deadline); after = scrape(t, failing) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	wantDeltas(t, "pod whose lookup failed", before, scrape(t, failing), want)
}

func seriesOf(m map[string]float64, name string) []string {
	var out []string
	for k, v := range m {
		if strings.HasPrefix(k, name) {
			out = append(out, fmt.Sprintf("%s %v", k, v))
		}
	}
	sort.Strings(out)
	return out
}

// operateRulesConfig has rules whose order matters (the later one wins for
// net.core.somaxconn) and an exclusion.
const operateRulesConfig = `sysctls:
  net.ipv4.tcp_keepalive_time: "600"
  net.ipv4.tcp_keepalive_intvl: "15"
  net.core.somaxconn: "1111"
  kernel.msgmax: "16384"
rules:
  - name: web
    match: {namespaces: ["e2e-op-web*"]}
    sysctls: {net.core.somaxconn: "2222"}
  - name: big-backlog
    match: {labels: {backlog: big}}
    sysctls: {net.core.somaxconn: "3333"}
exclude:
  namespaces: [` + operateExcluded + `]
`

// explainApplied runs `nri-sysctl explain` and returns what it says is
// applied (key -> value) and its whole output.
func explainApplied(t *testing.T, args ...string) (map[string]string, string) {
	t.Helper()
	code, out := runExpectExit(t, pluginBinary(t), append([]string{"explain"}, args...)...)
	if code != 0 {
		t.Fatalf("nri-sysctl explain %s: exit %d\n%s", strings.Join(args, " "), code, out)
	}
	applied := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		key, rest, _ := strings.Cut(line, " ")
		if value, ok := strings.CutSuffix(rest, " applied"); ok {
			applied[key] = value
		}
	}
	return applied, out
}

// TestOperateExplainMatchesPlugin: for pods of several kinds, what
// `nri-sysctl explain` says is applied is what the plugin gave the pod: the
// values read in its container are explain's for the keys it applies, and
// the values without the plugin for the others.
func TestOperateExplainMatchesPlugin(t *testing.T) {
	c := getCluster(t)
	hostLock.hold(t, false) // compares the host's values (hostlock_test.go)
	keys := []string{"net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_keepalive_intvl", "net.core.somaxconn", "kernel.msgmax"}
	for _, v := range []string{"1111", "2222", "3333"} {
		checkMeaningful(t, map[string]string{"net.core.somaxconn": v})
	}
	checkMeaningful(t, map[string]string{"net.ipv4.tcp_keepalive_time": "600", "net.ipv4.tcp_keepalive_intvl": "15", "kernel.msgmax": "16384"})
	p := startPlugin(t, operateRulesConfig)
	host := map[string]string{}
	for _, k := range keys {
		host[k] = hostSysctl(t, k)
	}
	cases := []struct {
		name    string
		spec    PodSpec
		explain []string
		// without is what the pod has for keys the plugin does not set.
		without map[string]string
		applied int
	}{
		{"plain", PodSpec{Namespace: "e2e-op"}, nil, c.kernel, 4},
		{"hostnetwork", PodSpec{Namespace: "e2e-op", HostNetwork: true}, []string{"--host-network"}, host, 1},
		{"own-value", PodSpec{Namespace: "e2e-op", Sysctls: map[string]string{"net.ipv4.tcp_keepalive_intvl": "33"}},
			[]string{"--pod-sysctl", "net.ipv4.tcp_keepalive_intvl=33"}, merged(c.kernel, map[string]string{"net.ipv4.tcp_keepalive_intvl": "33"}), 3},
		{"later-rule-wins", PodSpec{Namespace: "e2e-op-web", Labels: map[string]string{"backlog": "big"}}, []string{"--label", "backlog=big"}, c.kernel, 4},
		{"excluded", PodSpec{Namespace: operateExcluded}, nil, c.kernel, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			spec.Name = tc.name
			pod := runPod(t, spec)
			id := runContainer(t, pod, "app")
			got := readSysctls(t, id, keys...)
			args := append([]string{"--config", p.configPath, "--namespace", spec.Namespace, "--name", spec.Name}, tc.explain...)
			applied, out := explainApplied(t, args...)
			t.Logf("nri-sysctl explain %s\n%s", strings.Join(args, " "), out)
			if len(applied) != tc.applied {
				t.Errorf("explain applies %d key(s) %v, want %d", len(applied), applied, tc.applied)
			}
			want := map[string]string{}
			for _, k := range keys {
				want[k] = tc.without[k]
				if v, ok := applied[k]; ok {
					want[k] = v
				}
			}
			wantSysctls(t, "container, against explain", got, want)
			// The plugin's own record agrees too.
			if ann := containerAnnotations(t, id)[annotationInjected]; ann != injectedValue(applied) {
				t.Errorf("%s = %q, explain says %q", annotationInjected, ann, injectedValue(applied))
			}
		})
	}
}

// auditLacking matches the lines naming lacking containers in audit's summary.
var auditLacking = regexp.MustCompile(`(?m)^  (\S+) container (\S+) \((\w+)\)$`)

// runAudit runs `nri-sysctl audit` against the cluster's containerd and
// returns its exit code, the IDs it names as lacking, and its output.
func runAudit(t *testing.T, extra ...string) (int, []string, string) {
	t.Helper()
	c := getCluster(t)
	args := append([]string{"audit", "--containerd-address", c.grpcSock, "--containerd-namespace", k8sNamespace}, extra...)
	code, out := runExpectExit(t, pluginBinary(t), args...)
	var ids []string
	for _, m := range auditLacking.FindAllStringSubmatch(out, -1) {
		ids = append(ids, m[3])
	}
	sort.Strings(ids)
	t.Logf("nri-sysctl %s: exit %d\n%s", strings.Join(args, " "), code, out)
	return code, ids, out
}

// TestOperateAudit: containers started while no plugin ran are exactly the
// ones audit names, from their annotations and (--read) from the values in
// their pods' namespaces; once they are replaced by pods created with the
// plugin up, audit exits 0.
func TestOperateAudit(t *testing.T) {
	c := getCluster(t)
	checkMeaningful(t, nodeDefaults)
	if ids, err := c.runningContainerIDs(); err != nil {
		t.Fatal(err)
	} else if len(ids) > 0 {
		t.Fatalf("%d running container(s) left by another test (%v): audit would report them too", len(ids), ids)
	}
	// keep: the pods started without the plugin stay as they are until
	// the reload to converge below.
	cfgText := defaultsYAML(nodeDefaults) + "runningPods: keep\n"

	// While no plugin runs.
	var down []*Pod
	var lacking []string
	for _, name := range []string{"down-1", "down-2"} {
		// Removed by the test itself, half-way.
		pod, err := c.runPodErr(PodSpec{Name: name, Namespace: "e2e-op-audit"})
		if err != nil {
			t.Fatal(err)
		}
		down = append(down, pod)
		lacking = append(lacking, runContainer(t, pod, "app"))
	}
	lacking = append(lacking, runContainer(t, down[1], "side"))
	sort.Strings(lacking)

	t.Cleanup(func() {
		for _, pod := range down {
			if pod != nil {
				c.removePod(pod.ID)
			}
		}
	})
	p := startPlugin(t, cfgText)
	code, ids, _ := runAudit(t)
	if code != 1 || strings.Join(ids, ",") != strings.Join(lacking, ",") {
		t.Errorf("audit: exit %d naming %v, want exit 1 naming %v", code, ids, lacking)
	}
	code, ids, out := runAudit(t, "--config", p.configPath, "--read")
	if code != 1 || strings.Join(ids, ",") != strings.Join(lacking, ",") {
		t.Errorf("audit --read: exit %d naming %v, want exit 1 naming %v", code, ids, lacking)
	}
	if !strings.Contains(out, "live values: ") {
		t.Errorf("audit --read does not say which values are wrong:\n%s", out)
	}

	// Once they converge, audit --read, which reads what the
	// containers see, exits 0; their annotations still say how they were
	// created.
	rewriteConfig(t, p.configPath, defaultsYAML(nodeDefaults))
	sighup(t, p)
	waitUntil(t, 20*time.Second, "audit --read to find the running pods converged", func() (bool, string) {
		code, ids, out := runAudit(t, "--config", p.configPath, "--read")
		return code == 0 && len(ids) == 0, fmt.Sprintf("exit %d naming %v\n%s", code, ids, out)
	})
	if code, ids, _ := runAudit(t); code != 1 || strings.Join(ids, ",") != strings.Join(lacking, ",") {
		t.Errorf("audit from annotations after the convergence: exit %d naming %v, want exit 1 naming %v", code, ids, lacking)
	}

	for i, pod := range down {
		c.removePod(pod.ID)
		down[i] = nil
	}
	for _, name := range []string{"up-1", "up-2"} {
		pod := runPod(t, PodSpec{Name: name, Namespace: "e2e-op-audit"})
		runContainer(t, pod, "app")
	}
	for _, extra := range [][]string{nil, {"--config", p.configPath, "--read"}} {
		if code, ids, out := runAudit(t, extra...); code != 0 || len(ids) != 0 || !strings.Contains(out, "all 2 running container(s) have the node's defaults") {
			t.Errorf("audit %v after the pods started without the plugin were replaced: exit %d naming %v, want exit 0", extra, code, ids)
		}
	}
}
