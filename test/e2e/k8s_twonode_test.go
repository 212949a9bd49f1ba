// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

// A cluster of two nodes on this machine (make e2e-k8s):
// node 1 is the harness's containerd (v2.4.2) with the kubelet of
// k8s_cluster_test.go; node 2 is a second containerd (v2.2.10) and a second
// kubelet, both in a mount namespace of their own. One release of the chart
// names the same hostPaths (the NRI and containerd socket directories, the
// netns directory, the last good config's directory) on every node, so in
// node 2's namespace node 1's paths are bind mounts of node 2's own
// directories. The namespace is held by one process (unshare ... sleep);
// node 2's containerd and kubelet join it with nsenter, which execs them,
// so every process is still stopped by its own pid, and the mounts go with
// the namespace when its last process ends.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/test/internal/ociimage"
)

const (
	node2Name                     = "nri-sysctl-e2e-node2"
	node2Subnet                   = "10.88.78.0/24"
	defaultNode2ContainerdVersion = "v2.2.10"
)

// secondNode is node 2: its containerd (with host-visible paths, for
// crictl and ctr) and its kubelet, in the mount namespace of holder.
type secondNode struct {
	c          *cluster
	holder     *daemon
	kubelet    *daemon
	bridge     string
	gateway    string
	cgroupRoot string
}

// inNamespace runs a command in node 2's mount namespace.
func (n *secondNode) inNamespace(t *testing.T, args ...string) {
	t.Helper()
	full := append([]string{"-t", strconv.Itoa(n.holder.cmd.Process.Pid), "-m", "--"}, args...)
	if out, err := exec.Command("nsenter", full...).CombinedOutput(); err != nil {
		t.Fatalf("in node 2's mount namespace: %s: %v %s", strings.Join(args, " "), err, out)
	}
}

