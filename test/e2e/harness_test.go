// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package e2e runs nri-sysctl against a real containerd, driven through CRI
// with crictl the way kubelet drives it.
//
// One containerd is started per test binary run (lazily, by the first test
// that needs it) in its own temporary directory, and stopped in TestMain.
// Every test starts its own plugin instance(s) and removes its own pods.
//
// Environment:
//
//	NRI_SYSCTL_CACHE                 binaries built by test/setup.sh (default /var/cache/nri-sysctl-e2e)
//	NRI_SYSCTL_CONTAINERD_VERSION    containerd version to run (default v2.4.2)
//	NRI_SYSCTL_CRICTL_VERSION        crictl version (default v1.37.0)
//	NRI_SYSCTL_BIN                   plugin binary (default <repo>/bin/nri-sysctl)
//	NRI_SYSCTL_E2E_PLUGIN_ARGS       extra plugin flags for every plugin run, e.g. "--mode namespace"
//	NRI_SYSCTL_E2E_CONFIG_VERSION    force containerd's config version (to check its migration)
//	NRI_SYSCTL_E2E_KEEP              if set, keep the temporary directory after the run
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/test/internal/ociimage"

	"github.com/nri-sysctl/nri-sysctl/test/internal/containerdversion"
)

const (
	defaultCache             = "/var/cache/nri-sysctl-e2e"
	defaultContainerdVersion = "v2.4.2"
	defaultCrictlVersion     = "v1.37.0"

	pauseImage   = ociimage.PauseImage
	busyboxImage = ociimage.BusyboxImage

	// CNI: a bridge of our own with host-local IPAM. Pods get their own
	// network namespace; no traffic is sent to these addresses.
	cniBinDir = "/usr/lib/cni"
	cniSubnet = "10.88.77.0/24"

	// altRuntimeHandler is an extra CRI runtime handler, backed by the same
	// runc, used to test exclusion by runtime handler.
	altRuntimeHandler = "runsc-test"

	k8sNamespace = "k8s.io"
)

// baselineKeys are read from a pod started before any plugin runs: they are
// the values containers get without nri-sysctl ("kernel defaults" in a pod's
// own namespaces, including containerd's implicit sandbox sysctls).
var baselineKeys = []string{
	"net.ipv4.tcp_keepalive_time",
	"net.ipv4.tcp_keepalive_intvl",
	"net.ipv4.tcp_keepalive_probes",
	"net.core.somaxconn",
	"net.ipv4.ip_unprivileged_port_start",
	"kernel.msgmax",
	"kernel.msgmnb",
}

// cniBridgeName is per test run: two runs at once on one machine (each with
// its own containerd) must not remove each other's bridge at teardown.
var cniBridgeName = bridgeNameFor(os.Getpid())

// bridgeNameFor names the bridge of the run with that pid (at most 15 bytes).
func bridgeNameFor(pid int) string { return fmt.Sprintf("nrisysctl%d", pid%100000) }

// secondBridgeNameFor names the bridge of the second node of the run with
// that pid (k8s_twonode_test.go).
func secondBridgeNameFor(pid int) string { return fmt.Sprintf("nrisysctlb%d", pid%10000) }

// cluster is one running containerd with everything it needs.
type cluster struct {
	version string
	// podStateDirExisted: /run/nri-sysctl was there before this run.
	podStateDirExisted bool
	cacheDir           string
	binDir             string // containerd, containerd-shim-runc-v2, ctr
	crictlPath         string
	pluginBin          string
	repoRoot           string

	tmp          string // everything below lives here
	root         string
	state        string
	logDir       string
	grpcSock     string
	nriSock      string
	cniConfDir   string
	cniDataDir   string
	configPath   string
	crictlConfig string
	logPath      string
	workDir      string // pod/container JSON files, plugin configs

	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error

	// kernel holds the baseline value of each key in baselineKeys.
	kernel map[string]string

	// mountNS, if not 0, is the pid of a process whose mount namespace
	// containerd runs in (a second node: k8s_twonode_test.go).
	mountNS int
	// imports: drop-in files containerd's config imports (e.g. the
	// shipped fail-closed one).
	imports []string

	mu      sync.Mutex
	seq     int
	plugins map[*pluginProc]bool
	// dumpRegistered: top-level tests that will dump the log on failure.
	dumpRegistered map[*testing.T]bool
}

