// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/podns/podnstest"
)

// TestConvergeRunningPods: pods that run before the plugin's
// first start get the defaults without a restart; a reload reaches them;
// a key that leaves the config goes back to the value the pod had before
// the plugin's first write (a fresh namespace's for a pod created under
// the plugin), also after a restart of the plugin; a value
// another writer set stays; the pod's own value, an excluded pod, a
// hostNetwork pod's net keys and the host's values are untouched. Every
// value is read inside the pods' containers, or on the host.
func TestConvergeRunningPods(t *testing.T) {
	const space, excludedSpace = "e2e-converge", "e2e-converge-excluded"
	c := getCluster(t)
	hostLock.hold(t, false) // compares the host's values (hostlock_test.go)
	checkMeaningful(t, nodeDefaults)
	keys := sortedKeys(nodeDefaults)
	kernel := only(c.kernel, keys...)
	stateDir := filepath.Join(t.TempDir(), "pods")
	exclude := "exclude:\n  namespaces: [" + excludedSpace + "]\n"

	plain := runPod(t, PodSpec{Name: "plain", Namespace: space})
	own := runPod(t, PodSpec{Name: "own", Namespace: space, Sysctls: map[string]string{"net.ipv4.tcp_keepalive_intvl": "33"}})
	excluded := runPod(t, PodSpec{Name: "excluded", Namespace: excludedSpace})
	hostNet := runPod(t, PodSpec{Name: "hostnet", Namespace: space, HostNetwork: true})
	ctr := map[*Pod]string{}
	for _, pod := range []*Pod{plain, own, excluded, hostNet} {
		ctr[pod] = runContainer(t, pod, "app")
	}
	wantSysctls(t, "plain pod before the plugin", readSysctls(t, ctr[plain], keys...), kernel)
	hostBefore := map[string]string{}
	for _, k := range keys {
		hostBefore[k] = hostSysctl(t, k)
	}
	// What each pod holds once converged to defaults: the pod's own key,
	// the host's net keys in the hostNetwork pod (its IPC is its own).
	expect := func(defaults map[string]string) map[*Pod]map[string]string {
		return map[*Pod]map[string]string{
			plain:    defaults,
			own:      with(defaults, "net.ipv4.tcp_keepalive_intvl", "33"),
			excluded: kernel,
			hostNet:  with(only(hostBefore, keys...), "kernel.msgmax", defaults["kernel.msgmax"]),
		}
	}
	converged := func(what string, want map[*Pod]map[string]string) {
		t.Helper()
		waitUntil(t, 20*time.Second, what, func() (bool, string) {
			for pod, w := range want {
				got := readSysctls(t, ctr[pod], keys...)
				if !mapsEqualOn(got, w, keys) {
					return false, fmt.Sprintf("%s: %v, want %v", pod.Spec.Name, got, w)
				}
			}
			return true, ""
		})
		for _, k := range keys {
			if v := hostSysctl(t, k); v != hostBefore[k] {
				t.Errorf("%s: the host's %s changed: %q, was %q", what, k, v, hostBefore[k])
			}
		}
	}

	first := startPlugin(t, defaultsYAML(nodeDefaults)+exclude, "--pod-state-dir", stateDir)
	converged("pods running before the plugin's first start", expect(nodeDefaults))
	// A pod created under the plugin: the plugin never saw its values
	// before its own, so a key that leaves the config goes back to a
	// fresh namespace's value, the kernel's here.
	late := runPod(t, PodSpec{Name: "late", Namespace: space})
	ctr[late] = runContainer(t, late, "app")
	wantSysctls(t, "pod created under the plugin", readSysctls(t, ctr[late], keys...), nodeDefaults)

	// Another writer (an operator by hand) sets a key the plugin set.
	const otherValue = "41"
	setInPod(t, c, plain, "net.ipv4.tcp_keepalive_intvl", otherValue)

	// A reload to a new value, with kernel.msgmax out of the config.
	next := with(nodeDefaults, "net.ipv4.tcp_keepalive_time", "650")
	delete(next, "kernel.msgmax")
	rewriteConfig(t, first.configPath, defaultsYAML(next)+exclude)
	sighup(t, first)
	afterReload := expect(with(next, "kernel.msgmax", kernel["kernel.msgmax"]))
	afterReload[plain] = with(afterReload[plain], "net.ipv4.tcp_keepalive_intvl", otherValue)
	afterReload[hostNet] = with(afterReload[hostNet], "kernel.msgmax", kernel["kernel.msgmax"])
	afterReload[late] = afterReload[own]
	afterReload[late] = with(afterReload[late], "net.ipv4.tcp_keepalive_intvl", next["net.ipv4.tcp_keepalive_intvl"])
	converged("a reload (650, kernel.msgmax removed, another writer's intvl)", afterReload)

	// A restart of the plugin on the same state: the plugin's own values
	// are known as its own, so tcp_keepalive_time, once out of the config,
	// goes back to the kernel's, and the other writer's value still stays.
	first.stop()
	last := with(next, "net.ipv4.tcp_keepalive_time", kernel["net.ipv4.tcp_keepalive_time"])
	delete(last, "net.ipv4.tcp_keepalive_time")
	startPlugin(t, defaultsYAML(last)+exclude, "--pod-state-dir", stateDir)
	afterRestart := expect(with(last, "net.ipv4.tcp_keepalive_time", kernel["net.ipv4.tcp_keepalive_time"]))
	for pod := range afterRestart {
		afterRestart[pod] = with(afterRestart[pod], "kernel.msgmax", kernel["kernel.msgmax"])
	}
	afterRestart[hostNet] = with(afterRestart[hostNet], "net.ipv4.tcp_keepalive_time", hostBefore["net.ipv4.tcp_keepalive_time"])
	afterRestart[plain] = with(afterRestart[plain], "net.ipv4.tcp_keepalive_intvl", otherValue)
	afterRestart[late] = with(afterRestart[own], "net.ipv4.tcp_keepalive_intvl", last["net.ipv4.tcp_keepalive_intvl"])
	converged("a restart with tcp_keepalive_time out of the config", afterRestart)
}

