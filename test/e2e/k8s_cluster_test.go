// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

// A single-node Kubernetes for the e2e-k8s test (make e2e-k8s): etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler and a kubelet on
// the harness's containerd, all built by `test/setup.sh --k8s` from the Go
// module proxy, with certificates made by k8s_pki_test.go. Everything lives
// below the harness's temporary directory and every process is stopped by
// its pid.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	defaultK8sVersion  = "v1.37.2"
	defaultEtcdVersion = "v3.7.3"
	defaultHelmVersion = "v3.22.0"
	k8sNodeName        = "nri-sysctl-e2e-node"
	// The node registers with this taint (kubelet --register-with-taints);
	// the plugin removes it.
	notReadyTaint = "nri-sysctl.io/not-ready:NoSchedule"
	// The kubelet's sync period: a ConfigMap edit reaches the pod's
	// volume at its next sync.
	kubeletSyncFrequency = 5 * time.Second
	serviceCIDR          = "10.96.0.0/24"
)

// k8sBinaries finds the cluster's binaries in the cache (test/setup.sh --k8s).
func k8sBinaries(cache string) (map[string]string, error) {
	k8s := envOr("NRI_SYSCTL_K8S_VERSION", defaultK8sVersion)
	bins := map[string]string{
		"etcd": filepath.Join(cache, "etcd-"+envOr("NRI_SYSCTL_ETCD_VERSION", defaultEtcdVersion), "bin", "etcd"),
		"helm": filepath.Join(cache, "helm-"+envOr("NRI_SYSCTL_HELM_VERSION", defaultHelmVersion), "bin", "helm"),
		// The two-node test's registry, crane, which pushes to it, and
		// cosign, which signs there and verifies.
		"registry": filepath.Join(cache, "registry-"+envOr("NRI_SYSCTL_REGISTRY_VERSION", defaultRegistryVersion)+"-filesystem", "bin", "registry"),
		"crane":    filepath.Join(cache, "crane-"+envOr("NRI_SYSCTL_CRANE_VERSION", defaultCraneVersion), "bin", "crane"),
		"cosign":   filepath.Join(cache, "cosign-"+envOr("NRI_SYSCTL_COSIGN_VERSION", defaultCosignVersion), "bin", "cosign"),
	}
	for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"} {
		bins[name] = filepath.Join(cache, "kubernetes-"+k8s, "bin", name)
	}
	for name, p := range bins {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%s is missing (%s): run `sudo test/setup.sh --k8s` first", name, p)
		}
	}
	return bins, nil
}

// daemon is one process of the cluster, logging to a file.
type daemon struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	err     error
}

func startDaemon(name, logDir, bin string, args ...string) (*daemon, error) {
	d := &daemon{name: name, logPath: filepath.Join(logDir, name+".log"), exited: make(chan struct{})}
	f, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	d.cmd = exec.Command(bin, args...)
	d.cmd.Stdout, d.cmd.Stderr = f, f
	// If the test binary dies, the cluster goes with it.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		d.err = d.cmd.Wait()
		f.Close()
		close(d.exited)
	}()
	logf("%s started (pid %d), log %s", name, d.cmd.Process.Pid, d.logPath)
	return d, nil
}

