// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

// Faults: the plugin dies in the middle of pod creation, and the plugin
// cannot reach containerd to read a pod's own sysctls. In both, pods must
// start (fail-open) and no pod may get a wrong value. And the plugin
// stopped in the middle of a request on a fail-closed containerd: no
// container may start without the defaults. Values are read inside
// containers; the plugin's log is read only to check the plugin's own
// reports (the Synchronize count, the once-per-pod warning), never as
// evidence of what a pod got.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	annotationSkipped = "nri-sysctl.io/skipped"
	annotationOutcome = "nri-sysctl.io/outcome"
)

// killablePlugin is a plugin run that a test may kill on purpose: once
// killed, its exit is not counted as a failure.
type killablePlugin struct {
	*pluginProc
}

// startKillablePlugin is startPlugin for a plugin the test will SIGKILL.
func startKillablePlugin(t *testing.T, configYAML string, extraArgs ...string) *killablePlugin {
	t.Helper()
	return &killablePlugin{startPlugin(t, configYAML, extraArgs...)}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *killablePlugin) kill(t *testing.T) {
	t.Helper()
	p.stoppedByTest.Store(true)
	if err := syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill plugin pid %d: %v", p.cmd.Process.Pid, err)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("plugin pid %d still running 10s after SIGKILL", p.cmd.Process.Pid)
	}
}

