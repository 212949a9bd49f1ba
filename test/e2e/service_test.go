// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

// Running nri-sysctl as a node service: containerd restarting under
// the plugin, containerd starting the plugin itself (pre-installed), config
// reload on SIGHUP, sd_notify readiness, and NRI's fail-closed validator.
// Every value is read inside a container; the plugin's log line "registered
// with NRI" is only used to know when to go on.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/test/internal/containerdversion"
)

// podValues runs a fresh pod with one container, reads keys inside the
// container and removes the pod again.
func podValues(t *testing.T, ns string, keys ...string) map[string]string {
	t.Helper()
	c := getCluster(t)
	pod, err := c.runPodErr(PodSpec{Name: dnsLabel(t.Name()), Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer c.removePod(pod.ID)
	id, err := c.createContainerErr(pod, "app", []string{"sleep", "3600"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.crictlRaw("start", id); err != nil {
		t.Fatal(err)
	}
	vals, err := c.readSysctlsErr(id, keys...)
	if err != nil {
		t.Fatal(err)
	}
	return vals
}

// sameValues reports whether got holds want's values for want's keys.
func sameValues(got, want map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// eventuallyPodValues creates fresh pods until one sees want, or fails the
// test after timeout with what the last pod saw.
func eventuallyPodValues(t *testing.T, ns string, want map[string]string, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	for attempt := 1; ; attempt++ {
		got := podValues(t, ns, sortedKeys(want)...)
		if sameValues(got, want) {
			t.Logf("pod #%d, %s after the change, has %v", attempt, time.Since(start).Round(time.Millisecond), got)
			return
		}
		if time.Since(start) > timeout {
			wantSysctls(t, fmt.Sprintf("pod #%d, %s after the change", attempt, time.Since(start).Round(time.Millisecond)), got, want)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Values used by the service cases; each differs from nodeDefaults, from the
// kernel's and from the host's value (checkMeaningful).
var (
	serviceValuesA = map[string]string{"net.ipv4.tcp_keepalive_time": "611", "kernel.msgmax": "16411"}
	serviceValuesB = map[string]string{"net.ipv4.tcp_keepalive_time": "622", "kernel.msgmax": "16422"}
	serviceValuesC = map[string]string{"net.ipv4.tcp_keepalive_time": "633", "kernel.msgmax": "16433"}
)

// TestServiceContainerdRestart: containerd is stopped (SIGTERM) and started
// again under a running plugin; the plugin reconnects by itself and pods
// created afterwards get the defaults.
func TestServiceContainerdRestart(t *testing.T) {
	c := getCluster(t)
	checkMeaningful(t, serviceValuesA)
	p := startPlugin(t, defaultsYAML(serviceValuesA))
	wantSysctls(t, "pod before the restart", podValues(t, "e2e-restart", sortedKeys(serviceValuesA)...), serviceValuesA)

	oldPid := c.cmd.Process.Pid
	start := time.Now()
	if err := c.restartContainerd(""); err != nil {
		t.Fatalf("restart containerd: %v", err)
	}
	t.Logf("containerd pid %d stopped and pid %d serving after %s", oldPid, c.cmd.Process.Pid, time.Since(start).Round(time.Millisecond))
	if !p.running() {
		t.Fatalf("plugin exited when containerd stopped: %v\n%s", p.waitErr, tail(p.logPath, 40))
	}
	p.waitRegistered(t, 2, 60*time.Second)
	t.Logf("plugin (same pid %d) registered again %s after the restart began", p.cmd.Process.Pid, time.Since(start).Round(time.Millisecond))
	wantSysctls(t, "pod after the restart", podValues(t, "e2e-restart", sortedKeys(serviceValuesA)...), serviceValuesA)
	if !p.running() {
		t.Fatalf("plugin exited: %v", p.waitErr)
	}
}

// TestServicePreinstalled: containerd starts the plugin itself from its
// plugin_path and passes it the config text; the plugin gets no flags.
func TestServicePreinstalled(t *testing.T) {
	c := getCluster(t)
	hostLock.hold(t, true) // /dev/log and the default pod state directory (hostlock_test.go)
	// The pre-installed plugin keeps its pod state in the default
	// directory: removed again, under the lock, if this test made it.
	if !exists(defaultPodStateParent) {
		t.Cleanup(func() { _ = os.RemoveAll(defaultPodStateParent) })
	}
	bin := pluginBinary(t)
	checkMeaningful(t, serviceValuesB)
	keys := sortedKeys(serviceValuesB)
	pluginPath := filepath.Join(c.tmp, "nri-plugins", "90-sysctl")
	confPath := filepath.Join(c.tmp, "nri-conf", "90-sysctl.conf")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pluginPath, data, 0o755); err != nil {
		t.Fatal(err)
	}
	// Runs last: whatever containerd started from pluginPath must be gone
	// once containerd was restarted without it.
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			pids := pidsOfExe(pluginPath)
			if len(pids) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("pre-installed plugin still running (pids %v) after containerd restarted without it; killing it", pids)
				for _, pid := range pids {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	restarted := false
	restart := func(conf string) {
		t.Helper()
		if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		if !restarted {
			restarted = true
			restartContainerdFor(t, "", func() {
				os.Remove(pluginPath)
				os.Remove(confPath)
			})
		} else if err := c.restartContainerd(""); err != nil {
			t.Fatalf("restart containerd: %v", err)
		}
		if pids := pidsOfExe(pluginPath); len(pids) != 1 {
			t.Fatalf("containerd is serving CRI, and %d process(es) run %s (want 1, started by containerd): %v", len(pids), pluginPath, pids)
		}
	}

	// Without containerdAddress the plugin finds the containerd that
	// launched it (this one is not on the default socket) among its
	// parent's listening sockets; a pod's own value still wins. containerd
	// gives a pre-installed plugin no stderr, so its log lines go to the
	// journal or, as here (no journald), to syslog.
	// The plugin's log goes to syslog (containerd gives it no stderr):
	// kept for the whole test, and shown if it fails.
	syslogLines := listenSyslog(t)
	if syslogLines != nil {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("--- the pre-installed plugin's syslog lines ---\n%s", syslogLines())
			}
		})
	}
	t.Run("FindsItsContainerd", func(t *testing.T) {
		restart(defaultsYAML(serviceValuesB))
		wantSysctls(t, "pod, plugin without containerdAddress", podValues(t, "e2e-preinstalled", keys...), serviceValuesB)
		ownKey := keys[0]
		pod := runPod(t, PodSpec{Name: "own", Namespace: "e2e-preinstalled", Sysctls: map[string]string{ownKey: "33"}})
		id := runContainer(t, pod, "app")
		wantSysctls(t, "pod with its own "+ownKey, readSysctls(t, id, keys...), with(serviceValuesB, ownKey, "33"))
		if syslogLines != nil {
			want := "found the containerd that launched the plugin"
			deadline := time.Now().Add(5 * time.Second)
			for !strings.Contains(syslogLines(), want) {
				if time.Now().After(deadline) {
					t.Fatalf("the pre-installed plugin's log lines are not in syslog (want %q); syslog got:\n%s", want, syslogLines())
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("syslog has the plugin's lines, e.g. %s", lineWith(syslogLines(), want))
		}
	})
	if t.Failed() {
		return
	}
	// With containerdAddress in the config containerd passes, it looks
	// pods up there.
	t.Run("ConfigContainerdAddress", func(t *testing.T) {
		restart(defaultsYAML(serviceValuesB) + fmt.Sprintf("containerdAddress: %q\ncontainerdNamespace: %q\n", c.grpcSock, k8sNamespace))
		wantSysctls(t, "pod, pre-installed plugin", podValues(t, "e2e-preinstalled", keys...), serviceValuesB)
	})
	// The profiles attack on a plugin containerd started, and
	// never restarts: one missed deadline would leave the node without it
	// until containerd restarts.
	t.Run("ProfilesAnnotationAttack", func(t *testing.T) {
		restart(defaultsYAML(nodeDefaults) + fmt.Sprintf("containerdAddress: %q\ncontainerdNamespace: %q\n", c.grpcSock, k8sNamespace))
		checkMeaningful(t, nodeDefaults)
		before := pidsOfExe(pluginPath)
		checkAttack(t, c, "e2e-preinstalled", func() bool { return slices.Equal(pidsOfExe(pluginPath), before) })
	})
	// A wrong containerdAddress is an explicit choice: the plugin looks
	// pods up there only, cannot read a pod's own sysctls, and sets
	// nothing (never clobber).
	t.Run("WrongContainerdAddress", func(t *testing.T) {
		restart(defaultsYAML(serviceValuesB) + "containerdAddress: /run/nri-sysctl-e2e-nothing-here.sock\n")
		wantSysctls(t, "pod, plugin with a wrong containerdAddress", podValues(t, "e2e-preinstalled", keys...), only(c.kernel, keys...))
	})
}

// listenSyslog stands in for a syslog daemon on /dev/log while the test
// runs, and returns what it received so far. It returns nil (after saying
// so) when /dev/log already exists: the lines then go to that daemon.
func listenSyslog(t *testing.T) func() string {
	t.Helper()
	const devLog = "/dev/log"
	if _, err := os.Lstat(devLog); err == nil {
		t.Logf("%s exists (a syslog daemon runs here): not checking where the plugin's lines go", devLog)
		return nil
	}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: devLog, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listen on %s: %v", devLog, err)
	}
	var mu sync.Mutex
	var got strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			mu.Lock()
			got.Write(buf[:n])
			got.WriteByte('\n')
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		conn.Close()
		<-done
		os.Remove(devLog)
	})
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return got.String()
	}
}

// pidsOfExe lists processes whose executable is path.
func pidsOfExe(path string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err == nil && strings.TrimSuffix(exe, " (deleted)") == path {
			pids = append(pids, pid)
		}
	}
	return pids
}

// rewriteConfig replaces a config file the way config management does: a
// new file renamed over the old one.
func rewriteConfig(t *testing.T, path, text string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func sighup(t *testing.T, p *pluginProc) {
	t.Helper()
	if err := syscall.Kill(p.cmd.Process.Pid, syscall.SIGHUP); err != nil {
		t.Fatalf("SIGHUP plugin pid %d: %v", p.cmd.Process.Pid, err)
	}
}

// TestServiceReloadSIGHUP: a changed config file is put in force on SIGHUP,
// for pods created afterwards.
func TestServiceReloadSIGHUP(t *testing.T) {
	checkMeaningful(t, serviceValuesA)
	checkMeaningful(t, serviceValuesB)
	p := startPlugin(t, defaultsYAML(serviceValuesA))
	keys := sortedKeys(serviceValuesA)
	wantSysctls(t, "pod before the reload", podValues(t, "e2e-reload", keys...), serviceValuesA)
	rewriteConfig(t, p.configPath, defaultsYAML(serviceValuesB))
	sighup(t, p)
	eventuallyPodValues(t, "e2e-reload", serviceValuesB, 15*time.Second)
	if !p.running() {
		t.Fatalf("plugin exited after SIGHUP: %v", p.waitErr)
	}
}

// TestServiceReloadBrokenConfig: a config that fails validation is rejected
// whole on SIGHUP; the plugin keeps running with the old one.
func TestServiceReloadBrokenConfig(t *testing.T) {
	checkMeaningful(t, serviceValuesA)
	checkMeaningful(t, serviceValuesC)
	p := startPlugin(t, defaultsYAML(serviceValuesA))
	keys := sortedKeys(serviceValuesA)
	// Valid YAML, but vm.swappiness is not namespaced; a good key beside it
	// must not slip through either.
	rewriteConfig(t, p.configPath, "sysctls:\n  net.ipv4.tcp_keepalive_time: \"999\"\n  vm.swappiness: 10\n")
	sighup(t, p)
	// The reload runs as soon as the signal arrives; leave it ample time
	// before checking that nothing changed.
	time.Sleep(2 * time.Second)
	if !p.running() {
		t.Fatalf("plugin exited on a broken config: %v\n%s", p.waitErr, tail(p.logPath, 40))
	}
	for i := 1; i <= 2; i++ {
		wantSysctls(t, fmt.Sprintf("pod #%d after the rejected reload", i), podValues(t, "e2e-reload", keys...), serviceValuesA)
	}
	// Signal handling still works after a rejected reload.
	rewriteConfig(t, p.configPath, defaultsYAML(serviceValuesC))
	sighup(t, p)
	eventuallyPodValues(t, "e2e-reload", serviceValuesC, 15*time.Second)
}

// notifyListener is a unixgram socket standing in for systemd's
// NOTIFY_SOCKET; it records each datagram with its sender's pid.
type notifyListener struct {
	path string
	conn *net.UnixConn
}

type notifyMsg struct {
	text string
	pid  int32
	at   time.Time
}

func listenNotify(t *testing.T) *notifyListener {
	t.Helper()
	c := getCluster(t)
	path := filepath.Join(c.tmp, c.nextID("notify")+".sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); os.Remove(path) })
	raw, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_PASSCRED, 1)
	}); err != nil || serr != nil {
		t.Fatalf("SO_PASSCRED: %v %v", err, serr)
	}
	return &notifyListener{path: path, conn: conn}
}

// next returns the next datagram, or ok=false when none arrives within d.
func (n *notifyListener) next(t *testing.T, d time.Duration) (notifyMsg, bool) {
	t.Helper()
	buf := make([]byte, 4096)
	oob := make([]byte, 1024)
	if err := n.conn.SetReadDeadline(time.Now().Add(d)); err != nil {
		t.Fatal(err)
	}
	nb, noob, _, _, err := n.conn.ReadMsgUnix(buf, oob)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return notifyMsg{}, false
		}
		t.Fatalf("read %s: %v", n.path, err)
	}
	m := notifyMsg{text: string(buf[:nb]), pid: -1, at: time.Now()}
	if msgs, err := syscall.ParseSocketControlMessage(oob[:noob]); err == nil {
		for _, cm := range msgs {
			if cred, err := syscall.ParseUnixCredentials(&cm); err == nil {
				m.pid = cred.Pid
			}
		}
	}
	return m, true
}