// startSecondNode starts node 2 on containerd version, its config
// importing the shipped fail-closed drop-in. Node 1's directories that
// the chart's hostPaths name are node 2's own in its namespace; shared
// names those of them that pods mount with HostToContainer propagation.
func startSecondNode(t *testing.T, k *k8sCluster, c1 *cluster, version string, shared []string, lastGoodDir string) *secondNode {
	t.Helper()
	start := time.Now()
	c := &cluster{version: version, cacheDir: c1.cacheDir, crictlPath: c1.crictlPath, pluginBin: c1.pluginBin, repoRoot: c1.repoRoot,
		plugins: map[*pluginProc]bool{}, dumpRegistered: map[*testing.T]bool{}, tmp: filepath.Join(c1.tmp, "n2")}
	c.binDir = containerdBinDir(c.cacheDir, version)
	if _, err := os.Stat(filepath.Join(c.binDir, "containerd")); err != nil {
		t.Fatalf("containerd %s is missing: run `sudo test/setup.sh %s` first", version, version)
	}
	if err := c.makeDirs(); err != nil {
		t.Fatal(err)
	}
	n := &secondNode{c: c, bridge: secondBridgeNameFor(os.Getpid()), gateway: strings.TrimSuffix(node2Subnet, "0/24") + "1",
		cgroupRoot: fmt.Sprintf("/nri-sysctl-e2e-%d-node2", os.Getpid())}
	var err error
	if n.holder, err = startDaemon("node2-mount-namespace", k.logDir, "unshare", "--mount", "--propagation", "private", "sleep", "infinity"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.stop(t) })
	self, _ := os.Readlink("/proc/self/ns/mnt")
	waitUntil(t, 10*time.Second, "node 2's mount namespace", func() (bool, string) {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", n.holder.cmd.Process.Pid))
		return err == nil && ns != self, ns
	})
	c.mountNS = n.holder.cmd.Process.Pid

	// Node 1's paths, node 2's directories. containerd keeps pods' netns
	// below its state directory, so node 2's is node 1's path too: NRI
	// then names a pod's netns by the path that the chart's netnsDir
	// mounts.
	node2LastGood := filepath.Join(c.tmp, "nri-sysctl-state")
	overlay := [][2]string{
		{filepath.Dir(c.grpcSock), filepath.Dir(c1.grpcSock)},
		{filepath.Dir(c.nriSock), filepath.Dir(c1.nriSock)},
		{c.state, c1.state},
		{node2LastGood, lastGoodDir},
	}
	for _, dir := range shared {
		rel, err := filepath.Rel(c1.state, dir)
		if err != nil || strings.HasPrefix(rel, "..") {
			t.Fatalf("%s is not below node 1's state directory %s", dir, c1.state)
		}
		if err := os.MkdirAll(filepath.Join(c.state, rel), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The namespace began as a copy of the host's mounts: node 1's shared
	// netns mount is there too, private now, and containerd would find it
	// first below node 2's own.
	for _, dir := range shared {
		n.inNamespace(t, "umount", "--recursive", dir)
	}
	for _, o := range overlay {
		for _, d := range o {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		n.inNamespace(t, "mount", "--bind", o[0], o[1])
	}
	for _, dir := range shared {
		n.inNamespace(t, "mount", "--bind", dir, dir)
		n.inNamespace(t, "mount", "--make-shared", dir)
	}

	// containerd's config names node 1's paths (its own, in its namespace).
	host := [3]string{c.state, c.grpcSock, c.nriSock}
	c.state, c.grpcSock, c.nriSock = c1.state, c1.grpcSock, c1.nriSock
	c.imports = []string{failClosedDropIn(c)}
	cfg := containerdConfig(c)
	c.state, c.grpcSock, c.nriSock = host[0], host[1], host[2]
	if err := os.WriteFile(c.configPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	upBridge(t, n.bridge, n.gateway)
	if err := os.WriteFile(filepath.Join(c.cniConfDir, "10-nri-sysctl-e2e.conflist"), []byte(k8sCNIConfig(c, n.bridge, node2Subnet, n.gateway)), 0o644); err != nil {
		t.Fatal(err)
	}
	c.crictlConfig = filepath.Join(c.tmp, "crictl.yaml")
	if err := os.WriteFile(c.crictlConfig, []byte(fmt.Sprintf("runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 60\n", c.grpcSock, c.grpcSock)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.startContainerd(); err != nil {
		t.Fatal(err)
	}
	logf("node 2: containerd %s (pid %d) in mount namespace of pid %d, log %s", version, c.cmd.Process.Pid, c.mountNS, c.logPath)
	archive := filepath.Join(c.workDir, "images.tar")
	if err := ociimage.WriteArchive(archive, ociimage.TestImages); err != nil {
		t.Fatal(err)
	}
	if out, err := c.ctr("images", "import", "--platform", "linux/"+goarch(), archive); err != nil {
		t.Fatalf("node 2: import test images: %v\n%s", err, out)
	}
	if got := c.netnsDir(t); len(shared) > 0 && got != shared[0] {
		t.Fatalf("node 2's containerd keeps pods' netns in %s, want %s (node 1's path)", got, shared[0])
	}

	healthz, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet wants its cgroup root in every hierarchy before it
	// starts; cpuset's needs its CPUs and memory nodes.
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, n.cgroupRoot)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				if data, err := os.ReadFile(filepath.Join(h, f)); err == nil {
					_ = os.WriteFile(filepath.Join(dir, f), data, 0o644)
				}
			}
		}
	}
	kubeletDir := filepath.Join(c.tmp, "k8s")
	if err := os.MkdirAll(kubeletDir, 0o755); err != nil {
		t.Fatal(err)
	}
	n.kubelet = k.startKubelet(t, kubeletSpec{node: node2Name, nodeIP: n.gateway, endpoint: c.grpcSock, dir: kubeletDir,
		healthzPort: healthz, cgroupRoot: n.cgroupRoot, mountNS: c.mountNS})
	k.waitNodeReady(t, node2Name, n.kubelet, 3*time.Minute)
	logf("node 2 (%s, containerd %s) Ready after %s", node2Name, version, time.Since(start).Round(time.Millisecond))
	return n
}

// stop stops node 2's kubelet, its pods and containerd, each by its pid,
// then the namespace's holder: the namespace and its mounts go with it.
func (n *secondNode) stop(t *testing.T) {
	if t.Failed() && n.c.cmd != nil {
		t.Logf("--- node 2's containerd, last 40 lines of %s ---\n%s", n.c.logPath, n.c.containerdLogTail(40))
	}
	if n.kubelet != nil {
		n.kubelet.stop()
	}
	if n.c.cmd != nil {
		select {
		case <-n.c.exited:
			logf("node 2's containerd had exited: %v", n.c.waitErr)
		default:
			n.c.removeAllPods()
			stopProcess(n.c.cmd.Process.Pid, n.c.exited, 15*time.Second)
		}
	}
	releaseDir(n.c.tmp)
	n.holder.stop()
	if exec.Command("ip", "link", "show", n.bridge).Run() == nil {
		if out, err := exec.Command("ip", "link", "del", n.bridge).CombinedOutput(); err != nil {
			logf("ip link del %s: %v %s", n.bridge, err, out)
		}
	}
	removeCgroupTree(n.cgroupRoot)
}

// removeCgroupTree removes the cgroup root in every hierarchy, with what
// the kubelet and runc made below it, deepest first.
func removeCgroupTree(root string) {
	for _, h := range cgroupHierarchies() {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, root), func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil {
				logf("remove cgroup %s: %v", dirs[i], err)
			}
		}
	}
}