// waitLogContains waits until the plugin's log holds s.
func waitLogContains(p *pluginProc, s string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if data, err := os.ReadFile(p.logPath); err == nil && bytes.Contains(data, []byte(s)) {
			return nil
		}
		if !p.running() {
			return fmt.Errorf("plugin exited (%w) before logging %q\n--- plugin log ---\n%s", p.waitErr, s, tail(p.logPath, 80))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("plugin did not log %q within %s\n--- plugin log ---\n%s", s, timeout, tail(p.logPath, 80))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runningContainerIDs lists containerd's running containers.
func (c *cluster) runningContainerIDs() ([]string, error) {
	out, err := c.crictlRaw("ps", "-q", "--state", "running")
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

// missingReport matches the plugin's Synchronize report.
var missingReport = regexp.MustCompile(`running containers lack the node's sysctl defaults.* containers=(\d+)`)

// TestPluginKilledDuringBurst: the plugin gets SIGKILL while a burst of 20
// pods is being created one after the other. Every pod starts. Pods created
// before the kill have the defaults, pods created after it the values
// without plugin; the pod in flight has one or the other, never a mix. A
// new plugin instance then reports, at Synchronize, exactly the running
// containers created without it.
func TestPluginKilledDuringBurst(t *testing.T) {
	const (
		burst      = 20
		killAfter  = 5
		burstSpace = "e2e-burst"
	)
	c := getCluster(t)
	burstLock.hold(t, true) // hostlock_test.go
	checkMeaningful(t, nodeDefaults)
	keys := sortedKeys(nodeDefaults)
	kernel := only(c.kernel, keys...)
	// Synchronize counts every running container of the node; this test
	// must know all of them.
	if ids, err := c.runningContainerIDs(); err != nil {
		t.Fatal(err)
	} else if len(ids) > 0 {
		t.Fatalf("%d running container(s) left by another test (%v): the plugin's Synchronize count would include them", len(ids), ids)
	}

	cfg := defaultsYAML(nodeDefaults)
	first := startKillablePlugin(t, cfg)

	type result struct {
		concPod
		started, done time.Time
	}
	results := make([]result, burst)
	progress := make(chan int, burst)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for i := 0; i < burst; i++ {
			results[i].started = time.Now()
			results[i].concPod = c.runPodWithContainer(PodSpec{Name: fmt.Sprintf("burst-%02d", i), Namespace: burstSpace}, keys)
			results[i].done = time.Now()
			progress <- i
		}
	}()
	t.Cleanup(func() {
		<-finished
		for _, r := range results {
			if r.pod != nil {
				c.removePod(r.pod.ID)
			}
		}
	})

	for done := 0; done < killAfter; done++ {
		select {
		case <-progress:
		case <-time.After(2 * time.Minute):
			t.Fatal("burst stalled before the kill")
		}
	}
	killAt := time.Now()
	first.kill(t)
	deadAt := time.Now()
	t.Logf("plugin pid %d killed (SIGKILL) after %d pods; gone %s later", first.cmd.Process.Pid, killAfter, deadAt.Sub(killAt).Round(time.Microsecond))
	select {
	case <-finished:
	case <-time.After(3 * time.Minute):
		t.Fatal("burst did not finish")
	}

	// Every pod started, and got the defaults or nothing, by when it was
	// created.
	var withDefaults, without, inFlight []int
	wantMissing := 0
	for i, r := range results {
		name := fmt.Sprintf("burst-%02d", i)
		if r.err != nil {
			t.Errorf("%s did not start (fail-open broken): %v", name, r.err)
			continue
		}
		ann := containerAnnotations(t, r.ctrID)
		_, injected := ann[annotationInjected]
		_, skipped := ann[annotationSkipped]
		_, decided := ann[annotationOutcome]
		annotated := injected || skipped || decided
		if !annotated {
			wantMissing++
		}
		switch {
		case r.done.Before(killAt):
			withDefaults = append(withDefaults, i)
			wantSysctls(t, name+" (created before the kill)", r.vals, nodeDefaults)
			if !annotated {
				t.Errorf("%s (created before the kill) has no %s annotation: %v", name, annotationInjected, ann)
			}
		case r.started.After(deadAt):
			without = append(without, i)
			wantSysctls(t, name+" (created after the kill)", r.vals, kernel)
			if annotated {
				t.Errorf("%s (created after the kill) carries the plugin's annotation: %v", name, ann)
			}
		default:
			// In flight: the whole pod got the plugin's work or none of it.
			inFlight = append(inFlight, i)
			gotDefaults := mapsEqualOn(r.vals, nodeDefaults, keys)
			gotKernel := mapsEqualOn(r.vals, kernel, keys)
			t.Logf("%s was in flight at the kill: annotated=%v, values %v (defaults=%v, without plugin=%v)", name, annotated, r.vals, gotDefaults, gotKernel)
			switch {
			case !gotDefaults && !gotKernel:
				t.Errorf("%s (in flight) has a mix of defaults and kernel values: %v", name, r.vals)
			case annotated && !gotDefaults:
				t.Errorf("%s (in flight) is annotated but has the values without plugin: %v", name, r.vals)
			case !annotated && gotDefaults && pluginMode(first.pluginProc) == "spec":
				// In spec mode the annotation and the sysctls come in
				// one adjustment. In namespace mode RunPodSandbox may
				// have written before the kill, CreateContainer not.
				t.Errorf("%s (in flight) has the defaults but no annotation in spec mode", name)
			}
		}
	}
	t.Logf("created before the kill %v, in flight %v, after %v", withDefaults, inFlight, without)
	if len(without) == 0 {
		t.Fatal("no pod was created after the kill: the test did not exercise fail-open")
	}
	if t.Failed() {
		return
	}

	// A new instance reports the running containers that lack its
	// annotation: exactly the ones created without a plugin.
	if ids, err := c.runningContainerIDs(); err != nil {
		t.Fatal(err)
	} else if len(ids) != burst {
		t.Fatalf("%d running containers, want the burst's %d: %v", len(ids), burst, ids)
	}
	second := startPlugin(t, cfg)
	if err := waitLogContains(second, "lack the node's sysctl defaults", 10*time.Second); err != nil {
		t.Fatalf("restarted plugin did not report the containers created without it (want %d): %v", wantMissing, err)
	}
	data, err := os.ReadFile(second.logPath)
	if err != nil {
		t.Fatal(err)
	}
	m := missingReport.FindAllStringSubmatch(string(data), -1)
	if len(m) != 1 {
		t.Fatalf("want one Synchronize report in the restarted plugin's log, found %d:\n%s", len(m), data)
	}
	got, _ := strconv.Atoi(m[0][1])
	t.Logf("restarted plugin: %q; expected %d (pods created without a plugin, read from their annotations)", strings.TrimSpace(m[0][0]), wantMissing)
	if got != wantMissing {
		t.Errorf("Synchronize reported %d running containers without defaults, want %d", got, wantMissing)
	}

	// And new pods get the defaults again.
	after := c.runPodWithContainer(PodSpec{Name: "after-restart", Namespace: burstSpace}, keys)
	if after.pod != nil {
		t.Cleanup(func() { c.removePod(after.pod.ID) })
	}
	if after.err != nil {
		t.Fatal(after.err)
	}
	wantSysctls(t, "pod created after the restart", after.vals, nodeDefaults)
}

// pluginMode returns the mode the plugin logged it runs in ("spec" or
// "namespace"); it is what containerd's version made the plugin pick.
func pluginMode(p *pluginProc) string {
	data, _ := os.ReadFile(p.logPath)
	if m := regexp.MustCompile(`msg="mode chosen" mode=(\w+)`).FindSubmatch(data); m != nil {
		return string(m[1])
	}
	return ""
}

func mapsEqualOn(a, b map[string]string, keys []string) bool {
	for _, k := range keys {
		if a[k] != b[k] {
			return false
		}
	}
	return true
}

// TestContainerdLookupUnreachable: the plugin cannot reach containerd to read
// pods' own sysctls. Pods start, and the plugin sets nothing for them: with
// a pod's own sysctls unknown, any key could override the pod's own value
// (docs/configuration.md, "How the decision works", step 4). So every container has the
// values without plugin, a pod's own value survives, and the plugin warns
// once per pod, not once per container.
func TestContainerdLookupUnreachable(t *testing.T) {
	const space = "e2e-nolookup"
	c := getCluster(t)
	checkMeaningful(t, nodeDefaults)
	keys := sortedKeys(nodeDefaults)
	kernel := only(c.kernel, keys...)
	noSocket := filepath.Join(c.tmp, "no-such-containerd.sock")
	if _, err := os.Stat(noSocket); err == nil {
		t.Fatalf("%s exists", noSocket)
	}
	plugin := startPlugin(t, defaultsYAML(nodeDefaults), "--containerd-address", noSocket)

	// A plain pod with three containers.
	plain := runPod(t, PodSpec{Name: "three-containers", Namespace: space})
	var ids []string
	for _, name := range []string{"one", "two", "three"} {
		ids = append(ids, runContainer(t, plain, name))
	}
	// A pod with a sysctl of its own that the defaults also set.
	own := map[string]string{"net.ipv4.tcp_keepalive_intvl": "33"}
	checkMeaningful(t, own)
	ownPod := runPod(t, PodSpec{Name: "own-sysctl", Namespace: space, Sysctls: own})
	ownID := runContainer(t, ownPod, "app")

	for i, id := range ids {
		wantSysctls(t, fmt.Sprintf("plain pod, container %d", i+1), readSysctls(t, id, keys...), kernel)
	}
	wantSysctls(t, "pod with its own tcp_keepalive_intvl=33", readSysctls(t, ownID, keys...), merged(kernel, own))
	for _, id := range append(ids, ownID) {
		ann := containerAnnotations(t, id)
		if v, ok := ann[annotationInjected]; ok {
			t.Errorf("container %s: annotation %s=%q, but the plugin must set nothing", id, annotationInjected, v)
		}
		if v, ok := ann[annotationSkipped]; ok {
			t.Errorf("container %s: annotation %s=%q, but the plugin must set nothing", id, annotationSkipped, v)
		}
	}
	if !plugin.running() {
		t.Fatal("the plugin exited")
	}

	// The plugin's own report: one warning per pod.
	data, err := os.ReadFile(plugin.logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range []*Pod{plain, ownPod} {
		marker := fmt.Sprintf("namespace=%s pod=%s", space, pod.Spec.Name)
		var lines []string
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "level=warning") && strings.Contains(line, "cannot read the pod's own sysctls") && strings.Contains(line, marker) {
				lines = append(lines, line)
			}
		}
		if len(lines) != 1 {
			t.Errorf("pod %s: %d warning line(s) containing %q, want exactly 1:\n%s", pod.Spec.Name, len(lines), marker, strings.Join(lines, "\n"))
		} else {
			t.Logf("pod %s: the one warning: %s", pod.Spec.Name, strings.TrimSpace(lines[0]))
		}
	}
}

// TestPluginStoppedMidRequestFailClosed: on a containerd that requires the
// plugin (fail-closed), the plugin gets SIGTERM while containerd waits for
// its answer to a CreateContainer. The plugin is held with SIGSTOP until
// the request sits in its socket's receive queue, then given SIGTERM and
// SIGCONT, so the signal and the request meet. The container is then
// refused (the plugin leaving, or no plugin) or created with the defaults,
// read inside it; never created at kernel values. NRI takes a connection
// closed during a request as "no answer" and creates that container bare,
// so a plugin that cancels its requests or closes at once lets it through
// (plugin/leave.go). The pod's sandbox is started before the plugin, so
// the request needs a pod lookup of its own, as one does after a restart.
func TestPluginStoppedMidRequestFailClosed(t *testing.T) {
	c := getCluster(t)
	skipWithoutDefaultValidator(t, c)
	checkMeaningful(t, nodeDefaults)
	keys := sortedKeys(nodeDefaults)
	// Time for the test to see the request queued: containerd's 2 s would
	// drop the stopped plugin first (no answer either).
	timeout := filepath.Join(t.TempDir(), "nri-timeout.toml")
	if err := os.WriteFile(timeout, []byte(fmt.Sprintf("version = %d\n\n[plugins.\"io.containerd.nri.v1.nri\"]\n  plugin_request_timeout = \"30s\"\n", configVersion(c))), 0o644); err != nil {
		t.Fatal(err)
	}
	c.imports = []string{failClosedDropIn(c), timeout}
	restartContainerdFor(t, "", func() { c.imports = nil })

	pod, err := c.runPodErr(PodSpec{Name: dnsLabel(t.Name()), Namespace: "e2e-stopped"})
	if err != nil {
		t.Fatalf("pod sandbox with no plugin registered: %v", err)
	}
	t.Cleanup(func() { c.removePod(pod.ID) })
	p := startPlugin(t, defaultsYAML(nodeDefaults))
	// The plugin logs its registration before the runtime's Synchronize,
	// and containerd holds its NRI lock until the answer: a plugin stopped
	// in between would hold back the CreateContainer below (nothing
	// queued, CI saw it) or leave the Synchronize queued in its place. A
	// container created first proves the runtime has let go of the lock.
	if _, err := c.createContainerErr(pod, "before", []string{"sleep", "3600"}); err != nil {
		t.Fatalf("container created while the plugin is registered: %v", err)
	}
	pid := p.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	if q, err := receiveQueued(pid); err != nil || q != 0 {
		t.Fatalf("before the CreateContainer: %d bytes queued for the stopped plugin (%v), want none", q, err)
	}

	type created struct {
		id  string
		err error
	}
	result := make(chan created, 1)
	go func() {
		id, err := c.createContainerErr(pod, "app", []string{"sleep", "3600"})
		result <- created{id, err}
	}()
	waitUntil(t, 20*time.Second, "containerd's request queued on the stopped plugin's socket", func() (bool, string) {
		q, err := receiveQueued(pid)
		return err == nil && q > 0, fmt.Sprintf("%d bytes queued (%v)", q, err)
	})
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var r created
	select {
	case r = <-result:
	case <-time.After(time.Minute):
		t.Fatal("CreateContainer did not return")
	}
	p.stop()
	switch {
	case r.err == nil:
		if _, err := c.crictlRaw("start", r.id); err != nil {
			t.Fatal(err)
		}
		got, err := c.readSysctlsErr(r.id, keys...)
		if err != nil {
			t.Fatal(err)
		}
		if !wantSysctls(t, "container created while the plugin got SIGTERM", got, nodeDefaults) {
			t.Logf("why, as far as the node can tell:\n%s", c.whyLacking(t, r.id))
		} else {
			t.Log("the plugin answered before it left: the container has the defaults")
		}
	case strings.Contains(r.err.Error(), refusedLeaving), strings.Contains(r.err.Error(), refusedNoPlugin):
		t.Logf("the container was refused: %s", criErrorLine(r.err))
	default:
		t.Errorf("CreateContainer failed otherwise than by a refusal: %v", criErrorLine(r.err))
	}
}

// receiveQueued sums the bytes waiting in the receive queues of pid's unix
// sockets (ss -x -p): what the runtime sent that pid has not read.
func receiveQueued(pid int) (int, error) {
	out, err := exec.Command("ss", "-x", "-p", "-n").Output()
	if err != nil {
		return 0, err
	}
	total := 0
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.Contains(line, "pid="+strconv.Itoa(pid)+",") {
			continue
		}
		n, err := strconv.Atoi(f[2])
		if err != nil {
			return 0, fmt.Errorf("ss: Recv-Q %q in %q", f[2], line)
		}
		total += n
	}
	return total, nil
}