// setInPod writes key=value into the pod's network namespace from the
// host, as an operator would by hand.
func setInPod(t *testing.T, c *cluster, pod *Pod, key, value string) {
	t.Helper()
	file := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
	if out, err := c.command("nsenter", "--net="+c.podNetnsPath(t, pod.ID), "sh", "-c", "echo "+value+" > "+file).CombinedOutput(); err != nil {
		t.Fatalf("set %s=%s in pod %s: %v\n%s", key, value, pod.Spec.Name, err, out)
	}
}

// TestConvergeUserNamespacePod: a hostUsers: false pod running before the
// plugin converges where the host-side writer can (a net key, and
// ping_group_range clamped to the pod's GID mapping), and an IPC key that
// writer cannot set there stays the kernel's, counted once as cannot
// converge.
func TestConvergeUserNamespacePod(t *testing.T) {
	id := runUserNamespacePod(t, "userns", "e2e-converge-userns")
	keys := []string{"kernel.msgmax", "net.ipv4.ping_group_range", "net.ipv4.tcp_keepalive_time"}
	before := readSysctls(t, id, keys...)
	if before["net.ipv4.tcp_keepalive_time"] == "600" || before["kernel.msgmax"] == "16384" {
		t.Fatalf("values before the plugin already the config's: %v", before)
	}
	addr := freeAddress(t)
	startPlugin(t, "sysctls:\n  net.ipv4.ping_group_range: \"0 2147483647\"\n  net.ipv4.tcp_keepalive_time: \"600\"\n  kernel.msgmax: \"16384\"\n", "--metrics-address", addr)
	waitUntil(t, 20*time.Second, "the user-namespace pod to converge", func() (bool, string) {
		got := readSysctls(t, id, keys...)
		return got["net.ipv4.tcp_keepalive_time"] == "600" && strings.Join(strings.Fields(got["net.ipv4.ping_group_range"]), " ") == "0 65535", fmt.Sprintf("%v", got)
	})
	if got := readSysctl(t, id, "kernel.msgmax"); got != before["kernel.msgmax"] {
		t.Errorf("kernel.msgmax = %s in the user-namespace pod, want it left at %s", got, before["kernel.msgmax"])
	}
	const cannot = `nri_sysctl_converge_keys_total{result="cannot_converge"}`
	waitUntil(t, 10*time.Second, "kernel.msgmax counted as cannot converge", func() (bool, string) {
		m := scrape(t, addr)
		return m[cannot] == 1, fmt.Sprintf("%s = %v", cannot, m[cannot])
	})
}

