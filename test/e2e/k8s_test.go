// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

// The fleet roll-out on Kubernetes itself (make e2e-k8s): a single-node
// cluster on the harness's containerd, the image from `make image`
// imported with ctr, the chart package from `make chart` installed with
// helm, and values read inside the pods' containers through CRI.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nri-sysctl/nri-sysctl/test/internal/containerdversion"
)

const (
	k8sTestNamespace   = "e2e-k8s"
	pluginNamespace    = "nri-sysctl"
	pluginRelease      = "nri-sysctl"
	k8sWatchInterval   = "1s"
	pluginConfigMapKey = "config.yaml"
	// The chart's metrics.port.
	pluginMetricsPort = 9183
)

// k8sRefused is an edit this node's kernel check must refuse, merged into
// a good config: a value the kernel refuses (a typo).
var k8sRefused = map[string]string{"net.ipv4.tcp_keepalive_time": "abc"}

// The plugin's config in the test: two network keys and one IPC key, so
// that hostNetwork pods still get something.
var k8sDefaults = map[string]string{
	"net.ipv4.tcp_keepalive_time":  "600",
	"net.ipv4.tcp_keepalive_intvl": "60",
	"kernel.msgmax":                "16384",
}

func k8sConfig(defaults map[string]string) string {
	return defaultsYAML(defaults) + "exclude:\n  namespaces: [kube-system]\n"
}

// imageName reads the image's name from the archive make image wrote.
func imageName(t *testing.T, archive string) string {
	t.Helper()
	out, err := exec.Command("tar", "-xOf", archive, "index.json").Output()
	if err != nil {
		t.Fatalf("%s: %v (run make image)", archive, err)
	}
	var index struct {
		Manifests []struct{ Annotations map[string]string }
	}
	if err := json.Unmarshal(out, &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("%s: index.json: %v %s", archive, err, out)
	}
	return index.Manifests[0].Annotations["io.containerd.image.name"]
}

// packagedChart is the chart package make chart wrote (make e2e-k8s names
// it in NRI_SYSCTL_E2E_CHART): the test installs it as an operator would,
// leaving the image tag to the chart's default, its appVersion as an OCI
// tag, which must then be the archive's tag.
func packagedChart(t *testing.T, tag string) string {
	t.Helper()
	chart := os.Getenv("NRI_SYSCTL_E2E_CHART")
	if !strings.HasSuffix(chart, ".tgz") {
		t.Fatalf("NRI_SYSCTL_E2E_CHART=%q: want the chart package make chart writes, bin/nri-sysctl-<version>.tgz (make e2e-k8s sets it)", chart)
	}
	out, err := exec.Command("tar", "-xOzf", chart, "nri-sysctl/Chart.yaml").Output()
	if err != nil {
		t.Fatalf("%s: %v (run make chart)", chart, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "appVersion: "); ok {
			if got := strings.ReplaceAll(strings.Trim(v, `"'`), "+", "_"); got != tag {
				t.Fatalf("%s: appVersion %s gives the image tag %s, the image archive's is %s: run make image and make chart at one VERSION", chart, v, got, tag)
			}
			return chart
		}
	}
	t.Fatalf("%s: Chart.yaml has no appVersion:\n%s", chart, out)
	return ""
}

// pluginHasMetrics: the chart's readiness probe needs --metrics-address.
func pluginHasMetrics(t *testing.T, bin string) bool {
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	return strings.Contains(string(out), "-metrics-address")
}

type helmRun struct {
	k    *k8sCluster
	home string
}

// ownEnv is what helm's environment adds to the test's: the cluster's
// kubeconfig, and the test's own directories for helm's cache,
// configuration (its registry logins) and data.
func (h helmRun) ownEnv() []string {
	return []string{"KUBECONFIG=" + h.k.admin,
		"HELM_CACHE_HOME=" + filepath.Join(h.home, "cache"), "HELM_CONFIG_HOME=" + filepath.Join(h.home, "config"), "HELM_DATA_HOME=" + filepath.Join(h.home, "data")}
}