// TestPluginStoppedBetweenRequestsFailClosed: on a containerd that requires
// the plugin, the plugin gets SIGTERM with nothing under way. The NRI of
// containerd 2.4.2 and older (before v0.12.5) keeps a plugin whose
// connection closed between requests until the end of its next request,
// and a CreateContainer then asks the closed plugin, takes its silence for
// "nothing to add" and counts it present: the container is created bare.
// So the stopping plugin closes its connection inside the registration of
// a sweeper, during which containerd creates no container and at whose end
// it drops closed plugins (plugin/leave.go). A container asked for in a
// running pod once the plugin has exited, with no pod event between, is
// refused by containerd (required plugin absent).
func TestPluginStoppedBetweenRequestsFailClosed(t *testing.T) {
	c := getCluster(t)
	skipWithoutDefaultValidator(t, c)
	checkMeaningful(t, nodeDefaults)
	keys := sortedKeys(nodeDefaults)
	c.imports = []string{failClosedDropIn(c)}
	restartContainerdFor(t, "", func() { c.imports = nil })

	p := startPlugin(t, defaultsYAML(nodeDefaults))
	pod, err := c.runPodErr(PodSpec{Name: dnsLabel(t.Name()), Namespace: "e2e-stopped"})
	if err != nil {
		t.Fatalf("pod sandbox with the plugin registered: %v", err)
	}
	t.Cleanup(func() { c.removePod(pod.ID) })

	// mustRefuse fails the test if a container is created in pod, and
	// says what it got.
	mustRefuse := func(when, want string) {
		t.Helper()
		id, err := c.createContainerErr(pod, c.nextID("app"), []string{"sleep", "3600"})
		if err == nil {
			if _, err := c.crictlRaw("start", id); err != nil {
				t.Fatal(err)
			}
			got, _ := c.readSysctlsErr(id, keys...)
			t.Fatalf("container asked for %s was created, with %v inside it; want it refused\nwhy, as far as the node can tell:\n%s", when, got, c.whyLacking(t, id))
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("container asked for %s: %v; want a refusal saying %q", when, criErrorLine(err), want)
			return
		}
		t.Logf("container asked for %s: refused: %s", when, criErrorLine(err))
	}

	p.stoppedByTest.Store(true)
	if err := syscall.Kill(p.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("the plugin did not exit after SIGTERM")
	}
	mustRefuse("after the plugin left", refusedNoPlugin)
}