// TestConvergeContainerStartedAfterAReload: a container decided (created)
// under the config before a reload and started after its pod converged.
// In spec mode runc writes the older value from its spec as it starts it;
// that value is the plugin's own, and the pass the convergence asked for
// (30 s after it) brings the pod back to the new one, read inside both
// containers. In namespace mode the spec carries nothing: the pod keeps
// the new value throughout.
func TestConvergeContainerStartedAfterAReload(t *testing.T) {
	const key = "net.ipv4.tcp_keepalive_time"
	c := getCluster(t)
	hostLock.hold(t, false) // compares the host's values (hostlock_test.go)
	if c.kernel[key] == "600" || c.kernel[key] == "650" {
		t.Fatalf("the kernel's %s is already %s: the test would prove nothing", key, c.kernel[key])
	}
	hostBefore := hostSysctl(t, key)
	plugin := startPlugin(t, "sysctls:\n  "+key+": \"600\"\n", "--pod-state-dir", filepath.Join(t.TempDir(), "pods"))
	pod := runPod(t, PodSpec{Name: "late-start", Namespace: "e2e-converge-late"})
	// Both decided under 600 before either starts: once one has started,
	// the pod's values are in place and a later container carries none.
	first := createContainer(t, pod, "app")
	late := createContainer(t, pod, "late")
	startContainer(t, first)
	if got := readSysctl(t, first, key); got != "600" {
		t.Fatalf("first container: %s=%s, want 600", key, got)
	}

	rewriteConfig(t, plugin.configPath, "sysctls:\n  "+key+": \"650\"\n")
	sighup(t, plugin)
	waitUntil(t, 20*time.Second, "the pod to converge to 650", func() (bool, string) {
		got := readSysctl(t, first, key)
		return got == "650", got
	})
	startContainer(t, late)
	spec := pluginMode(plugin) == "spec"
	// Its start asks for a pass at once (spec mode), which may already be
	// done when the value is first read.
	if got := readSysctl(t, late, key); spec && got != "600" && got != "650" {
		t.Fatalf("spec mode: right after the late container started %s=%s, want 600 from its spec, or 650 once the pass its start asked for is done", key, got)
	} else if !spec && got != "650" {
		t.Fatalf("namespace mode: the late container started with %s=%s, want 650", key, got)
	}
	took := waitUntil(t, 50*time.Second, "the pod back at 650 after the late container started", func() (bool, string) {
		a, b := readSysctl(t, first, key), readSysctl(t, late, key)
		return a == "650" && b == "650", "app " + a + ", late " + b
	})
	t.Logf("back at 650 %s after the late container started (mode %s)", took.Round(time.Second), pluginMode(plugin))
	if v := hostSysctl(t, key); v != hostBefore {
		t.Errorf("the host's %s changed: %q, was %q", key, v, hostBefore)
	}
}