func (d *daemon) running() bool {
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

func (d *daemon) stop() {
	if d.running() {
		stopProcess(d.cmd.Process.Pid, d.exited, 20*time.Second)
	}
}

// k8sCluster is the control plane and the kubelet.
type k8sCluster struct {
	c       *cluster
	bins    map[string]string
	dir     string
	logDir  string
	pki     *pki
	gateway string // the bridge's address: the API server's, and the node's
	apiPort int
	server  string
	admin   string // admin kubeconfig
	api     *http.Client
	daemons []*daemon // in start order
	kubelet *daemon
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// k8sCNIConfig is the harness's bridge with a gateway address: pods reach
// the API server on it, and the kubelet reaches pods (probes). The default
// route through it lets node 2's pods reach the API server on node 1's
// bridge (the host routes between the two).
func k8sCNIConfig(c *cluster, bridge, subnet, gateway string) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "nri-sysctl-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": false,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q, "gateway": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "loopback"}
  ]
}
`, bridge, c.cniDataDir, subnet, gateway)
}

// upBridge makes the bridge with the gateway address (a /24) before
// anything listens on it or a pod is attached.
func upBridge(t *testing.T, bridge, gateway string) {
	t.Helper()
	if exec.Command("ip", "link", "show", bridge).Run() != nil {
		if out, err := exec.Command("ip", "link", "add", bridge, "type", "bridge").CombinedOutput(); err != nil {
			t.Fatalf("ip link add %s: %v %s", bridge, err, out)
		}
	}
	for _, args := range [][]string{{"addr", "replace", gateway + "/24", "dev", bridge}, {"link", "set", bridge, "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v %s", strings.Join(args, " "), err, out)
		}
	}
}

// startK8s brings the cluster up on the harness's containerd and stops it
// when the test ends. The node registers with the not-ready taint.
func startK8s(t *testing.T, c *cluster) *k8sCluster {
	t.Helper()
	bins, err := k8sBinaries(c.cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	k := &k8sCluster{c: c, bins: bins, dir: filepath.Join(c.tmp, "k8s"), gateway: strings.TrimSuffix(cniSubnet, "0/24") + "1"}
	k.logDir = filepath.Join(k.dir, "log")
	if err := os.MkdirAll(k.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			k.dumpLogs(t)
		}
		k.stop()
	})
	start := time.Now()

	// The bridge with the gateway address before anything listens on it.
	upBridge(t, cniBridgeName, k.gateway)
	if err := os.WriteFile(filepath.Join(c.cniConfDir, "10-nri-sysctl-e2e.conflist"), []byte(k8sCNIConfig(c, cniBridgeName, cniSubnet, k.gateway)), 0o644); err != nil {
		t.Fatal(err)
	}

	if k.pki, err = newPKI(filepath.Join(k.dir, "pki")); err != nil {
		t.Fatal(err)
	}
	etcdClient, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	etcdPeer, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	if k.apiPort, err = freePort(); err != nil {
		t.Fatal(err)
	}
	k.server = fmt.Sprintf("https://%s", net.JoinHostPort(k.gateway, fmt.Sprint(k.apiPort)))

	serving, servingKey, err := k.pki.issue("apiserver", "kube-apiserver", nil,
		[]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"},
		[]net.IP{net.ParseIP(k.gateway), net.ParseIP("10.96.0.1"), net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	saPub, saKey, err := k.pki.serviceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	k.admin = k.kubeconfig(t, "admin", "e2e-admin", "system:masters")
	cmKubeconfig := k.kubeconfig(t, "controller-manager", "system:kube-controller-manager")
	schedKubeconfig := k.kubeconfig(t, "scheduler", "system:kube-scheduler")
	adminCert, adminKey := filepath.Join(k.pki.dir, "admin.crt"), filepath.Join(k.pki.dir, "admin.key")
	if k.api, err = apiClient(k.pki.caFile, adminCert, adminKey); err != nil {
		t.Fatal(err)
	}

	k.launch(t, "etcd", "--name", "e2e", "--data-dir", filepath.Join(k.dir, "etcd"),
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdClient),
		"--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdClient),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPeer),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPeer),
		"--initial-cluster", fmt.Sprintf("e2e=http://127.0.0.1:%d", etcdPeer),
		"--listen-metrics-urls", "", "--log-level", "warn")
	k.launch(t, "kube-apiserver",
		"--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", etcdClient),
		"--bind-address", k.gateway, "--advertise-address", k.gateway, "--secure-port", fmt.Sprint(k.apiPort),
		"--tls-cert-file", serving, "--tls-private-key-file", servingKey,
		"--client-ca-file", k.pki.caFile,
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", saPub, "--service-account-signing-key-file", saKey,
		"--service-cluster-ip-range", serviceCIDR,
		"--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
		"--allow-privileged=true", "--profiling=false", "--cert-dir", filepath.Join(k.dir, "apiserver-certs"))
	k.waitAPI(t, "/readyz", 3*time.Minute)
	logf("API server ready after %s", time.Since(start).Round(time.Millisecond))
	k.launch(t, "kube-controller-manager", "--kubeconfig", cmKubeconfig, "--leader-elect=false",
		"--secure-port=0", "--use-service-account-credentials=true",
		"--service-account-private-key-file", saKey, "--root-ca-file", k.pki.caFile,
		"--cluster-name", "nri-sysctl-e2e", "--allocate-node-cidrs=false", "--controllers=*")
	k.launch(t, "kube-scheduler", "--kubeconfig", schedKubeconfig, "--leader-elect=false", "--secure-port=0")
	k.kubelet = k.startKubelet(t, kubeletSpec{node: k8sNodeName, nodeIP: k.gateway, endpoint: c.grpcSock, dir: k.dir})
	k.waitNodeReady(t, k8sNodeName, k.kubelet, 3*time.Minute)
	logf("cluster ready (node %s Ready) after %s", k8sNodeName, time.Since(start).Round(time.Millisecond))
	return k
}

// kubeconfig issues a client certificate and writes a kubeconfig with it.
func (k *k8sCluster) kubeconfig(t *testing.T, name, cn string, orgs ...string) string {
	t.Helper()
	cert, key, err := k.pki.issue(name, cn, orgs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	path, err := k.pki.kubeconfig(name, k.server, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func (k *k8sCluster) launch(t *testing.T, name string, args ...string) *daemon {
	t.Helper()
	return k.launchIn(t, 0, name, name, args...)
}

// launchIn starts the binary bin as the daemon name, in the mount
// namespace of the process mountNS (if not 0; nsenter execs bin, so the
// pid stays the daemon's).
func (k *k8sCluster) launchIn(t *testing.T, mountNS int, name, bin string, args ...string) *daemon {
	t.Helper()
	path := k.bins[bin]
	if mountNS != 0 {
		args = append([]string{"-t", fmt.Sprint(mountNS), "-m", "--", path}, args...)
		path = "nsenter"
	}
	d, err := startDaemon(name, k.logDir, path, args...)
	if err != nil {
		t.Fatal(err)
	}
	k.daemons = append(k.daemons, d)
	return d
}

// kubeletSpec is what makes one node's kubelet its own.
type kubeletSpec struct {
	node     string // its node name
	nodeIP   string
	endpoint string // its containerd's socket
	dir      string // its config, root dir, certificates and pod logs go here
	// Its healthz port (127.0.0.1); 0: the kubelet's default, 10248.
	healthzPort int
	// Its pods' cgroup root, with the kubelet's QoS cgroups below it
	// (cgroupsPerQOS); "": none (cgroupsPerQOS off, containerd's default).
	cgroupRoot string
	mountNS    int // see launchIn
}

func (k *k8sCluster) startKubelet(t *testing.T, s kubeletSpec) *daemon {
	t.Helper()
	extra := ""
	if s.healthzPort != 0 {
		extra += fmt.Sprintf("healthzPort: %d\n", s.healthzPort)
	}
	perQOS := "false"
	if s.cgroupRoot != "" {
		extra += fmt.Sprintf("cgroupRoot: %s\n", s.cgroupRoot)
		perQOS = "true"
	}
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
cgroupsPerQOS: %s
enforceNodeAllocatable: []
localStorageCapacityIsolation: false
enableServer: false
readOnlyPort: 0
syncFrequency: %s
podLogsDirectory: %s
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 5s
%s`, s.endpoint, perQOS, kubeletSyncFrequency, filepath.Join(s.dir, "pod-logs"), extra)
	cfgPath := filepath.Join(s.dir, "kubelet.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	name := "kubelet"
	if s.node != k8sNodeName {
		name = "kubelet-" + s.node
	}
	kubeconfig := k.kubeconfig(t, name, "system:node:"+s.node, "system:nodes")
	return k.launchIn(t, s.mountNS, name, "kubelet", "--config", cfgPath, "--kubeconfig", kubeconfig,
		"--root-dir", filepath.Join(s.dir, "kubelet"), "--cert-dir", filepath.Join(s.dir, "kubelet-pki"),
		"--hostname-override", s.node, "--node-ip", s.nodeIP,
		"--register-with-taints", notReadyTaint, "--v", "2")
}