func (h helmRun) run(t *testing.T, args ...string) string {
	t.Helper()
	start := time.Now()
	cmd := exec.Command(h.k.bins["helm"], args...)
	cmd.Env = append(os.Environ(), h.ownEnv()...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	logf("helm %s: %s", args[0], time.Since(start).Round(time.Millisecond))
	return string(out)
}

// createTestNamespace makes the namespace the tests' workloads run in, and
// waits for its default service account, without which pods are refused.
func (k *k8sCluster) createTestNamespace(t *testing.T) {
	t.Helper()
	k.mustDo(t, http.MethodPost, "/api/v1/namespaces", "", map[string]any{"metadata": map[string]string{"name": k8sTestNamespace}}, nil)
	waitUntil(t, time.Minute, "the default service account", func() (bool, string) {
		_, code, _ := k.do(http.MethodGet, "/api/v1/namespaces/"+k8sTestNamespace+"/serviceaccounts/default", "", nil)
		return code == 200, fmt.Sprint(code)
	})
}

// k8sPod is what the test reads of a pod.
type k8sPod struct {
	Metadata struct{ Name, Namespace, UID string } `json:"metadata"`
	Spec     struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		Phase      string `json:"phase"`
		PodIP      string `json:"podIP"`
		Conditions []struct {
			Type, Status, Reason, Message string
		} `json:"conditions"`
		ContainerStatuses []struct {
			Name         string
			Ready        bool
			RestartCount int
			ContainerID  string
		} `json:"containerStatuses"`
	} `json:"status"`
}