func hasReady(text string) bool {
	for _, line := range strings.Split(text, "\n") {
		if line == "READY=1" {
			return true
		}
	}
	return false
}

// TestServiceSdNotify: with NOTIFY_SOCKET set, the real binary sends
// READY=1 from its main pid, and only once it has registered with NRI.
func TestServiceSdNotify(t *testing.T) {
	c := getCluster(t)
	checkMeaningful(t, serviceValuesA)
	n := listenNotify(t)
	// The NRI socket the plugin is pointed at does not exist yet; it
	// becomes a symlink to containerd's NRI socket later.
	link := filepath.Join(c.tmp, c.nextID("nri-link")+".sock")
	t.Cleanup(func() { os.Remove(link) })
	cfg := writePluginConfig(t, defaultsYAML(serviceValuesA))
	p := launchPlugin(t, []string{"NOTIFY_SOCKET=" + n.path}, pluginArgs(c, cfg, []string{"--nri-socket", link})...)

	const quiet = 3 * time.Second
	deadline := time.Now().Add(quiet)
	for time.Now().Before(deadline) {
		m, ok := n.next(t, time.Until(deadline))
		if !ok {
			break
		}
		if hasReady(m.text) {
			t.Fatalf("READY=1 sent while the NRI socket did not exist: %q", m.text)
		}
		t.Logf("notification before registration (not READY): %q", m.text)
	}
	if !p.running() {
		t.Fatalf("plugin exited while the NRI socket was missing (it should retry): %v\n%s", p.waitErr, tail(p.logPath, 40))
	}
	t.Logf("no READY=1 in %s while %s did not exist; plugin still running", quiet, link)

	if err := os.Symlink(c.nriSock, link); err != nil {
		t.Fatal(err)
	}
	linked := time.Now()
	for {
		m, ok := n.next(t, 40*time.Second-time.Since(linked))
		if !ok {
			t.Fatalf("no READY=1 within 40s after the NRI socket appeared\n%s", tail(p.logPath, 40))
		}
		if !hasReady(m.text) {
			t.Logf("notification: %q", m.text)
			continue
		}
		if int(m.pid) != p.cmd.Process.Pid {
			t.Errorf("READY=1 came from pid %d, want the plugin's main pid %d (NotifyAccess=main)", m.pid, p.cmd.Process.Pid)
		}
		t.Logf("READY=1 from pid %d, %s after the NRI socket appeared", m.pid, m.at.Sub(linked).Round(time.Millisecond))
		break
	}
	// READY=1 means registered: a pod created right now gets the defaults.
	wantSysctls(t, "pod created right after READY=1", podValues(t, "e2e-notify", sortedKeys(serviceValuesA)...), serviceValuesA)
}