// TestSpecLandingAcrossARestart: two spec-mode containers decided under
// 600 and created, not started, when a reload converges their pod to 650;
// the plugin restarts; then one starts at once and the other more than
// 30 s later, each time runc writing its spec's 600 over 650. The
// restarted plugin knows 600 for its own from the created containers
// Synchronize listed, and brings the pod back to 650 after each, read
// inside the containers; a plugin that knew nothing of them left 600 as
// another writer's for good.
func TestSpecLandingAcrossARestart(t *testing.T) {
	const key = "net.ipv4.tcp_keepalive_time"
	c := getCluster(t)
	if c.kernel[key] == "600" || c.kernel[key] == "650" {
		t.Fatalf("the kernel's %s is already %s: the test would prove nothing", key, c.kernel[key])
	}
	stateDir := filepath.Join(t.TempDir(), "pods")
	addr := freeAddress(t)
	plugin := startPlugin(t, "sysctls:\n  "+key+": \"600\"\n", "--pod-state-dir", stateDir, "--metrics-address", addr)
	if mode := pluginMode(plugin); mode != "spec" {
		t.Skipf("mode %s: no container's spec carries the plugin's values", mode)
	}
	pod := runPod(t, PodSpec{Name: "lands-after-restart", Namespace: "e2e-converge-restart"})
	late := createContainer(t, pod, "late")
	later := createContainer(t, pod, "later")

	const written = `nri_sysctl_converge_keys_total{result="written"}`
	before := scrape(t, addr)
	rewriteConfig(t, plugin.configPath, "sysctls:\n  "+key+": \"650\"\n")
	sighup(t, plugin)
	waitUntil(t, 20*time.Second, "the reload's pass to write 650 into the pod", func() (bool, string) {
		m := scrape(t, addr)
		return m[written] > before[written], fmt.Sprintf("written %v", m[written])
	})
	plugin.stop()
	startPlugin(t, "sysctls:\n  "+key+": \"650\"\n", "--pod-state-dir", stateDir)
	restarted := time.Now()

	startContainer(t, late)
	if got := readSysctl(t, late, key); got != "600" && got != "650" {
		t.Fatalf("right after it started: %s=%s, want 600 from its spec (or 650, were the plugin that quick)", key, got)
	}
	took := waitUntil(t, 75*time.Second, "the pod back at 650 after the first container started", func() (bool, string) {
		got := readSysctl(t, late, key)
		return got == "650", got
	})
	t.Logf("back at 650 %s after the first container started", took.Round(time.Second))

	// Past the 30 s in which the restarted plugin counts what a listed
	// container carries as landing: only the start tells it.
	time.Sleep(time.Until(restarted.Add(32 * time.Second)))
	startContainer(t, later)
	took = waitUntil(t, 20*time.Second, "the pod back at 650 after the second container started", func() (bool, string) {
		a, b := readSysctl(t, late, key), readSysctl(t, later, key)
		return a == "650" && b == "650", "late " + a + ", later " + b
	})
	t.Logf("back at 650 %s after the second container started, %s after the restart", took.Round(time.Millisecond), time.Since(restarted).Round(time.Second))
}

