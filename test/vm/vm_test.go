// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package vm boots a real node under qemu: a Debian 12 image with systemd as
// PID 1, containerd, nri-sysctl.service (installed from its .deb) and
// kubelet creating static pods. It checks, from inside the pods' containers
// and from the VM's host namespaces, that the node's first pods get their
// defaults, that reload, containerd restarts and a killed plugin behave as
// docs/deploying.md says, the pre-installed set-up, namespace mode on containerd
// 2.2.10 under the hardened unit, the unit's systemd-analyze exposure, and the
// package's upgrade (kept conffile, restart) and removal (kubelet startable).
// The plugin's own log is never the proof.
//
// Skipped unless NRI_SYSCTL_VM=1 (`make vm-test` sets it, after
// test/vm/setup.sh). Environment:
//
//	NRI_SYSCTL_CACHE              build cache (default /var/cache/nri-sysctl-e2e)
//	NRI_SYSCTL_VM_BREAK           boot the main scenarios with a broken unit
//	                              (protecthostname, afterkubelet): they must fail
//	NRI_SYSCTL_VM_APPEND          more kernel command line, e.g. vmtest.harden=clock,ipdeny
//	                              (extra unit settings to try, see the image's generator)
//	NRI_SYSCTL_VM_POD_TIMEOUT     wait this long for the static pods (default 10m)
//	NRI_SYSCTL_VM_TIMEOUT         kill a VM still running after this (default 30m)
//	NRI_SYSCTL_VM_BOOT_TIMEOUT    wait this long for the agent (default 10m)
package vm

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/nri-sysctl/nri-sysctl/test/internal/ociimage"
)

const (
	kubeletVersion    = "v1.37.2"
	crictlVersion     = "v1.37.0"
	usernsRuncVersion = "v1.5.3"
	nodeName          = "vmnode"

	specContainerd      = "v2.4.2"  // spec mode (>= 2.3: NRI v0.12)
	namespaceContainerd = "v2.2.10" // auto mode picks namespace mode (NRI v0.11 panics on sysctl adjustments)
)

// podTimeout is how long the node's static pods may take to run after boot.
func podTimeout() time.Duration { return envDuration("NRI_SYSCTL_VM_POD_TIMEOUT", 10*time.Minute) }

func skipUnlessVM(t *testing.T) {
	t.Helper()
	if os.Getenv("NRI_SYSCTL_VM") != "1" {
		t.Skip("VM test: set NRI_SYSCTL_VM=1 (make vm-test)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the VM test needs root (mmdebstrap, image files owned by root)")
	}
}

// The keys every node pod is read for, with the node config's value and
// the kernel's default (what a pod without defaults, and the VM's host, has).
var nodeKeys = []string{
	"net.ipv4.tcp_keepalive_time",
	"net.ipv4.tcp_keepalive_intvl",
	"net.ipv4.tcp_keepalive_probes",
	"net.ipv4.ip_unprivileged_port_start",
	"kernel.msgmax",
	"kernel.domainname",
}

var nodeDefaults = map[string]string{ // test/vm/rootfs/usr/local/lib/vmtest/node-config.yaml
	"net.ipv4.tcp_keepalive_time":         "600",
	"net.ipv4.tcp_keepalive_intvl":        "60",
	"net.ipv4.tcp_keepalive_probes":       "5",
	"net.ipv4.ip_unprivileged_port_start": "1000",
	"kernel.msgmax":                       "16384",
	"kernel.domainname":                   "nri-sysctl.test",
}

var kernelDefaults = map[string]string{
	"net.ipv4.tcp_keepalive_time":         "7200",
	"net.ipv4.tcp_keepalive_intvl":        "75",
	"net.ipv4.tcp_keepalive_probes":       "9",
	"net.ipv4.ip_unprivileged_port_start": "1024",
	"kernel.msgmax":                       "8192",
	"kernel.domainname":                   "(none)",
}

// nodePods are the static pods of test/vm/rootfs/usr/local/lib/vmtest/manifests/node.
var nodePods = []string{"plain", "own", "hostnet", "hostipc"}

// wantNodePod is what each of them must read.
func wantNodePod(pod string) map[string]string {
	want := map[string]string{}
	for k, v := range nodeDefaults {
		want[k] = v
	}
	switch pod {
	case "own": // its own securityContext.sysctls win
		want["net.ipv4.tcp_keepalive_time"] = "900"
		want["kernel.msgmax"] = "32768"
	case "hostnet": // the host's network and UTS namespaces: nothing net.*, no domainname
		for k := range want {
			if strings.HasPrefix(k, "net.") || k == "kernel.domainname" {
				want[k] = kernelDefaults[k]
			}
		}
	case "hostipc": // the host's IPC namespace
		want["kernel.msgmax"] = kernelDefaults["kernel.msgmax"]
	}
	return want
}