// TestServiceFailClosed: with NRI's default validator requiring the plugin,
// containers cannot be created while it is not registered.
func TestServiceFailClosed(t *testing.T) {
	c := getCluster(t)
	skipWithoutDefaultValidator(t, c)
	checkMeaningful(t, serviceValuesA)
	keys := sortedKeys(serviceValuesA)
	restartContainerdFor(t, `[plugins."io.containerd.nri.v1.nri".default_validator]
  enable = true
  required_plugins = ["sysctl"]
`, nil)
	if out, err := containerdCommand(c, "config", "dump"); err == nil && !strings.Contains(out, "required_plugins = ['sysctl']") {
		t.Fatalf("containerd's config dump lacks required_plugins:\n%s", out)
	}

	// expectCreateFails: with no plugin named sysctl registered, the pod's
	// container is not created.
	expectCreateFails := func(what string) {
		t.Helper()
		pod, err := c.runPodErr(PodSpec{Name: dnsLabel(t.Name()), Namespace: "e2e-failclosed"})
		if err != nil {
			t.Logf("%s: the pod sandbox itself was refused: %v", what, criErrorLine(err))
			return
		}
		defer c.removePod(pod.ID)
		id, err := c.createContainerErr(pod, "app", []string{"sleep", "3600"})
		if err == nil {
			_, _ = c.crictlRaw("start", id)
			vals, _ := c.readSysctlsErr(id, keys...)
			t.Fatalf("%s: container created (it sees %v), want creation to fail", what, vals)
		}
		if msg := criErrorLine(err); !strings.Contains(msg, "required plugin") || !strings.Contains(msg, "sysctl") {
			t.Errorf("%s: creation failed, but the error does not name the required plugin: %v", what, err)
		}
		t.Logf("%s: container creation refused: %s", what, criErrorLine(err))
	}
	expectCreateFails("before the plugin started")

	p := startPlugin(t, defaultsYAML(serviceValuesA))
	wantSysctls(t, "pod with the required plugin registered", podValues(t, "e2e-failclosed", keys...), serviceValuesA)

	p.stop()
	expectCreateFails("after the plugin stopped")
}