var (
	clusterOnce sync.Once
	theCluster  *cluster
	clusterSkip string
	clusterErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if theCluster != nil {
		theCluster.teardown()
	}
	os.Exit(code)
}

// getCluster returns the shared containerd, starting it on first use. It skips
// the test only when the machine cannot run containers at all (not root, no
// overlayfs); anything else that is missing is a test failure.
func getCluster(t *testing.T) *cluster {
	t.Helper()
	clusterOnce.Do(func() {
		theCluster, clusterSkip, clusterErr = startCluster()
	})
	if clusterSkip != "" {
		t.Skip("\n\n*** SKIPPING nri-sysctl e2e test: " + clusterSkip + " ***\n")
	}
	if clusterErr != nil {
		if theCluster != nil {
			t.Log(theCluster.containerdLogTail(80))
		}
		t.Fatalf("e2e environment: %v", clusterErr)
	}
	c := theCluster
	// Dump containerd's log once per failed top-level test (subtests fail
	// their parent), limited to what was logged while the test ran.
	if !strings.Contains(t.Name(), "/") {
		c.mu.Lock()
		registered := c.dumpRegistered[t]
		c.dumpRegistered[t] = true
		c.mu.Unlock()
		if !registered {
			offset := fileSize(c.logPath)
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("--- containerd log while %s ran, last 60 lines (%s) ---\n%s", t.Name(), c.logPath, tailFrom(c.logPath, offset, 60))
				}
			})
		}
	}
	return c
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "e2e %s: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// skipReason returns why this machine cannot run the tests, or "".
func skipReason() string {
	if os.Geteuid() != 0 {
		return "must run as root (containerd, runc and CNI need it); run with sudo"
	}
	if err := checkOverlay(); err != nil {
		return "overlayfs is unavailable, containerd's overlayfs snapshotter cannot work here: " + err.Error()
	}
	return ""
}

// checkOverlay mounts a tiny overlayfs on the temp filesystem, which is what
// containerd's snapshotter will do.
func checkOverlay() error {
	d, err := os.MkdirTemp("", "nri-sysctl-overlay-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(d)
	for _, s := range []string{"lower", "upper", "work", "merged"} {
		if err := os.Mkdir(filepath.Join(d, s), 0o755); err != nil {
			return err
		}
	}
	merged := filepath.Join(d, "merged")
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", filepath.Join(d, "lower"), filepath.Join(d, "upper"), filepath.Join(d, "work"))
	if err := syscall.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount -t overlay: %w", err)
	}
	return syscall.Unmount(merged, syscall.MNT_DETACH)
}

// harnessContainerdVersion is the containerd line this run tests, "v" first.
func harnessContainerdVersion() string {
	v := envOr("NRI_SYSCTL_CONTAINERD_VERSION", defaultContainerdVersion)
	if !strings.HasPrefix(v, "v") {
		v = "v" + v
	}
	return v
}

// containerdBinDir is where test/setup.sh builds containerd, its shim and ctr.
func containerdBinDir(cacheDir, version string) string {
	return filepath.Join(cacheDir, "containerd-"+version, "bin")
}