// errorer is a *testing.T, or a recorder when a failure is the expected outcome.
type errorer interface {
	Helper()
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
}

type recorder struct {
	t      *testing.T
	errors []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recorder) Logf(format string, args ...any) { r.t.Logf(format, args...) }

// readEach prints PATH=VALUE, or PATH=the error, for each path it is given.
const readEach = `for p in "$@"; do printf "%s=%s\n" "$p" "$(cat "$p" 2>&1)"; done`

// sysctlPaths are the /proc/sys files of keys, quoted for the shell.
func sysctlPaths(keys []string) string {
	paths := make([]string, len(keys))
	for i, k := range keys {
		paths[i] = shellQuote(sysctl.Path(k))
	}
	return strings.Join(paths, " ")
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// appContainer returns the running "app" container of a static pod, or "".
func (v *vm) appContainer(pod string) (string, error) {
	out, err := v.run(fmt.Sprintf("crictl ps -q --state running --name '^app$' --label io.kubernetes.pod.name=%s-%s", pod, nodeName), 2*time.Minute)
	if err != nil {
		return "", err
	}
	id, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	return id, nil
}

// waitPods waits until each static pod has a running app container.
func (v *vm) waitPods(pods []string, timeout time.Duration) error {
	start := time.Now()
	for {
		var missing []string
		for _, p := range pods {
			if id, err := v.appContainer(p); err != nil || id == "" {
				missing = append(missing, p)
			}
		}
		if len(missing) == 0 {
			v.t.Logf("[%s] pods %v running, %s after qemu started", v.name, pods, time.Since(v.started).Round(time.Second))
			return nil
		}
		if time.Since(start) > timeout {
			state, _ := v.run("crictl pods; crictl ps -a; journalctl -u kubelet --no-pager | grep -iE 'error|fail' | tail -n 15", 2*time.Minute)
			return fmt.Errorf("after %s, no running app container in pods %v\n%s", timeout, missing, state)
		}
		time.Sleep(3 * time.Second)
	}
}

// podValues reads keys inside a static pod's app container.
func (v *vm) podValues(pod string, keys []string) (map[string]string, error) {
	id, err := v.appContainer(pod)
	if err != nil || id == "" {
		return nil, fmt.Errorf("pod %s has no running app container (%w)", pod, err)
	}
	out, err := v.run("crictl exec "+id+" sh -c '"+readEach+"' sh "+sysctlPaths(keys), 2*time.Minute)
	if err != nil {
		return nil, err
	}
	return parseValues(out, keys), nil
}

// hostValues reads keys in the VM's own (host) namespaces.
func (v *vm) hostValues(keys []string) (map[string]string, error) {
	out, err := v.run("sh -c '"+readEach+"' sh "+sysctlPaths(keys), time.Minute)
	if err != nil {
		return nil, err
	}
	return parseValues(out, keys), nil
}

func parseValues(out string, keys []string) map[string]string {
	byPath := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if p, val, ok := strings.Cut(line, "="); ok {
			byPath[p] = strings.Join(strings.Fields(val), " ")
		}
	}
	vals := map[string]string{}
	for _, k := range keys {
		if val, ok := byPath[sysctl.Path(k)]; ok {
			vals[k] = val
		}
	}
	return vals
}

func diffValues(got, want map[string]string) []string {
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			diffs = append(diffs, fmt.Sprintf("%s=%q, want %q", k, got[k], want[k]))
		}
	}
	return diffs
}

func formatValues(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, " ")
}

// checkNodePods checks the four static pods, key by key, and the VM's host.
func checkNodePods(r errorer, v *vm, timeout time.Duration) {
	r.Helper()
	if err := v.waitPods(nodePods, timeout); err != nil {
		r.Errorf("[%s] %v", v.name, err)
	}
	for _, pod := range nodePods {
		got, err := v.podValues(pod, nodeKeys)
		if err != nil {
			r.Errorf("[%s] pod %s: %v", v.name, pod, err)
			continue
		}
		if d := diffValues(got, wantNodePod(pod)); len(d) > 0 {
			r.Errorf("[%s] static pod %s: %s", v.name, pod, strings.Join(d, "; "))
		} else {
			r.Logf("[%s] static pod %s: %s", v.name, pod, formatValues(got))
		}
	}
	checkHostUntouched(r, v)
}

// checkHostUntouched: the plugin never writes the host's namespaces.
func checkHostUntouched(r errorer, v *vm) {
	r.Helper()
	got, err := v.hostValues(nodeKeys)
	if err != nil {
		r.Errorf("[%s] host values: %v", v.name, err)
		return
	}
	if d := diffValues(got, kernelDefaults); len(d) > 0 {
		r.Errorf("[%s] the VM's host namespaces changed: %s", v.name, strings.Join(d, "; "))
	} else {
		r.Logf("[%s] VM host (kernel defaults, untouched): %s", v.name, formatValues(got))
	}
}