// TestConvergeContainerNeverStarted: a spec-mode container the plugin
// answered for and that never started (removed here, as when its creation fails after
// the plugin: containerd restarted, a later plugin refused it) leaves its
// pod at the kernel's values while the plugin's record says
// it set its own. The pass after a reload must not take them for another
// writer's: the pod's next container has the defaults, read inside it
// (make soak found it started bare). The pass is awaited by its counters.
func TestConvergeContainerNeverStarted(t *testing.T) {
	c := getCluster(t)
	checkMeaningful(t, nodeDefaults)
	keys := sortedKeys(nodeDefaults)
	addr := freeAddress(t)
	plugin := startPlugin(t, defaultsYAML(nodeDefaults), "--pod-state-dir", filepath.Join(t.TempDir(), "pods"), "--metrics-address", addr)
	if mode := pluginMode(plugin); mode != "spec" {
		t.Skipf("mode %s: the plugin writes the pod itself at RunPodSandbox, so no container's failure can mislead its record", mode)
	}
	pod := runPod(t, PodSpec{Name: "never-started", Namespace: "e2e-converge-never"})
	unstarted := createContainer(t, pod, "app-0")
	if out, err := c.crictlRaw("rm", unstarted); err != nil {
		t.Fatalf("crictl rm %s: %v\n%s", unstarted, err, out)
	}
	const written, left = `nri_sysctl_converge_keys_total{result="written"}`, `nri_sysctl_converge_keys_total{result="left_to_other"}`
	before := scrape(t, addr)
	rewriteConfig(t, plugin.configPath, "# reloaded\n"+defaultsYAML(nodeDefaults))
	sighup(t, plugin)
	waitUntil(t, 20*time.Second, "the reload's pass to act on the pod", func() (bool, string) {
		m := scrape(t, addr)
		return m[written] > before[written] || m[left] > before[left], fmt.Sprintf("written %v, left to another writer %v", m[written], m[left])
	})
	next := runContainer(t, pod, "app-1")
	wantSysctls(t, "the next container", readSysctls(t, next, keys...), nodeDefaults)
	if m := scrape(t, addr); m[left] != before[left] {
		t.Errorf("the pass left %v key(s) to another writer; nothing but the plugin wrote the pod", m[left]-before[left])
	}
}

// TestConvergeStoppedPodWritesNothing: a hostNetwork pod (its own IPC)
// stopped but not removed, as kubelet leaves a finished Job's pod, and
// its sandbox's pid given to an unrelated process with an IPC namespace
// of its own; then a reload. The unrelated process keeps its value (read
// inside it), a running pod converges meanwhile, and no failure is
// counted.
func TestConvergeStoppedPodWritesNothing(t *testing.T) {
	const space = "e2e-converge-stopped"
	c := getCluster(t)
	keys := []string{"kernel.msgmax"}
	witness := runPod(t, PodSpec{Name: "witness", Namespace: space})
	witnessCtr := runContainer(t, witness, "app")
	stopped := runPod(t, PodSpec{Name: "stopped", Namespace: space, HostNetwork: true})
	stoppedCtr := runContainer(t, stopped, "app")
	addr := freeAddress(t)
	p := startPlugin(t, defaultsYAML(only(nodeDefaults, keys...)), "--metrics-address", addr)
	waitUntil(t, 20*time.Second, "both pods to converge", func() (bool, string) {
		a, b := readSysctl(t, witnessCtr, "kernel.msgmax"), readSysctl(t, stoppedCtr, "kernel.msgmax")
		return a == nodeDefaults["kernel.msgmax"] && b == a, fmt.Sprintf("witness %s, stopped %s", a, b)
	})
	pid := c.sandboxPid(t, stopped.ID)
	if _, err := c.crictlRaw("stopp", stopped.ID); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 20*time.Second, "the stopped pod's sandbox process to exit", func() (bool, string) {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
		return os.IsNotExist(err), fmt.Sprintf("/proc/%d: %v", pid, err)
	})
	podnstest.StartWithPid(t, syscall.CLONE_NEWIPC, pid)
	before := podnstest.ReadIn(t, pid, "-i", "/proc/sys/kernel/msgmax")

	const next = "24576"
	rewriteConfig(t, p.configPath, defaultsYAML(map[string]string{"kernel.msgmax": next}))
	sighup(t, p)
	waitUntil(t, 20*time.Second, "the running pod to converge after the reload", func() (bool, string) {
		got := readSysctl(t, witnessCtr, "kernel.msgmax")
		return got == next, "witness " + got
	})
	// Passes run one after another: once a second reload's pass reaches
	// the witness, the first reload's has been through every pod.
	const second = "20480"
	rewriteConfig(t, p.configPath, defaultsYAML(map[string]string{"kernel.msgmax": second}))
	sighup(t, p)
	waitUntil(t, 20*time.Second, "the running pod to converge after a second reload", func() (bool, string) {
		got := readSysctl(t, witnessCtr, "kernel.msgmax")
		return got == second, "witness " + got
	})
	if got := podnstest.ReadIn(t, pid, "-i", "/proc/sys/kernel/msgmax"); got != before {
		t.Errorf("an unrelated process under the stopped pod's pid: kernel.msgmax went from %s to %s", before, got)
	}
	const failed = `nri_sysctl_converge_keys_total{result="failed"}`
	if m := scrape(t, addr); m[failed] != 0 {
		t.Errorf("%s = %v, want 0", failed, m[failed])
	}
}