// cgroupHierarchies are the mounted cgroup hierarchies (v1's, and the
// unified one).
func cgroupHierarchies() []string {
	var out []string
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range entries {
		if e.IsDir() && fileExists(filepath.Join("/sys/fs/cgroup", e.Name(), "cgroup.procs")) {
			out = append(out, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	if fileExists("/sys/fs/cgroup/cgroup.procs") {
		out = append(out, "/sys/fs/cgroup")
	}
	return out
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// k8sNodeOf pairs a node's name with its containerd.
type k8sNodeOf struct {
	name  string
	short string // for pod names
	c     *cluster
}

// pluginPodOn is the plugin's pod on the node (found is false if none),
// and whether it is ready.
func (k *k8sCluster) pluginPodOn(t *testing.T, node string) (p k8sPod, found, ready bool) {
	t.Helper()
	var pods struct{ Items []k8sPod }
	q := url.Values{"fieldSelector": {"spec.nodeName=" + node}}
	k.mustDo(t, http.MethodGet, "/api/v1/namespaces/"+pluginNamespace+"/pods?"+q.Encode(), "", nil, &pods)
	if len(pods.Items) == 0 {
		return k8sPod{}, false, false
	}
	p = pods.Items[0]
	ready = p.Status.Phase == "Running"
	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" && c.Status != "True" {
			ready = false
		}
	}
	return p, true, ready
}

func (k *k8sCluster) waitPluginReadyOn(t *testing.T, node string, timeout time.Duration) k8sPod {
	t.Helper()
	var p k8sPod
	waitUntil(t, timeout, "the plugin's pod on "+node+" ready", func() (bool, string) {
		var found, ready bool
		p, found, ready = k.pluginPodOn(t, node)
		return found && ready, fmt.Sprintf("found %v: %s %+v", found, p.Status.Phase, p.Status.Conditions)
	})
	return p
}

// valuesOn runs a pod on the node, reads keys inside its container
// through that node's containerd, and deletes the pod.
func (k *k8sCluster) valuesOn(t *testing.T, n k8sNodeOf, name string, keys ...string) map[string]string {
	t.Helper()
	k.createWorkload(t, workload{name: name, node: n.name})
	k.waitPodRunning(t, k8sTestNamespace, name, 2*time.Minute)
	vals, err := n.c.readSysctlsErr(n.c.containerOf(t, k8sTestNamespace, name, "app"), keys...)
	if err != nil {
		t.Fatal(err)
	}
	k.deletePod(t, k8sTestNamespace, name)
	return vals
}

func TestK8sTwoNodes(t *testing.T) {
	if os.Getenv("NRI_SYSCTL_E2E_K8S") == "" {
		t.Skip("the two-node Kubernetes test runs with make e2e-k8s (NRI_SYSCTL_E2E_K8S=1)")
	}
	testStart := time.Now()
	c := getCluster(t)
	version2 := envOr("NRI_SYSCTL_E2E_NODE2_CONTAINERD_VERSION", defaultNode2ContainerdVersion)
	logf("TestK8sTwoNodes: node 1 on containerd %s, node 2 on %s, one release in mode auto", c.version, version2)
	archive := filepath.Join(c.repoRoot, "bin", "nri-sysctl-image.tar")
	image := imageName(t, archive)
	_, tag, _ := strings.Cut(image, ":")
	chart := packagedChart(t, tag)

	netnsDir := c.netnsDir(t)
	shareDir(t, netnsDir)
	// Fail closed on both nodes from the start, with the shipped drop-in:
	// no container but the plugin's own (the chart's annotation) starts
	// while a node's plugin is not registered.
	c.imports = []string{failClosedDropIn(c)}
	restartContainerdFor(t, "", func() { c.imports = nil })
	k := startK8s(t, c)
	lastGoodDir := filepath.Join(k.dir, "nri-sysctl-state")
	n2 := startSecondNode(t, k, c, version2, []string{netnsDir}, lastGoodDir)
	nodes := []k8sNodeOf{{k8sNodeName, "n1", c}, {node2Name, "n2", n2.c}}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, n := range nodes {
			out, _ := n.c.crictlRaw("ps", "-a", "-q", "--label", "io.kubernetes.pod.namespace="+pluginNamespace)
			for _, id := range strings.Fields(out) {
				cmd := exec.Command(n.c.crictlPath, "--runtime-endpoint", "unix://"+n.c.grpcSock, "logs", "--tail", "30", id)
				cmd.Env = append(os.Environ(), "CRI_CONFIG_FILE="+n.c.crictlConfig)
				logs, _ := cmd.CombinedOutput()
				t.Logf("--- plugin container %s on %s, last 30 lines ---\n%s", id, n.name, logs)
			}
		}
	})
	for _, n := range nodes {
		if !k.nodeNamed(t, n.name).hasTaint(notReadyTaint) {
			t.Fatalf("node %s registered without %s", n.name, notReadyTaint)
		}
	}
	logf("two nodes Ready, both with %s, %s after the test started", notReadyTaint, time.Since(testStart).Round(time.Millisecond))

	k.createTestNamespace(t)
	h := helmRun{k: k, home: filepath.Join(k.dir, "helm")}
	// The image and the chart come from a registry, as on a cluster: make
	// publish's script pushes them, the nodes pull the image by the
	// chart's default tag (the chart's pullPolicy, IfNotPresent), and
	// helm installs the chart from oci://. Node 2 reaches the registry
	// through a path of its own (a second registry process on the same
	// storage) that is down until later: its plugin cannot start, and so
	// cannot be ready, until then.
	reg := startRegistry(t, k)
	releaseKey, releasePub := cosignKeyPair(t, k, "release")
	_, otherPub := cosignKeyPair(t, k, "other")
	chartRef, chartVersion := reg.publish(t, h, archive, chart, tag, releaseKey)
	// Verified before installing, as a user would: with the release's
	// key, both signatures; with another key, neither.
	attested := filepath.Join(k.dir, "sbom-attested")
	if out, err := reg.verify(h, tag, chartVersion, releasePub, attested); err != nil {
		t.Fatalf("hack/verify-published.sh with the release's key: %v\n%s", err, out)
	} else {
		var said []string
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "verify-published: ") {
				said = append(said, line)
			}
		}
		logf("verified with only loopback: %s", strings.Join(said, "; "))
	}
	reg.checkAttestedSBOMs(t, k, tag, attested)
	// Another key: each part refused on its own (the image, the chart,
	// each platform's attestation).
	if out, err := reg.verify(h, tag, chartVersion, otherPub, filepath.Join(k.dir, "sbom-other")); err == nil ||
		strings.Count(out, ": no signature by "+otherPub) != 2 || strings.Count(out, ": no SBOM attestation by "+otherPub) != 2 {
		t.Fatalf("hack/verify-published.sh with another key: want the image, the chart and both attestations refused, got %v\n%s", err, out)
	}
	// The release directory's SHA256SUMS, signed as make release signs it.
	reg.checkSignedSums(t, h, releaseKey, releasePub, otherPub, archive, chart)
	regRepo := reg.addr + "/nri-sysctl"
	indexDigest := reg.indexDigest(t, k, "nri-sysctl:"+tag)
	node2Down := refusingListener(t)
	node2Path := node2Down.Addr().String()
	pullFrom(t, c, reg.addr, reg.addr)
	pullFrom(t, n2.c, reg.addr, node2Path)
	values := map[string]any{
		// The tag: the packaged chart's default (packagedChart).
		"image":               map[string]any{"repository": regRepo},
		"containerd":          map[string]any{"socket": c.grpcSock},
		"nri":                 map[string]any{"socket": c.nriSock},
		"netnsDir":            netnsDir,
		"lastGoodConfigDir":   lastGoodDir,
		"watchConfigInterval": k8sWatchInterval,
		"extraEnv": []any{
			map[string]string{"name": "KUBERNETES_SERVICE_HOST", "value": k.gateway},
			map[string]string{"name": "KUBERNETES_SERVICE_PORT", "value": strconv.Itoa(k.apiPort)},
		},
		"config": k8sConfig(k8sDefaults),
		"mode":   "auto",
	}
	// As in TestK8sFleet: NRI_SYSCTL_E2E_K8S_NODE_POLICY=false installs the
	// chart without its node policy, and the token subtest must fail.
	if os.Getenv("NRI_SYSCTL_E2E_K8S_NODE_POLICY") == "false" {
		values["nodePolicy"] = map[string]any{"enabled": false}
	}
	valuesFile := filepath.Join(k.dir, "values.json")
	data, _ := json.Marshal(values)
	if err := os.WriteFile(valuesFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	keys := sortedKeys(k8sDefaults)
	// What each node's plugin chooses under mode auto.
	modeOf := map[string]string{k8sNodeName: "spec", node2Name: "namespace"}

	if !t.Run("the DaemonSet runs on both nodes; each plugin removes only its own node's taint", func(t *testing.T) {
		hostLock.hold(t, false)
		installStart := time.Now()
		h.run(t, append(append([]string{"install", pluginRelease}, chartRef...), "-n", pluginNamespace, "--create-namespace", "-f", valuesFile)...)
		k.waitPluginReadyOn(t, k8sNodeName, 3*time.Minute)
		waitUntil(t, time.Minute, "node 1's taint to go", func() (bool, string) {
			n := k.node(t)
			return !n.hasTaint(notReadyTaint), fmt.Sprintf("%+v", n.Spec.Taints)
		})
		logf("node 1: plugin ready and taint gone %s after helm install", time.Since(installStart).Round(time.Millisecond))
		// Node 1's plugin is ready and has the API: for 15 s more, node 2
		// keeps its taint while its own plugin is not ready.
		for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
			p, found, ready := k.pluginPodOn(t, node2Name)
			if !found || ready {
				t.Fatalf("node 2's plugin pod: found %v ready %v, want one that cannot start (node 2's registry path is down)", found, ready)
			}
			if n := k.nodeNamed(t, node2Name); !n.hasTaint(notReadyTaint) {
				t.Fatalf("node 2 lost its taint while its plugin pod %s was not ready (%s): %+v", p.Metadata.Name, p.Status.Phase, n.Spec.Taints)
			}
		}
		node2Down.Close()
		reg.serve(t, k, "registry-node2", node2Path)
		imported := time.Now()
		k.waitPluginReadyOn(t, node2Name, 3*time.Minute)
		waitUntil(t, time.Minute, "node 2's taint to go", func() (bool, string) {
			n := k.nodeNamed(t, node2Name)
			return !n.hasTaint(notReadyTaint), fmt.Sprintf("%+v", n.Spec.Taints)
		})
		logf("node 2: plugin ready and taint gone %s after its registry path came up (the kubelet's pull back-off)", time.Since(imported).Round(time.Millisecond))
		k.waitDaemonSetOn(t, 2)
		for _, n := range nodes {
			checkPulledImage(t, n.name, n.c, regRepo, tag, indexDigest)
		}
		for _, n := range nodes {
			p, _, _ := k.pluginPodOn(t, n.name)
			m := metricsOf(t, p)
			if info := configInfo(k8sConfig(k8sDefaults), modeOf[n.name]); m[info] != 1 {
				t.Errorf("node %s: want %s 1 (mode auto chooses %s mode there); have %v", n.name, info, modeOf[n.name], seriesOf(m, "nri_sysctl_config_info"))
			}
			wantSysctls(t, "pod on "+n.name, k.valuesOn(t, n, "first-"+n.short, keys...), k8sDefaults)
			// A hostNetwork pod keeps the host's net.*; the pod's own value wins.
			k.createWorkload(t, workload{name: "hostnet-" + n.short, node: n.name, hostNetwork: true})
			k.createWorkload(t, workload{name: "own-" + n.short, node: n.name, sysctls: map[string]string{"net.ipv4.tcp_keepalive_time": "900"}})
			for name, want := range map[string]map[string]string{
				"hostnet-" + n.short: {
					"net.ipv4.tcp_keepalive_time":  hostSysctl(t, "net.ipv4.tcp_keepalive_time"),
					"net.ipv4.tcp_keepalive_intvl": hostSysctl(t, "net.ipv4.tcp_keepalive_intvl"),
					"kernel.msgmax":                k8sDefaults["kernel.msgmax"],
				},
				"own-" + n.short: merged(k8sDefaults, map[string]string{"net.ipv4.tcp_keepalive_time": "900"}),
			} {
				k.waitPodRunning(t, k8sTestNamespace, name, 2*time.Minute)
				id := n.c.containerOf(t, k8sTestNamespace, name, "app")
				got, err := n.c.readSysctlsErr(id, keys...)
				if err != nil {
					t.Fatal(err)
				}
				wantSysctls(t, "pod "+name, got, want)
				if n.c == n2.c {
					out, err := n.c.crictlRaw("inspect", "-o", "json", id)
					var v map[string]any
					if err == nil {
						err = json.Unmarshal([]byte(out), &v)
					}
					path, _ := jsonPath(v, "info", "runtimeSpec", "linux", "cgroupsPath")
					if p, _ := path.(string); err != nil || !strings.HasPrefix(p, n2.cgroupRoot+"/") {
						t.Errorf("pod %s on node 2: cgroupsPath %v, want one below %s (%v)", name, path, n2.cgroupRoot, err)
					}
				}
				k.deletePod(t, k8sTestNamespace, name)
			}
		}
	}) {
		t.FailNow()
	}

	t.Run("each plugin's token cannot patch the other node, or another field of its own; it can remove its own taint", func(t *testing.T) {
		// checkPluginTokenRefusals (k8s_fleetpolicy_test.go) against the
		// real other node, from each side.
		for _, pair := range [][2]string{{k8sNodeName, node2Name}, {node2Name, k8sNodeName}} {
			t.Run("the token of the plugin on "+pair[0], func(t *testing.T) {
				p, _, _ := k.pluginPodOn(t, pair[0])
				checkPluginTokenRefusals(t, k, p, pair[0], pair[1])
			})
		}
	})

	t.Run("a refused ConfigMap edit is rejected on both nodes: old values for new pods, a failed reload and an Event on each", func(t *testing.T) {
		refused := merged(k8sDefaults, map[string]string{"net.ipv4.tcp_keepalive_probes": "abc"})
		before := map[string]map[string]float64{}
		pods := map[string]k8sPod{}
		for _, n := range nodes {
			p, _, _ := k.pluginPodOn(t, n.name)
			pods[n.name] = p
			before[n.name] = metricsOf(t, p)
		}
		k.setConfig(t, k8sConfig(refused))
		for _, n := range nodes {
			p := pods[n.name]
			waitUntil(t, kubeletSyncFrequency+time.Minute, n.name+": the refused edit rejected (a failed reload in /metrics)", func() (bool, string) {
				m := metricsOf(t, p)
				return m[reloadFailures] > before[n.name][reloadFailures], fmt.Sprint(seriesOf(m, "nri_sysctl_config_reloads_total"))
			})
			if m := metricsOf(t, p); m[configInfo(k8sConfig(k8sDefaults), modeOf[n.name])] != 1 {
				t.Errorf("%s: after the refused edit, the config in force is not the old one: %v", n.name, seriesOf(m, "nri_sysctl_config_info"))
			}
			k.waitEvent(t, p, "ConfigRejected", "reload rejected: ", "net.ipv4.tcp_keepalive_probes")
			wantSysctls(t, "pod on "+n.name+" after the refused edit", k.valuesOn(t, n, "refused-"+n.short, append(keys, "net.ipv4.tcp_keepalive_probes")...),
				merged(k8sDefaults, map[string]string{"net.ipv4.tcp_keepalive_probes": c.kernel["net.ipv4.tcp_keepalive_probes"]}))
		}
		k.setConfig(t, k8sConfig(k8sDefaults))
		for _, n := range nodes {
			p := pods[n.name]
			waitUntil(t, kubeletSyncFrequency+time.Minute, n.name+": the fixed ConfigMap reloaded", func() (bool, string) {
				m := metricsOf(t, p)
				return m[reloadSuccesses] > before[n.name][reloadSuccesses], fmt.Sprint(seriesOf(m, "nri_sysctl_config_reloads_total"))
			})
		}
	})

	t.Run("inheritFromHost gives the host's value on both nodes", func(t *testing.T) {
		hostLock.hold(t, true)
		const key = "net.ipv4.tcp_keepalive_probes"
		kernelDefault := c.kernel[key]
		hostValue := "7"
		if kernelDefault == hostValue {
			hostValue = "8"
		}
		old := hostSysctl(t, key)
		path := filepath.Join("/proc/sys", sysctlPath(key))
		if err := os.WriteFile(path, []byte(hostValue), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
				t.Errorf("restore the host's %s to %s: %v", key, old, err)
			}
		})
		before := map[string]float64{}
		pods := map[string]k8sPod{}
		for _, n := range nodes {
			p, _, _ := k.pluginPodOn(t, n.name)
			pods[n.name] = p
			before[n.name] = metricsOf(t, p)[reloadSuccesses]
		}
		k.setConfig(t, k8sConfig(k8sDefaults)+"inheritFromHost:\n  - "+key+"\n")
		for _, n := range nodes {
			p := pods[n.name]
			waitUntil(t, kubeletSyncFrequency+time.Minute, n.name+": the inheritFromHost edit reloaded", func() (bool, string) {
				m := metricsOf(t, p)
				return m[reloadSuccesses] > before[n.name], fmt.Sprint(seriesOf(m, "nri_sysctl_config_reloads_total"))
			})
			got := k.valuesOn(t, n, "inherit-"+n.short, append(keys, key)...)
			wantSysctls(t, fmt.Sprintf("pod on %s, host's %s %s (kernel default %s)", n.name, key, hostValue, kernelDefault), got, merged(k8sDefaults, map[string]string{key: hostValue}))
		}
		k.setConfig(t, k8sConfig(k8sDefaults))
		for _, n := range nodes {
			p := pods[n.name]
			waitUntil(t, kubeletSyncFrequency+time.Minute, n.name+": the config without inheritFromHost reloaded", func() (bool, string) {
				m := metricsOf(t, p)
				return m[configInfo(k8sConfig(k8sDefaults), modeOf[n.name])] == 1, fmt.Sprint(seriesOf(m, "nri_sysctl_config_info"))
			})
		}
	})

	t.Run("helm upgrade to a new image tag rolls through both nodes; pods started during it get their defaults or wait, never nothing", func(t *testing.T) {
		newTag := tag + "-rolled"
		// A new tag in the registry, which both nodes pull.
		reg.tag(t, k, "nri-sysctl:"+tag, newTag)
		old := map[string]string{}
		for _, n := range nodes {
			p, _, _ := k.pluginPodOn(t, n.name)
			old[n.name] = p.Metadata.UID
		}
		// Pods on both nodes, one a second on each, while the upgrade runs.
		var (
			mu      sync.Mutex
			created []workload
			stop    = make(chan struct{})
			done    = make(chan struct{})
		)
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				for _, n := range nodes {
					w := workload{name: fmt.Sprintf("roll-%d-%s", i, n.short), node: n.name}
					body := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": w.name, "namespace": k8sTestNamespace},
						"spec": map[string]any{"nodeName": w.node, "terminationGracePeriodSeconds": 1, "automountServiceAccountToken": false, "enableServiceLinks": false,
							"containers": []any{map[string]any{"name": "app", "image": busyboxImage, "imagePullPolicy": "Never", "command": []string{"sleep", "3600"}}}}}
					if _, code, err := k.do(http.MethodPost, "/api/v1/namespaces/"+k8sTestNamespace+"/pods", "", body); err == nil && code == http.StatusCreated {
						mu.Lock()
						created = append(created, w)
						mu.Unlock()
					}
				}
				select {
				case <-stop:
					return
				case <-time.After(time.Second):
				}
			}
		}()
		upgradeStart := time.Now()
		h.run(t, append(append([]string{"upgrade", pluginRelease}, chartRef...), "-n", pluginNamespace, "-f", valuesFile, "--set", "image.tag="+newTag)...)
		waitUntil(t, 4*time.Minute, "both nodes' plugin pods replaced by ready ones with the new tag", func() (bool, string) {
			var seen []string
			all := true
			for _, n := range nodes {
				p, found, ready := k.pluginPodOn(t, n.name)
				seen = append(seen, fmt.Sprintf("%s: %s ready=%v", n.name, p.Metadata.Name, ready))
				all = all && found && ready && p.Metadata.UID != old[n.name]
			}
			return all, strings.Join(seen, ", ")
		})
		k.waitDaemonSetOn(t, 2)
		for _, n := range nodes {
			checkPulledImage(t, n.name, n.c, regRepo, newTag, indexDigest)
		}
		// A few more pods after the roll.
		time.Sleep(3 * time.Second)
		close(stop)
		<-done
		logf("helm upgrade rolled both nodes in %s; %d pods created during it", time.Since(upgradeStart).Round(time.Millisecond), len(created))
		if len(created) < 4 {
			t.Fatalf("only %d pods created during the upgrade", len(created))
		}
		byName := map[string]*cluster{k8sNodeName: c, node2Name: n2.c}
		refusedFirst, refusedByLeaving := map[string]int{}, map[string]int{}
		for _, w := range created {
			p := k.waitPodRunning(t, k8sTestNamespace, w.name, 3*time.Minute)
			node := byName[w.node]
			id := node.containerOf(t, k8sTestNamespace, w.name, "app")
			got, err := node.readSysctlsErr(id, keys...)
			if err != nil {
				t.Fatal(err)
			}
			what := fmt.Sprintf("pod %s on %s, started during the upgrade", w.name, w.node)
			if !wantSysctls(t, what, got, k8sDefaults) {
				t.Logf("%s lacks its defaults. Why, as far as the node can tell:\n%s", what, node.whyLacking(t, id))
			}
			refusals := k.podRefusals(t, p.Metadata.Name)
			if refusals[refusedNoPlugin] {
				refusedFirst[w.node]++
			}
			if refusals[refusedLeaving] {
				refusedByLeaving[w.node]++
			}
			k.deletePod(t, k8sTestNamespace, w.name)
		}
		logf("upgrade: %d pods started during it, every one with the defaults; refused by containerd first (no plugin registered), then started: %v; refused by the plugin as it stopped, then started: %v", len(created), refusedFirst, refusedByLeaving)
		// Each node was without its plugin for a while, and containerd
		// refused the pods created then: otherwise the window was missed.
		for _, n := range nodes {
			if refusedFirst[n.name] == 0 {
				t.Errorf("no pod on %s was refused while its plugin was away: the update's window there was not hit", n.name)
			}
		}
	})

	// With configRollout: staged an edit reaches one node
	// after the other, as the rolling update replaces each plugin: node by
	// node, running pods converge when their node's new plugin starts.
	t.Run("a staged edit converges one node's running pods while the other's keep the old values, then the other's", func(t *testing.T) {
		byName := map[string]*cluster{k8sNodeName: c, node2Name: n2.c}
		running := map[string]string{} // node -> the running pod's container
		for _, n := range nodes {
			w := workload{name: "staged-" + n.short, node: n.name}
			k.createWorkload(t, w)
			k.waitPodRunning(t, k8sTestNamespace, w.name, 2*time.Minute)
			running[n.name] = byName[n.name].containerOf(t, k8sTestNamespace, w.name, "app")
			defer k.deletePod(t, k8sTestNamespace, w.name)
		}
		read := func(node string) map[string]string {
			got, err := byName[node].readSysctlsErr(running[node], keys...)
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		for _, n := range nodes {
			wantSysctls(t, "running pod on "+n.name+" before the staged edit", read(n.name), k8sDefaults)
		}
		edited := merged(k8sDefaults, map[string]string{"net.ipv4.tcp_keepalive_time": "480"})
		staged := filepath.Join(k.dir, "staged.json")
		data, _ := json.Marshal(map[string]any{"configRollout": "staged", "minReadySeconds": 20, "config": k8sConfig(edited)})
		if err := os.WriteFile(staged, data, 0o600); err != nil {
			t.Fatal(err)
		}
		editStart := time.Now()
		h.run(t, "upgrade", pluginRelease, chart, "-n", pluginNamespace, "--reuse-values", "-f", staged)
		var first, second string
		waitUntil(t, 3*time.Minute, "one node's running pod to converge to the staged edit", func() (bool, string) {
			for _, n := range nodes {
				if mapsEqualOn(read(n.name), edited, keys) {
					first = n.name
					return true, ""
				}
			}
			return false, fmt.Sprintf("%v", running)
		})
		for _, n := range nodes {
			if n.name != first {
				second = n.name
			}
		}
		firstAt := time.Since(editStart)
		wantSysctls(t, "running pod on "+second+" while "+first+" has the staged edit", read(second), k8sDefaults)
		waitUntil(t, 3*time.Minute, "the other node's running pod to converge", func() (bool, string) {
			got := read(second)
			return mapsEqualOn(got, edited, keys), fmt.Sprintf("%v", got)
		})
		logf("staged edit: %s's running pod converged %s after helm upgrade, %s's %s after (minReadySeconds 20)", first, firstAt.Round(time.Millisecond), second, time.Since(editStart).Round(time.Millisecond))
		wantSysctls(t, "running pod on "+first+" after the roll", read(first), edited)
	})
	logf("TestK8sTwoNodes: %s in all", time.Since(testStart).Round(time.Second))
}