func (k *k8sCluster) pod(t *testing.T, ns, name string) (k8sPod, bool) {
	t.Helper()
	data, code, err := k.do(http.MethodGet, "/api/v1/namespaces/"+ns+"/pods/"+name, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var p k8sPod
	if code == http.StatusNotFound {
		return p, false
	}
	if code != 200 || json.Unmarshal(data, &p) != nil {
		t.Fatalf("GET pod %s/%s: HTTP %d %s", ns, name, code, data)
	}
	return p, true
}

type workload struct {
	name        string
	node        string // spec.nodeName; "": the scheduler's choice
	hostNetwork bool
	sysctls     map[string]string // the pod's own securityContext.sysctls
	// tolerateNotReady: the pod runs on a node that still has the
	// plugin's not-ready taint, as a workload already running when the
	// plugin is installed on a live cluster.
	tolerateNotReady bool
}

func (k *k8sCluster) createWorkload(t *testing.T, w workload) {
	t.Helper()
	spec := map[string]any{
		"hostNetwork":                   w.hostNetwork,
		"terminationGracePeriodSeconds": 1,
		"automountServiceAccountToken":  false,
		"enableServiceLinks":            false,
		"nodeName":                      w.node,
		"containers": []any{map[string]any{
			"name": "app", "image": busyboxImage, "imagePullPolicy": "Never",
			"command": []string{"sleep", "3600"},
		}},
	}
	if w.tolerateNotReady {
		key, effect, _ := strings.Cut(notReadyTaint, ":")
		spec["tolerations"] = []any{map[string]string{"key": key, "operator": "Exists", "effect": effect}}
	}
	if len(w.sysctls) > 0 {
		var list []any
		for _, key := range sortedKeys(w.sysctls) {
			list = append(list, map[string]string{"name": key, "value": w.sysctls[key]})
		}
		spec["securityContext"] = map[string]any{"sysctls": list}
	}
	body := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": w.name, "namespace": k8sTestNamespace}, "spec": spec}
	k.mustDo(t, http.MethodPost, "/api/v1/namespaces/"+k8sTestNamespace+"/pods", "", body, nil)
}

func (k *k8sCluster) waitPodRunning(t *testing.T, ns, name string, timeout time.Duration) k8sPod {
	t.Helper()
	var p k8sPod
	waitUntil(t, timeout, "pod "+ns+"/"+name+" running and ready", func() (bool, string) {
		var ok bool
		if p, ok = k.pod(t, ns, name); !ok {
			return false, "not found"
		}
		ready := p.Status.Phase == "Running"
		for _, c := range p.Status.Conditions {
			if c.Type == "Ready" && c.Status != "True" {
				ready = false
			}
		}
		return ready, fmt.Sprintf("%s %+v", p.Status.Phase, p.Status.Conditions)
	})
	return p
}

func (k *k8sCluster) deletePod(t *testing.T, ns, name string) {
	t.Helper()
	data, code, err := k.do(http.MethodDelete, "/api/v1/namespaces/"+ns+"/pods/"+name, "", map[string]any{"gracePeriodSeconds": 0})
	if err != nil || (code != 200 && code != 404) {
		t.Fatalf("delete pod %s/%s: HTTP %d %v %s", ns, name, code, err, data)
	}
}

// containerOf finds a running container of a pod on the node, through CRI.
func (c *cluster) containerOf(t *testing.T, ns, pod, container string) string {
	t.Helper()
	out, err := c.crictlRaw("ps", "-q", "--state", "running", "--label", "io.kubernetes.pod.namespace="+ns,
		"--label", "io.kubernetes.pod.name="+pod, "--label", "io.kubernetes.container.name="+container)
	if err != nil {
		t.Fatal(err)
	}
	ids := strings.Fields(out)
	if len(ids) != 1 {
		t.Fatalf("pod %s/%s: %d running %q containers, want 1", ns, pod, len(ids), container)
	}
	return ids[0]
}

// workloadValues runs a pod, reads the test's keys inside its container,
// and deletes it.
func (k *k8sCluster) workloadValues(t *testing.T, w workload) map[string]string {
	t.Helper()
	k.createWorkload(t, w)
	k.waitPodRunning(t, k8sTestNamespace, w.name, 2*time.Minute)
	vals := readSysctls(t, k.c.containerOf(t, k8sTestNamespace, w.name, "app"), sortedKeys(k8sDefaults)...)
	k.deletePod(t, k8sTestNamespace, w.name)
	return vals
}

// waitDaemonSet waits until every pod of the plugin's DaemonSet runs the
// current template and is ready.
func (k *k8sCluster) waitDaemonSet(t *testing.T) {
	t.Helper()
	k.waitDaemonSetOn(t, 1)
}

// waitDaemonSetOn is waitDaemonSet on a cluster of that many nodes.
func (k *k8sCluster) waitDaemonSetOn(t *testing.T, nodes int) {
	t.Helper()
	waitUntil(t, 3*time.Minute, "the DaemonSet's pods to be updated and ready", func() (bool, string) {
		var ds struct {
			Metadata struct{ Generation int64 } `json:"metadata"`
			Status   struct {
				ObservedGeneration     int64 `json:"observedGeneration"`
				DesiredNumberScheduled int   `json:"desiredNumberScheduled"`
				UpdatedNumberScheduled int   `json:"updatedNumberScheduled"`
				NumberReady            int   `json:"numberReady"`
				NumberAvailable        int   `json:"numberAvailable"`
			} `json:"status"`
		}
		k.mustDo(t, http.MethodGet, "/apis/apps/v1/namespaces/"+pluginNamespace+"/daemonsets/"+pluginRelease, "", nil, &ds)
		st := ds.Status
		return st.ObservedGeneration == ds.Metadata.Generation && st.DesiredNumberScheduled == nodes &&
			st.UpdatedNumberScheduled == nodes && st.NumberReady == nodes && st.NumberAvailable == nodes, fmt.Sprintf("%+v", st)
	})
}

// pluginContainer is the running plugin's container on the node.
func (k *k8sCluster) pluginContainer(t *testing.T) string {
	t.Helper()
	var id string
	waitUntil(t, time.Minute, "one running plugin container", func() (bool, string) {
		out, err := k.c.crictlRaw("ps", "-q", "--state", "running", "--label", "io.kubernetes.pod.namespace="+pluginNamespace, "--label", "io.kubernetes.container.name=nri-sysctl")
		ids := strings.Fields(out)
		if err != nil || len(ids) != 1 {
			return false, fmt.Sprintf("%v %v", ids, err)
		}
		id = ids[0]
		return true, ""
	})
	return id
}

// pluginLogsAll: crictl logs puts the container's stderr on its stderr.
func (k *k8sCluster) pluginLogsAll(t *testing.T, id string) string {
	t.Helper()
	cmd := exec.Command(k.c.crictlPath, "--runtime-endpoint", "unix://"+k.c.grpcSock, "logs", id)
	cmd.Env = append(os.Environ(), "CRI_CONFIG_FILE="+k.c.crictlConfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("crictl logs %s: %v %s", id, err, out)
	}
	return string(out)
}

// usageOf reads the peak and current resident set of a container's main
// process, and the CPU time it used.
func (k *k8sCluster) usageOf(t *testing.T, id string) (peakKiB, rssKiB int, cpu time.Duration) {
	t.Helper()
	pid, _ := jsonPath(inspectContainer(t, id), "info", "pid")
	f, _ := pid.(float64)
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", int(f)))
	if err != nil {
		t.Fatalf("plugin pid %v: %v", pid, err)
	}
	cpu = cpuTimeOf(int(f))
	rssKiB, peakKiB = memoryKiB(data)
	return peakKiB, rssKiB, cpu
}

// readyPluginPod waits for the one plugin pod that is running and ready
// and is not the pod whose UID is gone (a deleted one: it must have left
// the API server too, so that its container is no longer on the node).
func (k *k8sCluster) readyPluginPod(t *testing.T, gone string, timeout time.Duration) k8sPod {
	t.Helper()
	var ready k8sPod
	waitUntil(t, timeout, "one ready plugin pod", func() (bool, string) {
		var pods struct{ Items []k8sPod }
		k.mustDo(t, http.MethodGet, "/api/v1/namespaces/"+pluginNamespace+"/pods", "", nil, &pods)
		var seen []string
		found := 0
		for _, p := range pods.Items {
			isReady := p.Status.Phase == "Running"
			for _, c := range p.Status.Conditions {
				if c.Type == "Ready" && c.Status != "True" {
					isReady = false
				}
			}
			seen = append(seen, fmt.Sprintf("%s %s ready=%v", p.Metadata.Name, p.Status.Phase, isReady))
			if p.Metadata.UID == gone {
				return false, "the old pod is still there: " + strings.Join(seen, ", ")
			}
			if isReady {
				ready = p
				found++
			}
		}
		return found == 1 && len(pods.Items) == 1, strings.Join(seen, ", ")
	})
	return ready
}

// metricsOf scrapes a plugin pod's /metrics at its pod IP.
func metricsOf(t *testing.T, p k8sPod) map[string]float64 {
	t.Helper()
	return scrape(t, net.JoinHostPort(p.Status.PodIP, strconv.Itoa(pluginMetricsPort)))
}

// configInfo is the nri_sysctl_config_info series naming this config text.
func configInfo(text, mode string) string {
	sum := sha256.Sum256([]byte(text))
	return fmt.Sprintf(`nri_sysctl_config_info{hash="%s",mode="%s"}`, hex.EncodeToString(sum[:])[:12], mode)
}

const (
	reloadFailures  = `nri_sysctl_config_reloads_total{result="failure"}`
	reloadSuccesses = `nri_sysctl_config_reloads_total{result="success"}`
)

// k8sEvent is what the test reads of an Event.
type k8sEvent struct {
	Reason, Message, Type string
	InvolvedObject        struct{ Kind, Name, Namespace, UID string } `json:"involvedObject"`
}

// waitEvent waits for an Event on the pod with the reason whose message
// starts with prefix and holds each of has.
func (k *k8sCluster) waitEvent(t *testing.T, p k8sPod, reason, prefix string, has ...string) k8sEvent {
	t.Helper()
	q := url.Values{"fieldSelector": {"involvedObject.uid=" + p.Metadata.UID}}
	var found k8sEvent
	waitUntil(t, time.Minute, fmt.Sprintf("a %s Event on pod %s", reason, p.Metadata.Name), func() (bool, string) {
		var events struct{ Items []k8sEvent }
		k.mustDo(t, http.MethodGet, "/api/v1/namespaces/"+p.Metadata.Namespace+"/events?"+q.Encode(), "", nil, &events)
		var seen []string
		for _, e := range events.Items {
			seen = append(seen, e.Reason+": "+e.Message)
			if e.Reason != reason || !strings.HasPrefix(e.Message, prefix) {
				continue
			}
			ok := true
			for _, h := range has {
				ok = ok && strings.Contains(e.Message, h)
			}
			if ok {
				found = e
				return true, ""
			}
		}
		return false, strings.Join(seen, " | ")
	})
	if o := found.InvolvedObject; o.Kind != "Pod" || o.Name != p.Metadata.Name || o.Namespace != pluginNamespace || found.Type != "Warning" {
		t.Errorf("Event %+v: want a Warning about pod %s/%s", found, pluginNamespace, p.Metadata.Name)
	}
	return found
}

func (k *k8sCluster) setConfig(t *testing.T, text string) time.Time {
	t.Helper()
	patch := map[string]any{"data": map[string]string{pluginConfigMapKey: text}}
	k.mustDo(t, http.MethodPatch, "/api/v1/namespaces/"+pluginNamespace+"/configmaps/"+pluginRelease, "application/merge-patch+json", patch, nil)
	return time.Now()
}

// netnsDir is where this containerd keeps pods' network namespaces: the
// directory of a throw-away pod's.
func (c *cluster) netnsDir(t *testing.T) string {
	t.Helper()
	pod, err := c.runPodErr(PodSpec{Name: "netns-probe", Namespace: "e2e-probe"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.removePod(pod.ID)
	return filepath.Dir(c.podNetnsPath(t, pod.ID))
}

// podNetnsPath is the path of a pod's network namespace, from crictl
// inspectp.
func (c *cluster) podNetnsPath(t *testing.T, podID string) string {
	t.Helper()
	out, err := c.crictlRaw("inspectp", "-o", "json", podID)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	nss, _ := jsonPath(v, "info", "runtimeSpec", "linux", "namespaces")
	list, _ := nss.([]any)
	for _, ns := range list {
		m, _ := ns.(map[string]any)
		if path, _ := m["path"].(string); m["type"] == "network" && path != "" {
			return path
		}
	}
	t.Fatalf("no network namespace path in crictl inspectp:\n%s", out)
	return ""
}

// shareDir makes dir a shared mount of its own: HostToContainer
// propagation needs that, as on a systemd host (/ is shared there); the
// test machine's / is private. The harness unmounts it at teardown.
func shareDir(t *testing.T, dir string) {
	t.Helper()
	if err := unix.Mount(dir, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		t.Fatalf("bind-mount %s: %v", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		t.Fatalf("make %s shared: %v", dir, err)
	}
}

func TestK8sFleet(t *testing.T) {
	if os.Getenv("NRI_SYSCTL_E2E_K8S") == "" {
		t.Skip("the Kubernetes roll-out test runs with make e2e-k8s (NRI_SYSCTL_E2E_K8S=1)")
	}
	c := getCluster(t)
	// The chart's mode for this containerd: spec from 2.3 on; before,
	// auto (namespace mode's privileges, hostPID and five capabilities),
	// with which the plugin chooses namespace mode on this node, as it
	// would on the older nodes of a mixed fleet. mode is what the plugin
	// runs in.
	mode, chartMode := "spec", "spec"
	if major, minor := containerdversion.Parse(c.version); major < 2 || (major == 2 && minor < 3) {
		mode, chartMode = "namespace", "auto"
	}
	chartMode = envOr("NRI_SYSCTL_E2E_K8S_MODE", chartMode)
	if chartMode != "auto" {
		mode = chartMode
	}
	logf("TestK8sFleet: containerd %s, chart mode %s, plugin mode %s", c.version, chartMode, mode)
	archive := filepath.Join(c.repoRoot, "bin", "nri-sysctl-image.tar")
	image := imageName(t, archive)
	repo, tag, _ := strings.Cut(image, ":")
	chart := packagedChart(t, tag)
	testStart := time.Now()
	k := startK8s(t, c)

	// The node registered with the taint.
	if n := k.node(t); !n.hasTaint(notReadyTaint) {
		t.Fatalf("node registered without %s: %+v", notReadyTaint, n.Spec.Taints)
	}
	k.createTestNamespace(t)

	if out, err := c.ctr("images", "import", archive); err != nil {
		t.Fatalf("ctr images import %s: %v\n%s", archive, err, out)
	}

	// A workload created before the plugin is there waits, Pending.
	early := workload{name: "early"}
	k.createWorkload(t, early)
	time.Sleep(10 * time.Second)
	if p, _ := k.pod(t, k8sTestNamespace, early.name); p.Spec.NodeName != "" || p.Status.Phase != "Pending" {
		t.Fatalf("a pod created before the plugin was ready was scheduled: node %q phase %s", p.Spec.NodeName, p.Status.Phase)
	} else {
		logf("early pod before the plugin: %s %+v", p.Status.Phase, p.Status.Conditions)
	}

	// A workload already running when the plugin is installed
	// (here: one that tolerates the taint) gets the defaults without a
	// restart, and later ConfigMap edits.
	running := workload{name: "running-before-install", tolerateNotReady: true}
	k.createWorkload(t, running)
	k.waitPodRunning(t, k8sTestNamespace, running.name, 2*time.Minute)
	runningCtr := c.containerOf(t, k8sTestNamespace, running.name, "app")
	wantSysctls(t, "pod running before helm install", readSysctls(t, runningCtr, sortedKeys(k8sDefaults)...), only(c.kernel, sortedKeys(k8sDefaults)...))
	runningGets := func(t *testing.T, what string, want map[string]string) {
		t.Helper()
		waitUntil(t, 30*time.Second, what, func() (bool, string) {
			got := readSysctls(t, runningCtr, sortedKeys(k8sDefaults)...)
			return mapsEqualOn(got, want, sortedKeys(k8sDefaults)), fmt.Sprintf("%v", got)
		})
		if id := c.containerOf(t, k8sTestNamespace, running.name, "app"); id != runningCtr {
			t.Errorf("%s: its container was replaced (%s, was %s)", what, id, runningCtr)
		}
	}

	metrics := pluginHasMetrics(t, c.pluginBin)
	values := map[string]any{
		// The tag: the packaged chart's default (packagedChart).
		"image":               map[string]any{"repository": repo, "pullPolicy": "Never"},
		"containerd":          map[string]any{"socket": c.grpcSock},
		"nri":                 map[string]any{"socket": c.nriSock},
		"watchConfigInterval": k8sWatchInterval,
		"metrics":             map[string]any{"enabled": metrics},
		"log":                 map[string]any{"level": "debug"},
		// No kube-proxy here: the API server at the bridge's address.
		"extraEnv": []any{
			map[string]string{"name": "KUBERNETES_SERVICE_HOST", "value": k.gateway},
			map[string]string{"name": "KUBERNETES_SERVICE_PORT", "value": strconv.Itoa(k.apiPort)},
		},
		"config": k8sConfig(k8sDefaults),
		"mode":   chartMode,
		// The node's state directory in the test's own; every other
		// value that shapes the plugin (kernelCheck, events) is the
		// chart's default.
		"lastGoodConfigDir": filepath.Join(k.dir, "nri-sysctl-state"),
	}
	// NRI_SYSCTL_E2E_K8S_NODE_POLICY=false installs the chart without its
	// node policy: the token subtest then shows what the ClusterRole alone
	// allows (it must fail).
	if os.Getenv("NRI_SYSCTL_E2E_K8S_NODE_POLICY") == "false" {
		values["nodePolicy"] = map[string]any{"enabled": false}
	}
	// Namespace mode, or converging running pods (the default): the
	// plugin reaches pods' network namespaces.
	netnsDir := c.netnsDir(t)
	values["netnsDir"] = netnsDir
	shareDir(t, netnsDir)
	valuesFile := filepath.Join(k.dir, "values.json")
	data, _ := json.Marshal(values)
	if err := os.WriteFile(valuesFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	h := helmRun{k: k, home: filepath.Join(k.dir, "helm")}
	installStart := time.Now()
	h.run(t, "install", pluginRelease, chart, "-n", pluginNamespace, "--create-namespace", "-f", valuesFile, "--wait", "--timeout", "3m")
	// helm --wait counts a DaemonSet ready when no more than maxUnavailable
	// of its pods are not: on one node, at once.
	k.waitDaemonSet(t)
	logf("plugin ready %s after helm install started (metrics and readiness probe: %v)", time.Since(installStart).Round(time.Millisecond), metrics)

	plugin := k.pluginContainer(t)
	// Everything after needs the taint gone: stop here if it stays.
	if !t.Run("taint removed once ready; the waiting pod starts with the defaults", func(t *testing.T) {
		waited := waitUntil(t, time.Minute, "the taint to go", func() (bool, string) {
			n := k.node(t)
			return !n.hasTaint(notReadyTaint), fmt.Sprintf("%+v", n.Spec.Taints)
		})
		logf("taint gone %s after helm install returned", waited.Round(time.Millisecond))
		k.waitPodRunning(t, k8sTestNamespace, early.name, 2*time.Minute)
		got := readSysctls(t, c.containerOf(t, k8sTestNamespace, early.name, "app"), sortedKeys(k8sDefaults)...)
		wantSysctls(t, "pod created before the plugin was ready", got, k8sDefaults)
		k.deletePod(t, k8sTestNamespace, early.name)
		runningGets(t, "the pod running before helm install converged, without a restart", k8sDefaults)
		if logs := k.pluginLogsAll(t, plugin); !strings.Contains(logs, "removed the not-ready taint") {
			t.Errorf("plugin log does not say it removed the taint:\n%s", logs)
		}
	}) {
		t.FailNow()
	}

	t.Run("new pods get the defaults; hostNetwork pods keep the host's net.*; the pod's own value wins", func(t *testing.T) {
		hostLock.hold(t, false)
		wantSysctls(t, "pod created after the plugin was ready", k.workloadValues(t, workload{name: "after"}), k8sDefaults)

		host := k.workloadValues(t, workload{name: "hostnet", hostNetwork: true})
		wantSysctls(t, "hostNetwork pod", host, map[string]string{
			"net.ipv4.tcp_keepalive_time":  hostSysctl(t, "net.ipv4.tcp_keepalive_time"),
			"net.ipv4.tcp_keepalive_intvl": hostSysctl(t, "net.ipv4.tcp_keepalive_intvl"),
			"kernel.msgmax":                k8sDefaults["kernel.msgmax"],
		})

		own := k.workloadValues(t, workload{name: "own", sysctls: map[string]string{"net.ipv4.tcp_keepalive_time": "900"}})
		wantSysctls(t, "pod with its own tcp_keepalive_time", own, merged(k8sDefaults, map[string]string{"net.ipv4.tcp_keepalive_time": "900"}))
	})

	edited := merged(k8sDefaults, map[string]string{"net.ipv4.tcp_keepalive_time": "500"})
	t.Run("ConfigMap edits reach the next pod", func(t *testing.T) {
		before := strings.Count(k.pluginLogsAll(t, plugin), "config reloaded")
		editAt := k.setConfig(t, k8sConfig(edited))
		took := waitUntil(t, kubeletSyncFrequency+time.Minute, "the plugin to reload the edited ConfigMap", func() (bool, string) {
			return strings.Count(k.pluginLogsAll(t, plugin), "config reloaded") > before, ""
		})
		logf("ConfigMap edit reloaded %s after the API update (kubelet syncFrequency %s, watch %s)", took.Round(time.Millisecond), kubeletSyncFrequency, k8sWatchInterval)
		if limit := 2*kubeletSyncFrequency + 10*time.Second; time.Since(editAt) > limit {
			t.Errorf("the edit took %s to reach the plugin, more than %s", time.Since(editAt), limit)
		}
		wantSysctls(t, "pod created after the edit", k.workloadValues(t, workload{name: "edited"}), edited)
		runningGets(t, "the pod running since before helm install, after the edit", edited)
		k.deletePod(t, k8sTestNamespace, running.name)
	})

	// With the chart's defaults (the kernel check on in both
	// modes, the last good config on the node, Events), an edit the
	// kernel refuses is rejected on the node and seen where operators
	// look; the rejected file stays mounted, and a restarted plugin pod
	// runs on the last good config instead of refusing to start.
	if !t.Run("a refused edit: rejected on the node, an Event and /metrics; a restarted plugin pod runs on the last good config", func(t *testing.T) {
		if !metrics {
			t.Skip("the plugin has no /metrics")
		}
		var refusedKey string
		for key := range k8sRefused {
			refusedKey = key
		}
		phase := time.Now()
		old := k.readyPluginPod(t, "", time.Minute)
		editedInfo := configInfo(k8sConfig(edited), mode)
		before := metricsOf(t, old)
		if before[editedInfo] != 1 {
			t.Fatalf("want %s 1 before the refused edit; have %v", editedInfo, seriesOf(before, "nri_sysctl_config_info"))
		}
		k.setConfig(t, k8sConfig(merged(edited, k8sRefused)))
		waitUntil(t, kubeletSyncFrequency+time.Minute, "the refused edit to be rejected (a failed reload in /metrics)", func() (bool, string) {
			m := metricsOf(t, old)
			return m[reloadFailures] > before[reloadFailures], fmt.Sprint(seriesOf(m, "nri_sysctl_config_reloads_total"))
		})
		if after := metricsOf(t, old); after[editedInfo] != 1 {
			t.Errorf("after the refused edit: want %s 1 (the config in force); have %v", editedInfo, seriesOf(after, "nri_sysctl_config_info"))
		}
		k.waitEvent(t, old, "ConfigRejected", "reload rejected: ", refusedKey)
		wantSysctls(t, "pod created after the refused edit", k.workloadValues(t, workload{name: "refused"}), edited)
		logf("refused edit: rejected, Event, /metrics and a pod's values checked in %s", time.Since(phase).Round(time.Millisecond))

		// A restart of the plugin's pod: the DaemonSet makes a new one,
		// which mounts the still-refused ConfigMap.
		phase = time.Now()
		if data, code, err := k.do(http.MethodDelete, "/api/v1/namespaces/"+pluginNamespace+"/pods/"+old.Metadata.Name, "", nil); err != nil || code != http.StatusOK {
			t.Fatalf("delete plugin pod %s: HTTP %d %v %s", old.Metadata.Name, code, err, data)
		}
		restarted := k.readyPluginPod(t, old.Metadata.UID, 2*time.Minute)
		plugin = k.pluginContainer(t)
		logf("plugin pod %s replaced by %s, ready in %s", old.Metadata.Name, restarted.Metadata.Name, time.Since(phase).Round(time.Millisecond))
		m := metricsOf(t, restarted)
		if m[editedInfo] != 1 || m[reloadFailures] != 1 || m[reloadSuccesses] != 0 {
			t.Errorf("restarted plugin: want %s 1 and one failed reload; have %v %v", editedInfo, seriesOf(m, "nri_sysctl_config_info"), seriesOf(m, "nri_sysctl_config_reloads_total"))
		}
		k.waitEvent(t, restarted, "LastGoodConfig", "config rejected at start, running on the last good config", refusedKey)
		wantSysctls(t, "pod created after the plugin restarted on the last good config", k.workloadValues(t, workload{name: "lastgood"}), edited)
		logf("restart on the last good config: ready, Event, /metrics and a pod's values checked in %s", time.Since(phase).Round(time.Millisecond))

		// The fixed ConfigMap is reloaded by the restarted plugin.
		phase = time.Now()
		k.setConfig(t, k8sConfig(k8sDefaults))
		defaultsInfo := configInfo(k8sConfig(k8sDefaults), mode)
		waitUntil(t, kubeletSyncFrequency+time.Minute, "the restarted plugin to reload the fixed ConfigMap", func() (bool, string) {
			m := metricsOf(t, restarted)
			return m[defaultsInfo] == 1 && m[reloadSuccesses] == 1, fmt.Sprint(seriesOf(m, "nri_sysctl_config"))
		})
		logf("fixed ConfigMap reloaded in %s", time.Since(phase).Round(time.Millisecond))
	}) {
		t.FailNow()
	}

	t.Run("containerd restart: the plugin pod reconnects", func(t *testing.T) {
		logs := k.pluginLogsAll(t, plugin)
		registered := strings.Count(logs, "registered with NRI")
		// Stop containerd by its pid and start it again; the pods' shims
		// and containers keep running, as on a node.
		stopProcess(c.cmd.Process.Pid, c.exited, 15*time.Second)
		if err := c.startContainerd(); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, time.Minute, "the plugin to register again", func() (bool, string) {
			return strings.Count(k.pluginLogsAll(t, plugin), "registered with NRI") > registered, ""
		})
		if id := k.pluginContainer(t); id != plugin {
			t.Errorf("the plugin container was replaced (%s, was %s): it should reconnect by itself", id, plugin)
		}
		wantSysctls(t, "pod created after containerd restarted", k.workloadValues(t, workload{name: "restarted"}), k8sDefaults)
	})

	// The plugin never restarted: it reconnected, and reloaded, by itself.
	var pluginPods struct{ Items []k8sPod }
	k.mustDo(t, http.MethodGet, "/api/v1/namespaces/"+pluginNamespace+"/pods", "", nil, &pluginPods)
	for _, p := range pluginPods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount != 0 {
				t.Errorf("plugin pod %s: container %s restarted %d times:\n%s", p.Metadata.Name, cs.Name, cs.RestartCount, k.pluginLogsAll(t, plugin))
			}
		}
	}
	if logs := k.pluginLogsAll(t, plugin); !strings.Contains(logs, "mode="+mode) {
		t.Errorf("the plugin does not log mode=%s:\n%s", mode, logs)
	}
	peak, rss, cpu := k.usageOf(t, plugin)
	logf("plugin (%s mode) restarted on the last good config, after 3 pods, a reload and a containerd restart: VmHWM %d KiB, VmRSS %d KiB, CPU %s in %s", mode, peak, rss, cpu, time.Since(installStart).Round(time.Second))

	t.Run("the plugin's token may only remove the not-ready taint of its own node, and the plugin's own removal passes", func(t *testing.T) {
		const other = "nri-sysctl-e2e-other"
		k.createFakeNode(t, other)
		pod := k.readyPluginPod(t, "", time.Minute)
		checkPluginTokenRefusals(t, k, pod, k8sNodeName, other)
		checkPluginRemovesTaintUnderPolicy(t, k, pod, k8sNodeName)
		k.readyPluginPod(t, pod.Metadata.UID, 2*time.Minute)
	})
	t.Run("rolling updates: pods started during one, without and with the fail-closed drop-in", func(t *testing.T) {
		testRollingUpdateFailClosed(t, k, h, chart, valuesFile, image)
	})

	t.Run("helm upgrade rolls the plugin; helm uninstall leaves nothing on the node", func(t *testing.T) {
		h.run(t, "upgrade", pluginRelease, chart, "-n", pluginNamespace, "-f", valuesFile, "--set", "log.level=info", "--wait", "--timeout", "3m")
		k.waitDaemonSet(t)
		newPlugin := k.pluginContainer(t)
		if newPlugin == plugin {
			t.Errorf("helm upgrade with a new pod template kept the old plugin container")
		}
		waitUntil(t, time.Minute, "the upgraded plugin to register", func() (bool, string) {
			return strings.Contains(k.pluginLogsAll(t, newPlugin), "registered with NRI"), ""
		})
		wantSysctls(t, "pod created after helm upgrade", k.workloadValues(t, workload{name: "upgraded"}), k8sDefaults)

		h.run(t, "uninstall", pluginRelease, "-n", pluginNamespace, "--wait", "--timeout", "3m")
		for _, path := range []string{
			"/apis/apps/v1/namespaces/" + pluginNamespace + "/daemonsets/" + pluginRelease,
			"/api/v1/namespaces/" + pluginNamespace + "/configmaps/" + pluginRelease,
			"/api/v1/namespaces/" + pluginNamespace + "/serviceaccounts/" + pluginRelease,
			"/apis/rbac.authorization.k8s.io/v1/clusterroles/" + pluginRelease,
			"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/" + pluginRelease,
		} {
			if _, code, _ := k.do(http.MethodGet, path, "", nil); code != http.StatusNotFound {
				t.Errorf("after helm uninstall: GET %s: HTTP %d, want 404", path, code)
			}
		}
		// On the node: no container and, once the kubelet's garbage
		// collection ran, no sandbox of the plugin's pods.
		gone := waitUntil(t, 3*time.Minute, "the plugin's containers and sandboxes to be removed from the node", func() (bool, string) {
			ctrs, err1 := c.crictlRaw("ps", "-a", "-q", "--label", "io.kubernetes.pod.namespace="+pluginNamespace)
			pods, err2 := c.crictlRaw("pods", "-q", "--namespace", pluginNamespace)
			return err1 == nil && err2 == nil && strings.TrimSpace(ctrs) == "" && strings.TrimSpace(pods) == "", "containers: " + ctrs + " sandboxes: " + pods
		})
		logf("node clean %s after helm uninstall", gone.Round(time.Millisecond))
		// No plugin is registered any more: a new pod gets the kernel's values.
		wantSysctls(t, "pod created after helm uninstall", k.workloadValues(t, workload{name: "uninstalled"}), only(c.kernel, "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_keepalive_intvl"))
	})
	logf("TestK8sFleet: %s in all", time.Since(testStart).Round(time.Second))
}