// skipWithoutDefaultValidator skips a fail-closed test where containerd
// cannot require a plugin.
func skipWithoutDefaultValidator(t *testing.T, c *cluster) {
	t.Helper()
	if major, minor := containerdversion.Parse(c.version); major < 2 || (major == 2 && minor < 2) {
		t.Skipf("containerd %s has no NRI default validator (required_plugins needs containerd >= 2.2, NRI >= 0.10): fail-closed cannot be configured there", c.version)
	}
}

// criErrorLine picks the runtime's error out of crictl's (which includes
// its whole stderr and stdout).
func criErrorLine(err error) string {
	lines := strings.Split(err.Error(), "\n")
	for _, l := range lines {
		if i := strings.Index(l, "desc = "); i >= 0 {
			l = l[i+len("desc = "):]
			if j := strings.Index(l, `" podSandboxID`); j >= 0 {
				l = l[:j]
			}
			return strings.ReplaceAll(l, `\"`, `"`)
		}
	}
	return strings.TrimSpace(lines[0])
}

// containerdCommand runs the cluster's containerd binary with its config
// (e.g. `config dump`) and returns stdout.
func containerdCommand(c *cluster, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.Command(filepath.Join(c.binDir, "containerd"), append([]string{"--config", c.configPath}, args...)...)
	cmd.Stdout = &out
	cmd.Stderr = io.Discard
	err := cmd.Run()
	return out.String(), err
}