// unitProp reads one systemd property.
func (v *vm) unitProp(unit, prop string) string {
	v.t.Helper()
	return strings.TrimSpace(v.sh(fmt.Sprintf("systemctl show -p %s --value %s", prop, unit)))
}

func (v *vm) unitPropInt(unit, prop string) int64 {
	v.t.Helper()
	n, err := strconv.ParseInt(v.unitProp(unit, prop), 10, 64)
	if err != nil {
		v.t.Fatalf("[%s] %s %s: %v", v.name, unit, prop, err)
	}
	return n
}

// waitFor polls cond every 2s until it is true or timeout.
func (v *vm) waitFor(what string, timeout time.Duration, cond func() bool) {
	v.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			v.t.Fatalf("[%s] %s: not after %s", v.name, what, timeout)
		}
		time.Sleep(2 * time.Second)
	}
}

// mainPIDs names the main process of containerd, nri-sysctl and kubelet,
// to show which of them a restart or a kill took along.
func (v *vm) mainPIDs() string {
	v.t.Helper()
	return strings.Join(strings.Fields(v.sh(`for u in containerd nri-sysctl kubelet; do printf '%s=%s ' $u "$(systemctl show -p MainPID --value $u.service)"; done`)), " ")
}

var probeSeq int

// probePod creates a new static pod (plain), reads keys inside it and
// removes it: "the next pod" after a change.
func (v *vm) probePod(keys []string) (map[string]string, error) {
	probeSeq++
	name := fmt.Sprintf("probe%d", probeSeq)
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default}
spec:
  containers:
  - {name: app, image: %s, imagePullPolicy: Never, command: ["sleep", "infinity"]}