// TestConvergeFirstWriteKeepsAnEarlierWriter: the plugin's first write
// into a pod goes only over a value nobody set. In a pod running before
// the plugin, a value another writer set first (a privileged init
// container's; here from the host) stays while the plugin's other keys
// reach the pod, the runtime's own ip_unprivileged_port_start included; a
// reload that adds a key another writer set keeps that one too, and
// writes one nobody set. Every value is read inside the container.
func TestConvergeFirstWriteKeepsAnEarlierWriter(t *testing.T) {
	const space = "e2e-converge-first"
	c := getCluster(t)
	pod := runPod(t, PodSpec{Name: "older", Namespace: space})
	ctr := runContainer(t, pod, "app")
	const earlier, earlierAtReload = "3000", "3"
	setInPod(t, c, pod, "net.core.somaxconn", earlier)

	cfg := only(nodeDefaults, "net.ipv4.tcp_keepalive_time", "net.core.somaxconn", "net.ipv4.ip_unprivileged_port_start")
	p := startPlugin(t, defaultsYAML(cfg))
	waitUntil(t, 20*time.Second, "the keys nobody set to converge", func() (bool, string) {
		keepalive, ports := readSysctl(t, ctr, "net.ipv4.tcp_keepalive_time"), readSysctl(t, ctr, "net.ipv4.ip_unprivileged_port_start")
		return keepalive == cfg["net.ipv4.tcp_keepalive_time"] && ports == cfg["net.ipv4.ip_unprivileged_port_start"], "tcp_keepalive_time " + keepalive + ", ip_unprivileged_port_start " + ports
	})
	// One pass writes a pod's keys in one visit: the earlier writer's
	// would have been written with them.
	if got := readSysctl(t, ctr, "net.core.somaxconn"); got != earlier {
		t.Errorf("an earlier writer's net.core.somaxconn = %s, want %s kept", got, earlier)
	}

	setInPod(t, c, pod, "net.ipv4.tcp_keepalive_probes", earlierAtReload)
	next := with(with(cfg, "net.ipv4.tcp_keepalive_probes", "5"), "net.ipv4.tcp_fin_timeout", "30")
	rewriteConfig(t, p.configPath, defaultsYAML(next))
	sighup(t, p)
	waitUntil(t, 20*time.Second, "a key nobody set, added by a reload, to converge", func() (bool, string) {
		got := readSysctl(t, ctr, "net.ipv4.tcp_fin_timeout")
		return got == next["net.ipv4.tcp_fin_timeout"], "tcp_fin_timeout " + got
	})
	for key, want := range map[string]string{"net.ipv4.tcp_keepalive_probes": earlierAtReload, "net.core.somaxconn": earlier} {
		if got := readSysctl(t, ctr, key); got != want {
			t.Errorf("after a reload adding it, an earlier writer's %s = %s, want %s kept", key, got, want)
		}
	}
}