// stop stops the kubelet first (pods stay with containerd, which the
// harness clears), then the control plane, newest first.
func (k *k8sCluster) stop() {
	for i := len(k.daemons) - 1; i >= 0; i-- {
		k.daemons[i].stop()
	}
	// The kubelet's mounts (service-account tokens, ConfigMaps) go with
	// the harness's teardown, which unmounts below its directory.
}

func (k *k8sCluster) dumpLogs(t *testing.T) {
	for _, d := range k.daemons {
		state := "running"
		if !d.running() {
			state = fmt.Sprintf("exited: %v", d.err)
		}
		t.Logf("--- %s (%s), last 25 lines of %s ---\n%s", d.name, state, d.logPath, tail(d.logPath, 25))
	}
}

// apiClient trusts the cluster's CA and, given certFile and keyFile,
// presents that client certificate; without them it is a pod's client,
// which authenticates by bearer token (apiRequest).
func apiClient(caFile, certFile, keyFile string) (*http.Client, error) {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	tlsConfig := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		tlsConfig.Certificates = []tls.Certificate{cert}
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}, nil
}

// apiRequest sends one API request; body is JSON-encoded unless it is
// already []byte, and a non-empty token is sent as a bearer token.
func apiRequest(client *http.Client, server, token, method, path, contentType string, body any) ([]byte, int, error) {
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		r = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return nil, 0, err
		}
		r = bytes.NewReader(data)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, server+path, r)
	if err != nil {
		return nil, 0, err
	}
	if contentType == "" {
		contentType = "application/json"
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Accept", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return data, resp.StatusCode, err
}