`, name, ociimage.BusyboxImage)
	v.sh(fmt.Sprintf("cat >/etc/kubernetes/manifests/%s.yaml <<'EOF'\n%sEOF", name, manifest))
	defer v.sh(fmt.Sprintf("rm -f /etc/kubernetes/manifests/%s.yaml", name))
	if err := v.waitPods([]string{name}, 5*time.Minute); err != nil {
		return nil, err
	}
	return v.podValues(name, keys)
}

// eventuallyProbe creates pods until one reads want (a reload is
// asynchronous), at most three.
func (v *vm) eventuallyProbe(what string, want map[string]string) {
	v.t.Helper()
	keys := slices.Sorted(maps.Keys(want))
	var got map[string]string
	for attempt := 1; attempt <= 3; attempt++ {
		var err error
		got, err = v.probePod(keys)
		if err != nil {
			v.t.Fatalf("[%s] %s: %v", v.name, what, err)
		}
		if len(diffValues(got, want)) == 0 {
			v.t.Logf("[%s] %s: pod #%d has %s", v.name, what, attempt, formatValues(got))
			return
		}
		v.t.Logf("[%s] %s: pod #%d has %s; trying another", v.name, what, attempt, strings.Join(diffValues(got, want), "; "))
		time.Sleep(3 * time.Second)
	}
	v.t.Errorf("[%s] %s: %s", v.name, what, strings.Join(diffValues(got, want), "; "))
}

func nodeConfig(t *testing.T) string {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "test/vm/rootfs/usr/local/lib/vmtest/node-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// writeConfig replaces the plugin's config in place (same inode, mode 0600).
func (v *vm) writeConfig(text string) {
	v.t.Helper()
	v.sh(fmt.Sprintf("cat >/etc/nri-sysctl/config.yaml <<'EOF'\n%sEOF\nstat -c '%%a %%U' /etc/nri-sysctl/config.yaml", text))
}

// waitReloadUnit waits until nri-sysctl-reload.service (started by the path
// unit) has run once more since its exit timestamp was since.
func (v *vm) waitReloadUnit(since string) {
	v.t.Helper()
	v.waitFor("nri-sysctl-reload.service ran after the config edit", 2*time.Minute, func() bool {
		now := v.unitProp("nri-sysctl-reload.service", "ExecMainExitTimestampMonotonic")
		return now != since && now != "0"
	})
}

func withKeepalive(cfg, value string) string {
	return strings.Replace(cfg, "net.ipv4.tcp_keepalive_time: 600 ", "net.ipv4.tcp_keepalive_time: "+value+" ", 1)
}

func TestVMSpecModeService(t *testing.T) {
	skipUnlessVM(t)
	img := getNodeImage(t, specContainerd)
	v := bootVM(t, img, "service", os.Getenv("NRI_SYSCTL_VM_BREAK"))

	t.Run("static pods at boot", func(t *testing.T) {
		v.t = t
		checkNodePods(t, v, podTimeout())
		// systemd's record: kubelet started after the plugin was ready
		// (Type=notify: active only once registered with NRI).
		ready := v.unitPropInt("nri-sysctl.service", "ActiveEnterTimestampMonotonic")
		kubelet := v.unitPropInt("kubelet.service", "ExecMainStartTimestampMonotonic")
		containerd := v.unitPropInt("containerd.service", "ActiveEnterTimestampMonotonic")
		t.Logf("boot: containerd ready at %.1fs, nri-sysctl ready at %.1fs, kubelet started at %.1fs", float64(containerd)/1e6, float64(ready)/1e6, float64(kubelet)/1e6)
		if ready == 0 || kubelet < ready {
			t.Errorf("kubelet started at %d µs, before nri-sysctl was ready (%d µs)", kubelet, ready)
		}
	})
	v.t = t

	cfg := nodeConfig(t)
	t.Run("config edit through the path unit", func(t *testing.T) {
		v.t = t
		since := v.unitProp("nri-sysctl-reload.service", "ExecMainExitTimestampMonotonic")
		v.writeConfig(withKeepalive(cfg, "610"))
		v.waitReloadUnit(since)
		v.eventuallyProbe("after the edit", map[string]string{"net.ipv4.tcp_keepalive_time": "610", "kernel.msgmax": "16384"})
	})
	t.Run("systemctl reload", func(t *testing.T) {
		v.t = t
		// Without the path unit, an edit alone changes nothing ...
		v.sh("systemctl stop nri-sysctl-reload.path")
		v.writeConfig(withKeepalive(cfg, "620"))
		got, err := v.probePod([]string{"net.ipv4.tcp_keepalive_time"})
		if err != nil {
			t.Fatal(err)
		}
		if got["net.ipv4.tcp_keepalive_time"] != "610" {
			t.Errorf("before systemctl reload: tcp_keepalive_time=%s, want the loaded 610", got["net.ipv4.tcp_keepalive_time"])
		}
		// ... until systemctl reload.
		v.sh("systemctl reload nri-sysctl.service")
		v.eventuallyProbe("after systemctl reload", map[string]string{"net.ipv4.tcp_keepalive_time": "620"})
		v.sh("systemctl start nri-sysctl-reload.path")
	})
	t.Run("broken edit keeps the old config", func(t *testing.T) {
		v.t = t
		pid := v.unitProp("nri-sysctl.service", "MainPID")
		since := v.unitProp("nri-sysctl-reload.service", "ExecMainExitTimestampMonotonic")
		cursor := v.sh("journalctl -u nri-sysctl -n 0 --show-cursor --no-pager | sed -n 's/^-- cursor: //p'")
		// Two kinds of bad edit: a key that is not namespaced, and a value
		// the kernel refuses.
		v.writeConfig("sysctls:\n  net.ipv4.tcp_keepalive_time: 630\n  vm.swappiness: 10\n  net.ipv4.tcp_keepalive_probes: \"abc\"\n")
		v.waitReloadUnit(since)
		time.Sleep(2 * time.Second)
		got, err := v.probePod([]string{"net.ipv4.tcp_keepalive_time", "kernel.msgmax"})
		if err != nil {
			t.Fatal(err)
		}
		if d := diffValues(got, map[string]string{"net.ipv4.tcp_keepalive_time": "620", "kernel.msgmax": "16384"}); len(d) > 0 {
			t.Errorf("after a broken edit: %s", strings.Join(d, "; "))
		} else {
			t.Logf("after a broken edit, the next pod keeps the old config: %s", formatValues(got))
		}
		if now := v.unitProp("nri-sysctl.service", "MainPID"); now != pid || v.unitProp("nri-sysctl.service", "ActiveState") != "active" {
			t.Errorf("nri-sysctl.service: MainPID %s -> %s, state %s: a broken edit must not stop the plugin", pid, now, v.unitProp("nri-sysctl.service", "ActiveState"))
		}
		journal := v.sh(fmt.Sprintf("journalctl -u nri-sysctl --no-pager -o cat --after-cursor=%s", shellQuote(strings.TrimSpace(cursor))))
		if !strings.Contains(journal, "vm.swappiness") || !strings.Contains(journal, `net.ipv4.tcp_keepalive_probes: the kernel refuses \"abc\" (invalid argument)`) {
			t.Errorf("journalctl -u nri-sysctl does not name the bad key vm.swappiness and the refused value of net.ipv4.tcp_keepalive_probes:\n%s", journal)
		} else {
			t.Logf("journalctl -u nri-sysctl after the broken edit:\n%s", lastLines(journal, 6))
		}
		since = v.unitProp("nri-sysctl-reload.service", "ExecMainExitTimestampMonotonic")
		v.writeConfig(cfg)
		v.waitReloadUnit(since)
		v.eventuallyProbe("config restored", nodeDefaults)
	})
	t.Run("systemctl restart containerd", func(t *testing.T) {
		v.t = t
		pids := v.mainPIDs()
		defer func() { t.Logf("main pids before: %s; after: %s", pids, v.mainPIDs()) }()
		pid := v.unitProp("nri-sysctl.service", "MainPID")
		v.sh("systemctl restart containerd.service")
		v.waitFor("containerd and nri-sysctl active again", 3*time.Minute, func() bool {
			out, _ := v.run("systemctl is-active containerd.service nri-sysctl.service", time.Minute)
			return out == "active\nactive"
		})
		t.Logf("nri-sysctl MainPID %s -> %s (PartOf=containerd.service restarts it with containerd)", pid, v.unitProp("nri-sysctl.service", "MainPID"))
		if err := v.waitPods(nodePods, 3*time.Minute); err != nil {
			t.Errorf("static pods after the containerd restart: %v", err)
		}
		v.eventuallyProbe("after systemctl restart containerd", nodeDefaults)
	})
	t.Run("containerd killed", func(t *testing.T) {
		v.t = t
		pids := v.mainPIDs()
		defer func() { t.Logf("main pids before: %s; after: %s", pids, v.mainPIDs()) }()
		pid := v.unitProp("nri-sysctl.service", "MainPID")
		cpid := v.unitProp("containerd.service", "MainPID")
		v.sh("systemctl kill --kill-who=main -s KILL containerd.service")
		v.waitFor("systemd restarted containerd", 3*time.Minute, func() bool {
			now := v.unitProp("containerd.service", "MainPID")
			return now != cpid && now != "0" && v.unitProp("containerd.service", "ActiveState") == "active"
		})
		now := v.unitProp("nri-sysctl.service", "MainPID")
		if now == pid {
			t.Logf("containerd crashed and came back; nri-sysctl (pid %s) stayed and reconnected by itself", pid)
		} else {
			t.Logf("containerd crashed and came back; nri-sysctl MainPID %s -> %s", pid, now)
		}
		v.eventuallyProbe("after containerd was killed", nodeDefaults)
	})
	t.Run("plugin killed", func(t *testing.T) {
		v.t = t
		pids := v.mainPIDs()
		defer func() { t.Logf("main pids before: %s; after: %s", pids, v.mainPIDs()) }()
		pid := v.unitProp("nri-sysctl.service", "MainPID")
		restarts := v.unitPropInt("nri-sysctl.service", "NRestarts")
		v.sh("kill -9 " + pid)
		v.waitFor("systemd restarted nri-sysctl", 2*time.Minute, func() bool {
			now := v.unitProp("nri-sysctl.service", "MainPID")
			return now != pid && now != "0" && v.unitProp("nri-sysctl.service", "ActiveState") == "active"
		})
		t.Logf("kill -9 %s: systemd restarted nri-sysctl as pid %s (NRestarts %d -> %d)", pid, v.unitProp("nri-sysctl.service", "MainPID"), restarts, v.unitPropInt("nri-sysctl.service", "NRestarts"))
		v.eventuallyProbe("after kill -9 of the plugin", nodeDefaults)
	})
	t.Run("systemd-analyze security", func(t *testing.T) {
		v.t = t
		out, err := v.run("systemd-analyze security --no-pager nri-sysctl.service", 3*time.Minute)
		// It exits non-zero when the score is above its threshold; the score is what counts.
		m := regexp.MustCompile(`Overall exposure level for nri-sysctl.service: ([0-9.]+) (\S+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no exposure level in the output (%v):\n%s", err, out)
		}
		t.Logf("systemd-analyze security nri-sysctl.service: %s %s\n%s", m[1], m[2], out)
		if score, _ := strconv.ParseFloat(m[1], 64); score > maxExposure {
			t.Errorf("exposure %s is above %.1f: the unit lost some of its hardening", m[1], maxExposure)
		}
	})
	// The package's upgrade and removal come last: they change what is
	// installed.
	t.Run("package upgrade", func(t *testing.T) {
		v.t = t
		checkPackageUpgrade(t, v, cfg)
	})
	t.Run("package removal", func(t *testing.T) {
		v.t = t
		checkPackageRemoval(t, v)
	})
	checkHostUntouched(t, v)
}

// checkPackageUpgrade: with an edited conffile, `dpkg -i --force-confold`
// of a newer package (whose shipped config changed too) keeps the edit,
// puts the package's config beside it as .dpkg-dist, restarts the plugin
// on the new binary, and kubelet is down no longer than that restart.
func checkPackageUpgrade(t *testing.T, v *vm, cfg string) {
	edited := withKeepalive(cfg, "640")
	since := v.unitProp("nri-sysctl-reload.service", "ExecMainExitTimestampMonotonic")
	v.writeConfig(edited)
	v.waitReloadUnit(since)
	oldVersion := strings.TrimSpace(v.sh("nri-sysctl version"))
	pid := v.unitProp("nri-sysctl.service", "MainPID")
	active := v.unitPropInt("nri-sysctl.service", "ActiveEnterTimestampMonotonic")
	kubeletPID := v.unitProp("kubelet.service", "MainPID")
	start := time.Now()
	out := v.sh("DEBIAN_FRONTEND=noninteractive dpkg -i --force-confold /" + upgradeDebInImage + " 2>&1")
	took := time.Since(start)
	t.Logf("dpkg -i --force-confold of the newer package (%s):\n%s", took.Round(time.Second), out)

	newVersion := strings.TrimSpace(v.sh("nri-sysctl version"))
	if want := upgradeVersion(t); !strings.Contains(newVersion, want) {
		t.Errorf("nri-sysctl version after the upgrade: %q, want %s (before: %q)", newVersion, want, oldVersion)
	}
	if got := v.sh("cat /etc/nri-sysctl/config.yaml"); strings.TrimSpace(got) != strings.TrimSpace(edited) {
		t.Errorf("the upgrade did not keep the edited config; /etc/nri-sysctl/config.yaml is now:\n%s", got)
	}
	if mode := v.sh("stat -c '%a %U' /etc/nri-sysctl/config.yaml"); mode != "600 root" {
		t.Errorf("config after the upgrade: mode and owner %q, want 600 root", mode)
	}
	if dist, err := v.run("cat /etc/nri-sysctl/config.yaml.dpkg-dist", time.Minute); err != nil || !strings.Contains(dist, upgradeMarker) {
		t.Errorf("no config.yaml.dpkg-dist with the newer package's config beside the kept one (%v):\n%s", err, dist)
	}
	newPID := v.unitProp("nri-sysctl.service", "MainPID")
	newActive := v.unitPropInt("nri-sysctl.service", "ActiveEnterTimestampMonotonic")
	if newPID == pid || newActive == active || v.unitProp("nri-sysctl.service", "ActiveState") != "active" {
		t.Errorf("nri-sysctl.service not restarted by the upgrade: MainPID %s -> %s, ActiveEnterTimestamp %d -> %d, state %s",
			pid, newPID, active, newActive, v.unitProp("nri-sysctl.service", "ActiveState"))
	}
	// The restart takes kubelet along (it requires the plugin): it must be
	// active again, started after the new plugin was ready, and down only
	// while the plugin restarted.
	// (systemctl restart returns once the plugin is up; kubelet's start,
	// ordered after it, may still be under way.)
	v.waitFor("kubelet active again after the upgrade", time.Minute, func() bool {
		return v.unitProp("kubelet.service", "ActiveState") == "active"
	})
	kubeletDown := v.unitPropInt("kubelet.service", "InactiveEnterTimestampMonotonic")
	kubeletUp := v.unitPropInt("kubelet.service", "ActiveEnterTimestampMonotonic")
	pluginDown := v.unitPropInt("nri-sysctl.service", "InactiveEnterTimestampMonotonic")
	t.Logf("upgrade: nri-sysctl MainPID %s -> %s, down %.1fs; kubelet MainPID %s -> %s, down %.1fs",
		pid, newPID, float64(newActive-pluginDown)/1e6, kubeletPID, v.unitProp("kubelet.service", "MainPID"), float64(kubeletUp-kubeletDown)/1e6)
	if kubeletUp < newActive {
		t.Errorf("kubelet active at %d µs, before the new plugin was ready at %d µs", kubeletUp, newActive)
	}
	if kubeletDown < pluginDown-int64(30*time.Second/time.Microsecond) || kubeletUp-newActive > int64(30*time.Second/time.Microsecond) {
		t.Errorf("kubelet down from %d to %d µs, the plugin's restart from %d to %d µs: kubelet was down longer than the restart", kubeletDown, kubeletUp, pluginDown, newActive)
	}
	if err := v.waitPods(nodePods, 3*time.Minute); err != nil {
		t.Errorf("static pods after the upgrade: %v", err)
	}
	// The new plugin runs on the kept config.
	v.eventuallyProbe("after the upgrade, the kept config", map[string]string{"net.ipv4.tcp_keepalive_time": "640", "kernel.msgmax": "16384"})
}

// checkPackageRemoval: `dpkg -r` stops the plugin, removes kubelet's
// requirement on it (no dangling kubelet.service.requires link), keeps the
// conffile, and kubelet restarts and runs pods without the plugin.
func checkPackageRemoval(t *testing.T, v *vm) {
	start := time.Now()
	out := v.sh("DEBIAN_FRONTEND=noninteractive dpkg -r nri-sysctl 2>&1")
	t.Logf("dpkg -r nri-sysctl (%s):\n%s", time.Since(start).Round(time.Second), out)
	if state := v.unitProp("nri-sysctl.service", "ActiveState"); state != "inactive" {
		t.Errorf("nri-sysctl.service is %s after dpkg -r", state)
	}
	if pids, _ := v.run("pgrep -x nri-sysctl", time.Minute); strings.TrimSpace(pids) != "" {
		t.Errorf("an nri-sysctl process is still running after dpkg -r: %s", pids)
	}
	if links, _ := v.run("ls -l /etc/systemd/system/kubelet.service.requires/ /etc/systemd/system/multi-user.target.wants/ 2>&1 | grep nri-sysctl", time.Minute); links != "" {
		t.Errorf("enablement links left after dpkg -r:\n%s", links)
	}
	if _, err := v.run("test -f /etc/nri-sysctl/config.yaml", time.Minute); err != nil {
		t.Errorf("dpkg -r removed the conffile (only a purge should): %v", err)
	}
	if out, err := v.run("systemctl restart kubelet.service && systemctl is-active kubelet.service", 3*time.Minute); err != nil {
		t.Fatalf("kubelet does not restart after dpkg -r nri-sysctl: %v\n%s", err, v.sh("systemctl status --no-pager kubelet.service 2>&1 | tail -n 15; true"))
	} else {
		t.Logf("systemctl restart kubelet after dpkg -r: %s; requires: %s", out, v.unitProp("kubelet.service", "Requires"))
	}
	// A new pod runs, with the kernel's values: nothing sets defaults now.
	got, err := v.probePod([]string{"net.ipv4.tcp_keepalive_time"})
	if err != nil {
		t.Fatalf("no pod runs after the removal and kubelet's restart: %v", err)
	}
	if got["net.ipv4.tcp_keepalive_time"] != kernelDefaults["net.ipv4.tcp_keepalive_time"] {
		t.Errorf("a pod after the removal has tcp_keepalive_time=%s, want the kernel's %s", got["net.ipv4.tcp_keepalive_time"], kernelDefaults["net.ipv4.tcp_keepalive_time"])
	} else {
		t.Logf("after the removal and kubelet's restart, a new pod runs with the kernel's tcp_keepalive_time=%s", got["net.ipv4.tcp_keepalive_time"])
	}
}

// maxExposure is the score measured in the VM (systemd 252, docs/testing.md): a
// higher one means the unit lost some of its hardening.
const maxExposure = 3.0

func TestVMPreinstalled(t *testing.T) {
	skipUnlessVM(t)
	img := getNodeImage(t, specContainerd)
	v := bootVM(t, img, "preinstalled", os.Getenv("NRI_SYSCTL_VM_BREAK"))
	checkNodePods(t, v, podTimeout())
	if t.Failed() {
		return
	}
	if state := v.unitProp("nri-sysctl.service", "ActiveState"); state != "inactive" {
		t.Errorf("nri-sysctl.service is %s: the pre-installed boot must run without it", state)
	}
	// The image's config.toml raises it for TCG (containerdConfig): the
	// drop-ins merged over it must not have reset it.
	if out, err := v.run("containerd config dump | grep -E 'plugin_(request|registration)_timeout'", 2*time.Minute); err != nil || !strings.Contains(out, "plugin_request_timeout = '"+vmPluginRequestTimeout+"'") || !strings.Contains(out, "plugin_registration_timeout = '5s'") {
		t.Errorf("containerd's merged NRI timeouts are not the image's %s and the drop-in's 5s (%v):\n%s", vmPluginRequestTimeout, err, out)
	}
	// The plugin runs as containerd's child, from /opt/nri/plugins.
	parent := func() (pid, ppid string) {
		out := v.sh(`for p in /proc/[0-9]*; do [ "$(readlink $p/exe 2>/dev/null)" = /opt/nri/plugins/90-sysctl ] && echo "${p#/proc/} $(awk '{print $4}' $p/stat)"; done; true`)
		f := strings.Fields(out)
		if len(f) != 2 {
			t.Fatalf("want one /opt/nri/plugins/90-sysctl process, found %q", out)
		}
		return f[0], f[1]
	}
	pid, ppid := parent()
	if cpid := v.unitProp("containerd.service", "MainPID"); ppid != cpid {
		t.Errorf("/opt/nri/plugins/90-sysctl (pid %s) has parent %s, containerd is %s", pid, ppid, cpid)
	} else {
		t.Logf("/opt/nri/plugins/90-sysctl runs as pid %s, a child of containerd (pid %s)", pid, cpid)
	}
	v.sh("systemctl restart containerd.service")
	v.waitFor("containerd active again", 3*time.Minute, func() bool {
		out, _ := v.run("systemctl is-active containerd.service", time.Minute)
		return out == "active"
	})
	pid2, ppid2 := parent()
	t.Logf("after systemctl restart containerd: plugin pid %s -> %s (parent %s)", pid, pid2, ppid2)
	v.eventuallyProbe("pre-installed, after systemctl restart containerd", nodeDefaults)
	checkHostUntouched(t, v)
}

func TestVMNamespaceMode(t *testing.T) {
	skipUnlessVM(t)
	img := getNodeImage(t, namespaceContainerd)
	v := bootVM(t, img, "service", os.Getenv("NRI_SYSCTL_VM_BREAK"))
	checkNodePods(t, v, podTimeout())
	if t.Failed() {
		return
	}
	// containerd 2.2.x dies on any NRI sysctl adjustment (runtime-notes):
	// it never restarted, so the plugin used namespace mode.
	if n := v.unitProp("containerd.service", "NRestarts"); n != "0" {
		t.Errorf("containerd %s restarted %s times", namespaceContainerd, n)
	}
	v.eventuallyProbe("namespace mode, a pod after boot", nodeDefaults)
	checkSysrqReachesGuest(t, v)
}

// checkSysrqReachesGuest: what a failed test prints of a wedged guest
// (stop, sysrqBlockedTasks) works, so that it is there the day it is needed.
func checkSysrqReachesGuest(t *testing.T, v *vm) {
	t.Helper()
	if err := v.sysrqBlockedTasks(); err != nil {
		t.Fatalf("[%s] %v", v.name, err)
	}
	data, err := os.ReadFile(v.console)
	if err != nil {
		t.Fatal(err)
	}
	reports := kernelReports(string(data))
	if !slices.Contains(reports, "1× sysrq: Show Blocked State") {
		t.Errorf("[%s] sysrq w through qemu's monitor left no blocked-task list on the console; the folded reports: %q", v.name, reports)
	} else {
		t.Logf("[%s] sysrq w reaches the guest kernel (what a failed test prints of a wedged guest): %q", v.name, reports)
	}
}

// TestVMBrokenUnitIsCaught is the control: with ProtectHostname=yes put
// back into nri-sysctl.service, the namespace-mode checks above must fail
// on kernel.domainname. If they passed, they would prove nothing.
func TestVMBrokenUnitIsCaught(t *testing.T) {
	skipUnlessVM(t)
	img := getNodeImage(t, namespaceContainerd)
	v := bootVM(t, img, "service", "protecthostname")
	// The kernel probe sees /proc/sys/kernel/domainname read-only in the
	// unit's mount namespace: the plugin refuses its config and does not
	// start, so kubelet (which requires it) never starts and runs no pod.
	// That is the broken unit caught at boot, before any pod. It shows as
	// the refusal naming the key, made again after a restart (so it is no
	// passing fault), with kubelet never started and no container running;
	// had the plugin started instead, a pod runs.
	var caught string
	v.waitFor("the plugin's refusal naming kernel.domainname, or a running pod", 4*time.Minute, func() bool {
		if id, err := v.appContainer("hostnet"); err == nil && id != "" {
			return true
		}
		why, _ := v.run("journalctl -u nri-sysctl --no-pager -o cat | grep -m3 -i domainname", time.Minute)
		if strings.Contains(why, "kernel.domainname") && v.unitPropInt("nri-sysctl.service", "NRestarts") >= 1 {
			caught = why
			return true
		}
		return false
	})
	if caught != "" {
		started := v.unitPropInt("kubelet.service", "ExecMainStartTimestampMonotonic")
		running, err := v.run("crictl ps -q --state running", 2*time.Minute)
		if started != 0 || err != nil || strings.TrimSpace(running) != "" {
			t.Fatalf("the plugin refused its config, yet kubelet started at %d µs (want never) and the running containers are %q (%v)", started, running, err)
		}
		t.Logf("as it must, the broken unit is caught: nri-sysctl refuses to start (NRestarts %d), kubelet never started, no container runs:\n%s",
			v.unitPropInt("nri-sysctl.service", "NRestarts"), caught)
		return
	}
	// Had the plugin started, the pods are where it shows: hostnet has no
	// UTS namespace of its own, nothing to write, so it starts.
	r := &recorder{t: t}
	checkNodePods(r, v, 90*time.Second)
	if len(r.errors) == 0 {
		t.Fatalf("every check passed with ProtectHostname=yes in the unit: the checks cannot see a broken unit")
	}
	joined := strings.Join(r.errors, "\n")
	if !strings.Contains(joined, "plain") {
		t.Errorf("the checks failed, but not for the plain pod:\n%s", joined)
	}
	t.Logf("as it must, the node checks fail with ProtectHostname=yes:\n%s", joined)
	why, _ := v.run("journalctl -u kubelet --no-pager -o cat | grep -m3 -i domainname", time.Minute)
	t.Logf("kubelet's journal says why:\n%s", why)
}