// TestNextContainerKeepsAnotherWritersValue: once a pod's values are in
// place, its later containers write nothing into it, so a value another
// writer set since survives them: set after the pod's first container
// (spec mode's next spec would carry the plugin's over it), and set after
// a restart of the plugin with runningPods: keep (namespace mode's next
// container would write every key into a pod it had not written since
// it started). Values are read inside the containers.
func TestNextContainerKeepsAnotherWritersValue(t *testing.T) {
	const space, key = "e2e-next-container", "net.core.somaxconn"
	c := getCluster(t)
	stateDir := filepath.Join(t.TempDir(), "pods")
	cfg := defaultsYAML(nodeDefaults)
	first := startPlugin(t, cfg, "--pod-state-dir", stateDir)
	pod := runPod(t, PodSpec{Name: "in-place", Namespace: space})
	app := runContainer(t, pod, "app")
	if got := readSysctl(t, app, key); got != nodeDefaults[key] {
		t.Fatalf("first container: %s=%s, want the default %s (else this case is not exercised)", key, got, nodeDefaults[key])
	}
	for i, step := range []struct{ what, value string }{
		{"another writer after the first container", "3001"},
		{"another writer after a restart with runningPods: keep", "3002"},
	} {
		if i == 1 {
			first.stop()
			startPlugin(t, cfg, "--pod-state-dir", stateDir, "--running-pods", "keep")
		}
		setInPod(t, c, pod, key, step.value)
		next := runContainer(t, pod, fmt.Sprint("next-", i))
		for name, id := range map[string]string{"the next container": next, "the first container": app} {
			if got := readSysctl(t, id, key); got != step.value {
				t.Errorf("%s: %s reads %s=%s, want %s kept", step.what, name, key, got, step.value)
			}
		}
		if got := readSysctl(t, next, "net.ipv4.tcp_keepalive_time"); got != nodeDefaults["net.ipv4.tcp_keepalive_time"] {
			t.Errorf("%s: the next container reads tcp_keepalive_time=%s, want %s", step.what, got, nodeDefaults["net.ipv4.tcp_keepalive_time"])
		}
	}
}

// sandboxPid is the pod's sandbox process, as crictl inspectp shows it.
func (c *cluster) sandboxPid(t *testing.T, podID string) int {
	t.Helper()
	out, err := c.crictlRaw("inspectp", "-o", "json", podID)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Info struct {
			Pid int `json:"pid"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Info.Pid <= 0 {
		t.Fatalf("no sandbox pid in crictl inspectp (%v):\n%s", err, out)
	}
	return v.Info.Pid
}

// TestConvergeListAcrossRestarts: a list value (ip_local_reserved_ports,
// whose fresh value is empty) set in a pod running before the plugin and
// in a pod created under it is known as the plugin's own after a restart:
// a new list reaches both, and once the key leaves the config both go
// back to the empty list. Read inside the containers.
func TestConvergeListAcrossRestarts(t *testing.T) {
	const space, key = "e2e-converge-list", "net.ipv4.ip_local_reserved_ports"
	const first, next = "30000-30010,31000", "30000-30020,31000"
	stateDir := filepath.Join(t.TempDir(), "pods")
	before := runPod(t, PodSpec{Name: "before", Namespace: space})
	ctrs := []string{runContainer(t, before, "app")}
	if got := readSysctl(t, ctrs[0], key); got != "" {
		t.Fatalf("a fresh pod's %s is %q, want it empty", key, got)
	}
	list := func(v string) string { return "sysctls:\n  " + key + ": \"" + v + "\"\n" }
	all := func(what, want string) {
		t.Helper()
		waitUntil(t, 20*time.Second, what, func() (bool, string) {
			var got []string
			for _, id := range ctrs {
				got = append(got, readSysctl(t, id, key))
			}
			return got[0] == want && got[len(got)-1] == want, fmt.Sprintf("%q, want %q", got, want)
		})
	}

	p := startPlugin(t, list(first), "--pod-state-dir", stateDir)
	created := runPod(t, PodSpec{Name: "created", Namespace: space})
	ctrs = append(ctrs, runContainer(t, created, "app"))
	all("the list in the pod from before and in the pod created under the plugin", first)
	p.stop()

	p = startPlugin(t, list(next), "--pod-state-dir", stateDir)
	all("a new list after a restart", next)
	p.stop()

	startPlugin(t, "sysctls:\n  kernel.msgmax: 16384\n", "--pod-state-dir", stateDir)
	all("the key out of the config after a restart: back to the empty list", "")
}