func startCluster() (c *cluster, skip string, err error) {
	if r := skipReason(); r != "" {
		return nil, r, nil
	}
	start := time.Now()
	c = &cluster{
		version:  harnessContainerdVersion(),
		cacheDir: envOr("NRI_SYSCTL_CACHE", defaultCache),
		plugins:  map[*pluginProc]bool{},

		podStateDirExisted: exists(defaultPodStateParent),

		dumpRegistered: map[*testing.T]bool{},
	}
	c.binDir = containerdBinDir(c.cacheDir, c.version)
	c.crictlPath = filepath.Join(c.cacheDir, "crictl-"+envOr("NRI_SYSCTL_CRICTL_VERSION", defaultCrictlVersion), "bin", "crictl")
	for _, p := range []string{filepath.Join(c.binDir, "containerd"), filepath.Join(c.binDir, "containerd-shim-runc-v2"), filepath.Join(c.binDir, "ctr"), c.crictlPath} {
		if _, err := os.Stat(p); err != nil {
			return nil, "", fmt.Errorf("%s is missing: run `sudo test/setup.sh %s` first (NRI_SYSCTL_CACHE=%s)", p, c.version, c.cacheDir)
		}
	}
	for _, p := range []string{"runc", "ip"} {
		if _, err := exec.LookPath(p); err != nil {
			return nil, "", fmt.Errorf("%s not found in PATH: run test/setup.sh first", p)
		}
	}
	if _, err := os.Stat(filepath.Join(cniBinDir, "bridge")); err != nil {
		return nil, "", fmt.Errorf("CNI plugins missing in %s: run test/setup.sh first", cniBinDir)
	}
	wd, err := os.Getwd()
	if err != nil {
		return nil, "", err
	}
	c.repoRoot = filepath.Clean(filepath.Join(wd, "..", ".."))
	c.pluginBin = envOr("NRI_SYSCTL_BIN", filepath.Join(c.repoRoot, "bin", "nri-sysctl"))

	cleanStaleRuns()
	// Under a root-owned 0755 directory, not /tmp: the plugin trusts a
	// config only when no one but root could change any directory on its
	// path, and /tmp is world-writable.
	if err := os.MkdirAll(runsBaseDir, 0o755); err != nil {
		return nil, "", err
	}
	if err := os.Chmod(runsBaseDir, 0o755); err != nil {
		return nil, "", err
	}
	if c.tmp, err = os.MkdirTemp(runsBaseDir, tmpPrefix); err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(filepath.Join(c.tmp, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return c, "", err
	}
	if err := c.makeDirs(); err != nil {
		return c, "", err
	}
	logf("containerd %s, temp dir %s", c.version, c.tmp)
	if err := os.WriteFile(c.configPath, []byte(containerdConfig(c)), 0o644); err != nil {
		return c, "", err
	}
	if err := os.WriteFile(filepath.Join(c.cniConfDir, "10-nri-sysctl-e2e.conflist"), []byte(cniConfig(c)), 0o644); err != nil {
		return c, "", err
	}
	c.crictlConfig = filepath.Join(c.tmp, "crictl.yaml")
	crictlYAML := fmt.Sprintf("runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 60\ndebug: false\npull-image-on-create: false\n", c.grpcSock, c.grpcSock)
	if err := os.WriteFile(c.crictlConfig, []byte(crictlYAML), 0o644); err != nil {
		return c, "", err
	}
	if err := c.startContainerd(); err != nil {
		return c, "", err
	}
	logf("containerd ready after %s", time.Since(start).Round(time.Millisecond))

	archive := filepath.Join(c.workDir, "images.tar")
	if err := ociimage.WriteArchive(archive, ociimage.TestImages); err != nil {
		return c, "", fmt.Errorf("build test images: %w", err)
	}
	if out, err := c.ctr("images", "import", "--platform", "linux/"+goarch(), archive); err != nil {
		return c, "", fmt.Errorf("import test images: %w\n%s", err, out)
	}
	out, err := c.crictlRaw("images", "-q")
	if err != nil {
		return c, "", fmt.Errorf("crictl images: %w\n%s", err, out)
	}
	logf("images imported after %s", time.Since(start).Round(time.Millisecond))

	if err := c.measureBaseline(); err != nil {
		return c, "", fmt.Errorf("baseline pod (no plugin): %w", err)
	}
	logf("environment ready after %s; baseline values without plugin: %v", time.Since(start).Round(time.Millisecond), c.kernel)
	return c, "", nil
}

// makeDirs sets the paths below c.tmp and makes the directories.
func (c *cluster) makeDirs() error {
	// Short paths: unix socket paths are limited to 108 bytes.
	c.root = filepath.Join(c.tmp, "root")
	c.state = filepath.Join(c.tmp, "state")
	c.logDir = filepath.Join(c.tmp, "log")
	// Each socket in a directory of its own, as on a node: a pod mounts
	// the directory (test/e2e/k8s_test.go), never the socket file.
	c.grpcSock = filepath.Join(c.tmp, "containerd", "containerd.sock")
	c.nriSock = filepath.Join(c.tmp, "nri", "nri.sock")
	c.cniConfDir = filepath.Join(c.tmp, "cni", "net.d")
	c.cniDataDir = filepath.Join(c.tmp, "cni", "ipam")
	c.configPath = filepath.Join(c.tmp, "containerd.toml")
	c.logPath = filepath.Join(c.logDir, "containerd.log")
	c.workDir = filepath.Join(c.tmp, "work")
	for _, d := range []string{c.root, c.state, c.logDir, c.cniConfDir, c.cniDataDir, c.workDir, filepath.Dir(c.grpcSock), filepath.Dir(c.nriSock),
		filepath.Join(c.tmp, "nri-plugins"), filepath.Join(c.tmp, "nri-conf"), filepath.Join(c.tmp, "opt"), filepath.Join(c.tmp, "pods")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// containerdConfig renders containerd's configuration. All differences between
// containerd versions belong here.
func containerdConfig(c *cluster) string {
	major, minor := containerdversion.Parse(c.version)
	if major < 2 {
		return containerdConfigV1x(c)
	}
	cfgVersion := containerdversion.ConfigVersion(c.version)
	// For checking containerd's migration of older config versions.
	if v, err := strconv.Atoi(os.Getenv("NRI_SYSCTL_E2E_CONFIG_VERSION")); err == nil {
		cfgVersion = v
	}
	// bin_dir (string) became bin_dirs (list) in containerd 2.1.
	cniBin := fmt.Sprintf("bin_dirs = [%q]", cniBinDir)
	if major == 2 && minor == 0 {
		cniBin = fmt.Sprintf("bin_dir = %q", cniBinDir)
	}
	// Server addresses: top-level tables up to version 3, server plugins from
	// version 4 on.
	servers := fmt.Sprintf(`
[grpc]
  address = %q

[ttrpc]
  address = "%s.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""
`, c.grpcSock, c.grpcSock)
	if cfgVersion >= 4 {
		servers = fmt.Sprintf(`
[plugins."io.containerd.server.v1.grpc"]
  address = %q

[plugins."io.containerd.server.v1.ttrpc"]
  address = "%s.ttrpc"

[plugins."io.containerd.server.v1.debug"]
  address = ""

[plugins."io.containerd.server.v1.metrics"]
  address = ""

[plugins."io.containerd.shim.v1.manager"]
  # Shim sockets go below our temp dir instead of /run/containerd/s.
  socket_dir = %q
`, c.grpcSock, c.grpcSock, filepath.Join(c.tmp, "s"))
	}
	return fmt.Sprintf(`# Generated by the nri-sysctl e2e harness (containerd %[1]s).
version = %[2]d
%[16]sroot = %[3]q
state = %[4]q
%[5]s
[plugins."io.containerd.internal.v1.opt"]
  path = %[6]q

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"

[plugins."io.containerd.cri.v1.images".pinned_images]
  # Offline pause image imported by the harness (entrypoint: sleep infinity).
  sandbox = %[7]q

[plugins."io.containerd.cri.v1.images".registry]
  # The node's own hosts directory (empty but for the two-node test's
  # registry, registryHostsDir).
  config_path = %[17]q

[plugins."io.containerd.cri.v1.runtime"]
  # The test machines' root has every capability except CAP_SYS_RESOURCE, so
  # runc cannot lower a container's oom_score_adj below containerd's own.
  # Without this, every sandbox fails with
  # "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  # Keep pod network namespaces under our state dir, not /var/run/netns.
  netns_mounts_under_state_dir = true

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  Root = %[14]q

# A second handler name backed by the same runc, for runtime-handler rules.
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.%[8]s]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.%[8]s.options]
  Root = %[14]q
%[15]s
[plugins."io.containerd.cri.v1.runtime".cni]
  %[9]s
  conf_dir = %[10]q
  max_conf_num = 1

[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = %[11]q
  plugin_path = %[12]q
  plugin_config_path = %[13]q
`, c.version, cfgVersion, c.root, c.state, servers, filepath.Join(c.tmp, "opt"), pauseImage,
		altRuntimeHandler, cniBin, c.cniConfDir, c.nriSock,
		filepath.Join(c.tmp, "nri-plugins"), filepath.Join(c.tmp, "nri-conf"), filepath.Join(c.tmp, "runc"),
		usernsRuntime(c), importsLine(c.imports), c.registryHostsDir())
}

// registryHostsDir is this node's containerd hosts directory (config_path;
// a directory per registry host holding its hosts.toml).
func (c *cluster) registryHostsDir() string { return filepath.Join(c.tmp, "certs.d") }

// importsLine is containerd's imports key ("" for none); it belongs
// before any table.
func importsLine(files []string) string {
	if len(files) == 0 {
		return ""
	}
	quoted := make([]string, len(files))
	for i, f := range files {
		quoted[i] = strconv.Quote(f)
	}
	return "imports = [" + strings.Join(quoted, ", ") + "]\n"
}

// usernsRuntimeHandler runs pods with a newer runc (built by test/setup.sh)
// that supports the id-mapped mounts user-namespace pods need; Debian 12's
// runc 1.1.5 does not.
const usernsRuntimeHandler = "runc-userns"

func usernsRunc(c *cluster) string {
	return filepath.Join(c.cacheDir, "runc-"+usernsRuncVersion, "bin", "runc")
}

const usernsRuncVersion = "v1.5.3"

func usernsRuntime(c *cluster) string {
	if _, err := os.Stat(usernsRunc(c)); err != nil {
		return ""
	}
	return fmt.Sprintf(`
# A newer runc for user-namespace pods.
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.%s]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.%s.options]
  BinaryName = %q
  Root = %q
`, usernsRuntimeHandler, usernsRuntimeHandler, usernsRunc(c), filepath.Join(c.tmp, "runc"))
}

// containerdConfigV1x renders a version 2 config for containerd 1.7 (not yet
// run by these tests; kept so that 1.7 needs no change elsewhere).
func containerdConfigV1x(c *cluster) string {
	return fmt.Sprintf(`# Generated by the nri-sysctl e2e harness (containerd %[1]s).
version = 2
root = %[2]q
state = %[3]q

[grpc]
  address = %[4]q

[ttrpc]
  address = "%[4]s.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  sandbox_image = %[6]q
  # See containerdConfig: root lacks CAP_SYS_RESOURCE on the test machines.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  Root = %[13]q

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%[7]s]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%[7]s.options]
  Root = %[13]q
%[14]s
[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = %[8]q
  conf_dir = %[9]q
  max_conf_num = 1

[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = %[10]q
  plugin_path = %[11]q
  plugin_config_path = %[12]q
`, c.version, c.root, c.state, c.grpcSock, filepath.Join(c.tmp, "opt"), pauseImage,
		altRuntimeHandler, cniBinDir, c.cniConfDir, c.nriSock,
		filepath.Join(c.tmp, "nri-plugins"), filepath.Join(c.tmp, "nri-conf"), filepath.Join(c.tmp, "runc"),
		strings.ReplaceAll(usernsRuntime(c), "io.containerd.cri.v1.runtime", "io.containerd.grpc.v1.cri"))
}

func cniConfig(c *cluster) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "nri-sysctl-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": false,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q}]]
      }
    },
    {"type": "loopback"}
  ]
}
`, cniBridgeName, c.cniDataDir, cniSubnet)
}

// command runs bin in the cluster's mount namespace (nsenter, which
// execs bin: the pid stays bin's).
func (c *cluster) command(bin string, args ...string) *exec.Cmd {
	if c.mountNS == 0 {
		return exec.Command(bin, args...)
	}
	return exec.Command("nsenter", append([]string{"-t", strconv.Itoa(c.mountNS), "-m", "--", bin}, args...)...)
}

func (c *cluster) startContainerd() error {
	logFile, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := c.command(filepath.Join(c.binDir, "containerd"), "--config", c.configPath)
	// The shim is found through PATH; it must be the one of the same version.
	cmd.Env = append(os.Environ(), "PATH="+c.binDir+":"+os.Getenv("PATH")+":/usr/sbin:/sbin")
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Dir = c.tmp
	// If the test binary dies, containerd goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start containerd: %w", err)
	}
	c.cmd = cmd
	c.exited = make(chan struct{})
	go func() {
		c.waitErr = cmd.Wait()
		logFile.Close()
		close(c.exited)
	}()

	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-c.exited:
			return fmt.Errorf("containerd exited during start-up (%w); log tail:\n%s", c.waitErr, c.containerdLogTail(60))
		default:
		}
		if _, err := c.ctr("version"); err == nil {
			if _, err := c.crictlRaw("info"); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd not ready after 30s; log tail:\n%s", c.containerdLogTail(60))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ctr runs ctr against our containerd in the k8s.io namespace.
func (c *cluster) ctr(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	full := append([]string{"--address", c.grpcSock, "--namespace", k8sNamespace}, args...)
	out, err := exec.CommandContext(ctx, filepath.Join(c.binDir, "ctr"), full...).CombinedOutput()
	return string(out), err
}

// crictlRaw runs crictl against our containerd; it returns stdout, and on
// error an error that includes stderr.
func (c *cluster) crictlRaw(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	full := append([]string{
		"--runtime-endpoint", "unix://" + c.grpcSock,
		"--image-endpoint", "unix://" + c.grpcSock,
		"--timeout", "60s",
	}, args...)
	cmd := exec.CommandContext(ctx, c.crictlPath, full...)
	// crictl insists on a config file; ours names the same endpoints as the flags.
	cmd.Env = append(os.Environ(), "CRI_CONFIG_FILE="+c.crictlConfig)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("crictl %s: %w\nstderr: %s\nstdout: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()), strings.TrimSpace(stdout.String()))
	}
	return stdout.String(), nil
}

func (c *cluster) nextID(prefix string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), c.seq)
}

func tail(path string, n int) string { return tailFrom(path, 0, n) }

// tailFrom returns the last n lines of path, after byte offset.
func tailFrom(path string, offset int64, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	if offset > 0 && offset <= int64(len(data)) {
		data = data[offset:]
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (c *cluster) containerdLogTail(n int) string { return tail(c.logPath, n) }

// teardown removes every pod, stops containerd and whatever it left behind,
// and removes the temporary directory.
// defaultPodStateParent holds the plugin's default --pod-state-dir.
const defaultPodStateParent = "/run/nri-sysctl"

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func (c *cluster) teardown() {
	start := time.Now()
	c.mu.Lock()
	var plugins []*pluginProc
	for p := range c.plugins {
		plugins = append(plugins, p)
	}
	c.mu.Unlock()
	for _, p := range plugins {
		p.stop()
	}
	if c.cmd != nil {
		select {
		case <-c.exited:
			logf("containerd had exited before teardown: %v", c.waitErr)
		default:
			c.removeAllPods()
			stopProcess(c.cmd.Process.Pid, c.exited, 15*time.Second)
		}
	}
	if c.tmp == "" {
		return
	}
	// A pre-installed plugin gets no flags: its pod state is in the
	// default directory, removed if this run made it.
	// Under the host lock: another run's pre-installed plugin may use it.
	if !c.podStateDirExisted {
		if release, err := hostLock.lock(true); err != nil {
			logf("not removing %s: %v", defaultPodStateParent, err)
		} else {
			_ = os.RemoveAll(defaultPodStateParent)
			release()
		}
	}
	releaseDir(c.tmp)
	if err := exec.Command("ip", "link", "show", cniBridgeName).Run(); err == nil {
		if out, err := exec.Command("ip", "link", "del", cniBridgeName).CombinedOutput(); err != nil {
			logf("ip link del %s: %v %s", cniBridgeName, err, out)
		}
	}
	if os.Getenv("NRI_SYSCTL_E2E_KEEP") != "" {
		logf("keeping %s (NRI_SYSCTL_E2E_KEEP)", c.tmp)
	} else if err := os.RemoveAll(c.tmp); err != nil {
		logf("remove %s: %v", c.tmp, err)
	}
	logf("teardown done in %s", time.Since(start).Round(time.Millisecond))
}

// podRemovalBudget bounds removeAllPods. Each stop may wait for crictl's
// 60 s timeout, so a run of many pods whose stops hang (the soak's, after
// thousands of pods) would hold its teardown for hours; past the budget
// the pods left are released with containerd stopped (releaseDir).
const podRemovalBudget = 2 * time.Minute

func (c *cluster) removeAllPods() {
	out, err := c.crictlRaw("pods", "-q")
	if err != nil {
		logf("list pods: %v", err)
		return
	}
	start := time.Now()
	ids := strings.Fields(out)
	for i, id := range ids {
		if time.Since(start) > podRemovalBudget {
			logf("%d of %d pods not removed through CRI within %s: releasing them with containerd stopped", len(ids)-i, len(ids), podRemovalBudget)
			return
		}
		if _, err := c.crictlRaw("stopp", id); err != nil {
			logf("stop pod %s: %v", id, err)
		}
		if _, err := c.crictlRaw("rmp", "-f", id); err != nil {
			logf("remove pod %s: %v", id, err)
		}
	}
}

// stopProcess sends SIGTERM to pid, and SIGKILL if it has not exited (done
// closed) within timeout.
func stopProcess(pid int, done <-chan struct{}, timeout time.Duration) {
	_ = syscall.Kill(pid, syscall.SIGTERM)
	select {
	case <-done:
		return
	case <-time.After(timeout):
	}
	logf("pid %d ignored SIGTERM for %s; sending SIGKILL", pid, timeout)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		logf("pid %d still running after SIGKILL", pid)
	}
}

const (
	// tmpPrefix is short: shim sockets live at <run dir>/s/<64 hex digits>,
	// and a unix socket path has at most 107 bytes.
	tmpPrefix = "run-"
	// runsBaseDir holds each run's temporary directory.
	runsBaseDir = "/var/lib/nri-sysctl-e2e"
	ownerFile   = "owner.pid"
)

// releaseDir frees everything a (stopped) containerd left below dir: runc
// containers still alive, processes started for it (shims, the plugin) and
// mounts. It does not remove dir.
func releaseDir(dir string) {
	// Containers left behind (their pods could not be removed through CRI):
	// runc kills them and removes their cgroups.
	roots, _ := filepath.Glob(filepath.Join(dir, "runc", "*"))
	for _, root := range roots {
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			if out, err := exec.Command("runc", "--root", root, "delete", "--force", e.Name()).CombinedOutput(); err != nil {
				logf("runc delete --force %s: %v %s", e.Name(), err, bytes.TrimSpace(out))
			} else {
				logf("removed leftover container %s", e.Name())
			}
		}
	}
	killProcessesMentioning(dir)
	unmountUnder(dir)
}

// killProcessesMentioning kills processes whose command line names dir: shims
// started by our containerd that outlived it, or a plugin of a killed run.
func killProcessesMentioning(dir string) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(dir+"/")) {
			continue
		}
		logf("killing leftover pid %d: %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " "))
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// cleanStaleRuns cleans up after earlier runs that were killed before their
// teardown (SIGKILL, go test -timeout): temp dirs whose owner process is gone.
func cleanStaleRuns() {
	dirs, _ := filepath.Glob(filepath.Join(runsBaseDir, tmpPrefix+"*"))
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			continue // its test run is still going
		}
		logf("cleaning up after an interrupted run: %s (owner pid %d is gone)", dir, pid)
		// A two-node run's second node first (its own runc root; its
		// cgroup root: k8s_twonode_test.go).
		releaseDir(filepath.Join(dir, "n2"))
		removeCgroupTree(fmt.Sprintf("/nri-sysctl-e2e-%d-node2", pid))
		releaseDir(dir)
		for _, br := range []string{bridgeNameFor(pid), secondBridgeNameFor(pid)} {
			if exec.Command("ip", "link", "show", br).Run() == nil {
				_ = exec.Command("ip", "link", "del", br).Run()
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			logf("remove %s: %v", dir, err)
		}
	}
}

// unmountUnder unmounts every mount point below dir, deepest first.
func unmountUnder(dir string) {
	for attempt := 0; attempt < 3; attempt++ {
		mounts := mountsUnder(dir)
		if len(mounts) == 0 {
			return
		}
		for _, m := range mounts {
			if err := syscall.Unmount(m, 0); err != nil {
				if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
					logf("umount %s: %v", m, err)
				}
			}
		}
	}
}

func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			mounts = append(mounts, mp)
		}
	}
	// Deepest first.
	sort.Slice(mounts, func(i, j int) bool {
		return strings.Count(mounts[i], "/") > strings.Count(mounts[j], "/")
	})
	return mounts
}

// unescapeMountinfo decodes the octal escapes (\040 etc.) of mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// sysctlPath turns a dotted sysctl name into its path below /proc/sys.
func sysctlPath(key string) string {
	return strings.ReplaceAll(key, ".", "/")
}

// measureBaseline runs one pod while no plugin is running and records what
// its container sees.
func (c *cluster) measureBaseline() error {
	pod, err := c.runPodErr(PodSpec{Name: "baseline", Namespace: "e2e-baseline"})
	if err != nil {
		return err
	}
	defer c.removePod(pod.ID)
	id, err := c.createContainerErr(pod, "probe", []string{"sleep", "3600"})
	if err != nil {
		return err
	}
	if _, err := c.crictlRaw("start", id); err != nil {
		return err
	}
	vals, err := c.readSysctlsErr(id, baselineKeys...)
	if err != nil {
		return err
	}
	c.kernel = vals
	return nil
}

func goarch() string { return runtime.GOARCH }

// restartContainerd removes every pod, stops containerd by its pid (SIGTERM)
// and starts it again with the same root, state, sockets and log. The config
// is the harness's own with extraConfig appended (TOML tables that the base
// config does not have); "" restores the base config.
func (c *cluster) restartContainerd(extraConfig string) error {
	c.removeAllPods()
	select {
	case <-c.exited:
		logf("containerd had exited before the restart: %v", c.waitErr)
	default:
		stopProcess(c.cmd.Process.Pid, c.exited, 15*time.Second)
	}
	cfg := containerdConfig(c)
	if extraConfig != "" {
		cfg += "\n# Added by the test that restarted containerd.\n" + extraConfig
	}
	if err := os.WriteFile(c.configPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	start := time.Now()
	if err := c.startContainerd(); err != nil {
		return err
	}
	logf("containerd restarted (pid %d) in %s", c.cmd.Process.Pid, time.Since(start).Round(time.Millisecond))
	return nil
}

// restartContainerdFor restarts containerd with extraConfig for the rest of
// the test, and restarts it with the base config when the test ends, so
// that later tests find it as it was. cleanup runs between the two: after
// the test's pods are gone and before the final restart.
func restartContainerdFor(t *testing.T, extraConfig string, cleanup func()) {
	t.Helper()
	c := getCluster(t)
	t.Cleanup(func() {
		if cleanup != nil {
			cleanup()
		}
		if err := c.restartContainerd(""); err != nil {
			t.Errorf("restore containerd with its base config: %v", err)
		}
	})
	if err := c.restartContainerd(extraConfig); err != nil {
		t.Fatalf("restart containerd: %v", err)
	}
}