// do sends one API request as the admin.
func (k *k8sCluster) do(method, path, contentType string, body any) ([]byte, int, error) {
	return apiRequest(k.api, k.server, "", method, path, contentType, body)
}

// mustDo is do that fails the test on anything but a 2xx answer, and
// decodes the answer into out (if not nil).
func (k *k8sCluster) mustDo(t *testing.T, method, path, contentType string, body, out any) {
	t.Helper()
	data, code, err := k.do(method, path, contentType, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if code < 200 || code > 299 {
		t.Fatalf("%s %s: HTTP %d: %s", method, path, code, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decoding: %v", method, path, err)
		}
	}
}

func (k *k8sCluster) waitAPI(t *testing.T, path string, timeout time.Duration) {
	t.Helper()
	waitUntil(t, timeout, "the API server's "+path, func() (bool, string) {
		for _, d := range k.daemons {
			if !d.running() {
				t.Fatalf("%s exited: %v\n%s", d.name, d.err, tail(d.logPath, 40))
			}
		}
		data, code, err := k.do(http.MethodGet, path, "", nil)
		return err == nil && code == 200, fmt.Sprintf("HTTP %d %v %s", code, err, data)
	})
}

// waitUntil polls cond every half second; cond says whether it holds and,
// if not, what it saw (for the failure message).
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	for {
		ok, seen := cond()
		if ok {
			return time.Since(start)
		}
		last = seen
		if time.Since(start) > timeout {
			t.Fatalf("timed out after %s waiting for %s; last seen: %s", timeout, what, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

type k8sNode struct {
	Spec struct {
		Taints []struct {
			Key, Value, Effect string
		} `json:"taints"`
	} `json:"spec"`
	Status struct {
		Conditions []struct{ Type, Status, Reason, Message string } `json:"conditions"`
	} `json:"status"`
}

func (k *k8sCluster) node(t *testing.T) k8sNode {
	t.Helper()
	return k.nodeNamed(t, k8sNodeName)
}

func (k *k8sCluster) nodeNamed(t *testing.T, name string) k8sNode {
	t.Helper()
	var n k8sNode
	k.mustDo(t, http.MethodGet, "/api/v1/nodes/"+name, "", nil, &n)
	return n
}

func (n k8sNode) hasTaint(keyEffect string) bool {
	for _, tt := range n.Spec.Taints {
		if tt.Key+":"+tt.Effect == keyEffect {
			return true
		}
	}
	return false
}

func (k *k8sCluster) waitNodeReady(t *testing.T, node string, kubelet *daemon, timeout time.Duration) {
	t.Helper()
	waitUntil(t, timeout, "node "+node+" Ready", func() (bool, string) {
		if !kubelet.running() {
			t.Fatalf("%s exited: %v\n%s", kubelet.name, kubelet.err, tail(kubelet.logPath, 60))
		}
		data, code, err := k.do(http.MethodGet, "/api/v1/nodes/"+node, "", nil)
		if err != nil || code != 200 {
			return false, fmt.Sprintf("HTTP %d %v", code, err)
		}
		var n k8sNode
		if err := json.Unmarshal(data, &n); err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == "Ready" {
				return c.Status == "True", c.Reason + ": " + c.Message
			}
		}
		return false, "no Ready condition"
	})
}
