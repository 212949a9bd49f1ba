// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

// make soak: figures under faults on a fail-closed node.
// For NRI_SYSCTL_SOAK (a duration), pods are created throughout while the
// plugin is restarted by a supervisor after a SIGTERM or a SIGKILL at random
// moments, containerd restarts twice (its pods left running, as on a node),
// the config is reloaded to good and to refused texts, and the profiles
// attacker of TestProfilesAnnotationAttack comes by. Each container's values
// are read inside it at the end. A refused creation is retried, as the
// kubelet does.
//
// What must hold: no container with wrong values (neither the defaults nor
// the kernel's), no bare container after a SIGTERM, and every bare
// container's creation overlapping a SIGKILL of the plugin: NRI counts a
// killed plugin's request as answered and creates that container bare,
// which nothing in the plugin can stop.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// soakEnv names the run's length; the test skips without it.
const soakEnv = "NRI_SYSCTL_SOAK"

// soakGiveUp bounds the retries of one pod, as a kubelet's would be by
// its pod's deadline: past it the pod counts as given up.
const soakGiveUp = time.Minute

// soakFault is one fault with when it happened.
type soakFault struct {
	kind string // sigterm, sigkill, containerd, reload-good, reload-refused, attacker
	at   time.Time
	// plugin is the plugin process a signal went to, for its log.
	plugin *pluginProc
}

// soakContainer is one app container the creators made, with the window of
// its successful CreateContainer.
type soakContainer struct {
	pod, id     string
	createStart time.Time
	createEnd   time.Time
	refusals    int
	attacker    bool
}

type soakRun struct {
	t       *testing.T
	c       *cluster
	cfgPath string
	args    []string

	mu         sync.Mutex
	faults     []soakFault
	containers []soakContainer // every one created
	live       []soakContainer // created and not judged yet, oldest first
	tally      soakTally
	podIDs     []string
	refusals   int // refused creations, each retried
	gaveUp     int // pods whose creation never succeeded
	peakRSSKiB int
	peakFDs    int
	plugin     *pluginProc
	starts     int
	failures   *soakFailures
}

// soakFailures keeps the first line of each failure to restate them when
// the test ends: its cleanup is registered first, so it runs last, after
// the harness's logs, in the tail of the output that a CI report shows.
type soakFailures struct {
	mu    sync.Mutex
	lines []string
}

// errorf fails the test and keeps the message's first line.
func (r *soakRun) errorf(format string, args ...any) {
	r.t.Helper()
	msg := fmt.Sprintf(format, args...)
	r.t.Error(msg)
	first, _, _ := strings.Cut(msg, "\n")
	r.failures.mu.Lock()
	r.failures.lines = append(r.failures.lines, first)
	r.failures.mu.Unlock()
}

// restate logs the kept failures, at most soakRestated of them.
func (f *soakFailures) restate(t *testing.T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.lines) == 0 {
		return
	}
	shown := f.lines[:min(len(f.lines), soakRestated)]
	t.Logf("soak failures (%d; the first %d, each in full above):\n  %s", len(f.lines), len(shown), strings.Join(shown, "\n  "))
}

// soakRestated bounds the failures restated at the end.
const soakRestated = 8

func TestSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv(soakEnv))
	if err != nil || d <= 0 {
		t.Skipf("set %s to a duration (make soak) to run the soak", soakEnv)
	}
	failures := &soakFailures{}
	t.Cleanup(func() { failures.restate(t) })
	c := getCluster(t)
	skipWithoutDefaultValidator(t, c)
	checkMeaningful(t, nodeDefaults)
	c.imports = []string{failClosedDropIn(c)}
	restartContainerdFor(t, "", func() { c.imports = nil })
	r := &soakRun{t: t, c: c, cfgPath: writePluginConfig(t, soakConfig(0)), failures: failures}
	r.args = pluginArgs(c, r.cfgPath, []string{"--last-good-config", filepath.Join(c.workDir, c.nextID("last-good")+".yaml"), "--log-level", "info"})
	t.Cleanup(func() { inParallel(r.podIDs, c.removePod) })

	// The creator stops first, with the plugin still supervised, so that
	// its last pod is not refused for want of a plugin.
	stopCreating, stopSupervising := make(chan struct{}), make(chan struct{})
	var supervised, creating sync.WaitGroup
	supervised.Add(2)
	go func() { defer supervised.Done(); r.supervise(stopSupervising) }()
	go func() { defer supervised.Done(); r.sample(stopSupervising) }()
	r.waitServing(30 * time.Second)
	creating.Add(1)
	go func() { defer creating.Done(); r.createPods(stopCreating, 0) }()
	r.injectFaults(d)
	close(stopCreating)
	creating.Wait()
	close(stopSupervising)
	supervised.Wait()
	r.report()
}

// soakConfig is the node defaults with a comment that makes each good
// reload's text (and hash) new while the values stay.
func soakConfig(n int) string {
	return fmt.Sprintf("# reload %d\n%sonLookupError: fail\n", n, defaultsYAML(nodeDefaults))
}

func (r *soakRun) fault(kind string) {
	r.faultTo(kind, nil)
}

func (r *soakRun) faultTo(kind string, p *pluginProc) {
	r.mu.Lock()
	r.faults = append(r.faults, soakFault{kind: kind, at: time.Now(), plugin: p})
	r.mu.Unlock()
}

// supervise keeps one plugin running, as systemd's Restart=always does:
// a plugin that exits is started again after 200 ms.
func (r *soakRun) supervise(stop <-chan struct{}) {
	for {
		p := launchPlugin(r.t, nil, r.args...)
		p.stoppedByTest.Store(true) // its exits are the soak's own faults
		r.mu.Lock()
		r.plugin, r.starts = p, r.starts+1
		r.mu.Unlock()
		select {
		case <-stop:
			p.stop()
			return
		case <-p.exited:
		}
		select {
		case <-stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (r *soakRun) currentPlugin() *pluginProc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.plugin
}

// waitServing waits for the first plugin's registration.
func (r *soakRun) waitServing(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for r.currentPlugin() == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if p := r.currentPlugin(); p != nil {
		p.waitRegistered(r.t, 1, time.Until(deadline))
		return
	}
	r.t.Fatal("the supervisor started no plugin")
}

// createPods makes pods one after another until stop, each with one app
// container whose creation is retried while it is refused.
func (r *soakRun) createPods(stop <-chan struct{}, worker int) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		attacker := n%8 == 7
		spec := PodSpec{Name: fmt.Sprintf("soak-%d-%d", worker, n), Namespace: "e2e-soak"}
		if attacker {
			spec.Annotations = map[string]string{annotationProfiles: attackProfiles}
			r.fault("attacker")
		}
		r.createPod(spec, attacker)
	}
}

func (r *soakRun) createPod(spec PodSpec, attacker bool) {
	var pod *Pod
	var err error
	refused := 0
	giveUp := time.Now().Add(soakGiveUp)
	for time.Now().Before(giveUp) {
		if pod, err = r.c.runPodErr(spec); err == nil {
			break
		}
		refused++
		time.Sleep(300 * time.Millisecond)
	}
	if err != nil {
		r.t.Logf("gave up on pod %s after %s: %v", spec.Name, soakGiveUp, err)
		r.mu.Lock()
		r.gaveUp++
		r.refusals += refused
		r.mu.Unlock()
		return
	}
	r.mu.Lock()
	r.podIDs = append(r.podIDs, pod.ID)
	r.mu.Unlock()
	for try := 0; time.Now().Before(giveUp); try++ {
		start := time.Now()
		// A name of its own for each try, as the kubelet's attempt
		// count gives: containerd may keep a failed try's name reserved.
		var id string
		id, err = r.c.createContainerErr(pod, fmt.Sprintf("app-%d", try), []string{"sleep", "3600"})
		end := time.Now()
		if err == nil {
			if _, err = r.c.crictlRaw("start", id); err == nil {
				r.mu.Lock()
				r.refusals += refused
				r.mu.Unlock()
				r.keepLive(soakContainer{pod: pod.ID, id: id, createStart: start, createEnd: end, refusals: refused, attacker: attacker})
				return
			}
		}
		refused++
		time.Sleep(300 * time.Millisecond)
	}
	r.t.Logf("gave up on pod %s after %s: %v", spec.Name, soakGiveUp, err)
	r.mu.Lock()
	r.gaveUp++
	r.refusals += refused
	r.mu.Unlock()
}

// sample keeps the plugin's peak resident memory and open files.
func (r *soakRun) sample(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
		p := r.currentPlugin()
		if p == nil || !p.running() {
			continue
		}
		pid := p.cmd.Process.Pid
		rss := statusKiB(pid, "VmHWM:")
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		r.mu.Lock()
		r.peakRSSKiB = max(r.peakRSSKiB, rss)
		r.peakFDs = max(r.peakFDs, len(fds))
		r.mu.Unlock()
	}
}

// statusKiB reads a "Name:  N kB" line of /proc/pid/status.
func statusKiB(pid int, name string) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == name {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// injectFaults runs for d: a fault every 3 to 8 s, containerd restarted at
// a third and at two thirds of the run.
func (r *soakRun) injectFaults(d time.Duration) {
	start := time.Now()
	restarts := []time.Duration{d / 3, 2 * d / 3}
	reloads := 0
	for time.Since(start) < d {
		time.Sleep(time.Duration(3000+rand.IntN(5000)) * time.Millisecond)
		if len(restarts) > 0 && time.Since(start) >= restarts[0] {
			restarts = restarts[1:]
			r.fault("containerd")
			r.restartContainerdKeepingPods()
			continue
		}
		p := r.currentPlugin()
		switch k := rand.IntN(4); {
		case k == 0 && p.running():
			r.faultTo("sigterm", p)
			_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGTERM)
		case k == 1 && p.running():
			r.faultTo("sigkill", p)
			_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL)
		case k == 2:
			reloads++
			rewriteConfig(r.t, r.cfgPath, soakConfig(reloads))
			r.fault("reload-good")
			_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGHUP)
		default:
			// A refused text: the last good stays in force, also for a
			// plugin the supervisor starts meanwhile (--last-good-config).
			rewriteConfig(r.t, r.cfgPath, "sysctls:\n  net.ipv4.tcp_keepalive_time: [not, a, value]\n")
			r.fault("reload-refused")
			_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGHUP)
			time.Sleep(time.Second)
			rewriteConfig(r.t, r.cfgPath, soakConfig(reloads))
		}
	}
}

// restartContainerdKeepingPods stops containerd by its pid and starts it
// again on the same config, its pods left running as on a node.
func (r *soakRun) restartContainerdKeepingPods() {
	c := r.c
	stopProcess(c.cmd.Process.Pid, c.exited, 15*time.Second)
	if err := c.startContainerd(); err != nil {
		r.errorf("restart containerd: %v", err)
	}
}

// soakLivePods bounds the pods kept running: the test network has 253
// addresses. Past it the oldest pod is judged (its values read inside it)
// and removed.
const soakLivePods = 40

// soakTally is what the judged containers were.
type soakTally struct {
	withDefaults, bare, bareAfterTerm, bareUnmatched, wrong, unread int
}

// keepLive records a container as running, judging and removing the oldest
// one past soakLivePods.
func (r *soakRun) keepLive(ctr soakContainer) {
	r.mu.Lock()
	r.containers = append(r.containers, ctr)
	r.live = append(r.live, ctr)
	var oldest *soakContainer
	if len(r.live) > soakLivePods {
		oldest = &r.live[0]
		r.live = r.live[1:]
	}
	r.mu.Unlock()
	if oldest != nil {
		r.judge(*oldest)
		r.c.removePod(oldest.pod)
		r.mu.Lock()
		r.podIDs = slices.DeleteFunc(r.podIDs, func(id string) bool { return id == oldest.pod })
		r.mu.Unlock()
	}
}

// judge reads a container's values inside it and counts what it has; a
// bare one must be explained by a SIGKILL of the plugin during its
// creation.
func (r *soakRun) judge(ctr soakContainer) {
	t, c := r.t, r.c
	keys := sortedKeys(nodeDefaults)
	got, err := c.readSysctlsErr(ctr.id, keys...)
	// containerd may be restarting (one of the faults): read again once
	// it answers.
	for deadline := time.Now().Add(30 * time.Second); err != nil && time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		got, err = c.readSysctlsErr(ctr.id, keys...)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err != nil:
		r.tally.unread++
		r.errorf("container %s: cannot read its values: %v", ctr.id, err)
	case sameValues(got, nodeDefaults):
		r.tally.withDefaults++
	case sameValues(got, only(c.kernel, keys...)):
		r.tally.bare++
		switch {
		case r.faultDuring(ctr, "sigkill"):
			t.Logf("container %s started bare: its CreateContainer (%s to %s) was cut by a SIGKILL of the plugin",
				ctr.id, ctr.createStart.Format("15:04:05.000"), ctr.createEnd.Format("15:04:05.000"))
		case r.sigtermBefore(ctr):
			r.tally.bareAfterTerm++
			r.errorf("container %s started bare after a SIGTERM:\n%s", ctr.id, r.explainBare(ctr))
		default:
			r.tally.bareUnmatched++
			r.errorf("container %s started bare, with no SIGKILL during its creation:\n%s", ctr.id, r.explainBare(ctr))
		}
	default:
		r.tally.wrong++
		r.errorf("container %s has wrong values: %v, want the defaults %v or the kernel's %v", ctr.id, got, nodeDefaults, only(c.kernel, keys...))
	}
}

// report judges the containers still running, prints the figures and
// fails on what must not happen.
func (r *soakRun) report() {
	t, c := r.t, r.c
	// Running pods converge once the plugin is back, SIGKILLs
	// included: give the last restart's convergence its time, then judge
	// the containers still running, which must all have the defaults.
	keys := sortedKeys(nodeDefaults)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		converged := true
		for _, ctr := range r.live {
			if got, err := c.readSysctlsErr(ctr.id, keys...); err != nil || !sameValues(got, nodeDefaults) {
				converged = false
				break
			}
		}
		if converged {
			break
		}
	}
	bareBefore := r.tally.bare
	inParallel(r.live, r.judge)
	stillLacking := r.tally.bare - bareBefore
	if stillLacking > 0 {
		r.errorf("%d running container(s) still lack the defaults at the end: the plugin should have converged them once it was back", stillLacking)
	}
	count := map[string]int{}
	for _, f := range r.faults {
		count[f.kind]++
	}
	n := r.tally
	t.Logf("soak figures (containerd %s, fail-closed, %s):", c.version, os.Getenv(soakEnv))
	t.Logf("  faults: %d SIGTERM, %d SIGKILL, %d containerd restarts, %d good reloads, %d refused reloads, %d attacker pods; plugin started %d times",
		count["sigterm"], count["sigkill"], count["containerd"], count["reload-good"], count["reload-refused"], count["attacker"], r.starts)
	t.Logf("  pods: %d created, %d creations refused and then retried, %d given up after %s of retries", len(r.containers), r.refusals, r.gaveUp, soakGiveUp)
	t.Logf("  containers: %d with the defaults, %d started bare (%d matched to a SIGKILL, %d after a SIGTERM, %d unmatched), %d with wrong values, %d unread",
		n.withDefaults, n.bare, n.bare-n.bareAfterTerm-n.bareUnmatched, n.bareAfterTerm, n.bareUnmatched, n.wrong, n.unread)
	t.Logf("  still lacking the defaults at the end: %d (of %d running)", stillLacking, len(r.live))
	t.Logf("  plugin peak: %d KiB resident (VmHWM), %d open files", r.peakRSSKiB, r.peakFDs)
	if len(r.containers) == 0 {
		r.errorf("no container was created")
	}
}

// faultDuring tells whether a fault of kind happened while ctr's creation
// was under way (with 100 ms either side for the clocks of two processes).
func (r *soakRun) faultDuring(ctr soakContainer, kind string) bool {
	for _, f := range r.faults {
		if f.kind == kind && !f.at.Before(ctr.createStart.Add(-100*time.Millisecond)) && !f.at.After(ctr.createEnd.Add(100*time.Millisecond)) {
			return true
		}
	}
	return false
}

// explainBare says when a bare container was created, what happened around
// it, and what the plugin that got a signal then logged.
func (r *soakRun) explainBare(ctr soakContainer) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  created %s to %s\n%s\n", ctr.createStart.Format("15:04:05.000"), ctr.createEnd.Format("15:04:05.000"), r.c.whyLacking(r.t, ctr.id))
	for _, f := range r.faults {
		if f.at.After(ctr.createStart.Add(-5*time.Second)) && f.at.Before(ctr.createEnd.Add(5*time.Second)) {
			fmt.Fprintf(&b, "  fault %s at %s\n", f.kind, f.at.Format("15:04:05.000"))
			if f.plugin != nil {
				fmt.Fprintf(&b, "  --- that plugin's log (%s) ---\n%s\n", f.plugin.logPath, tail(f.plugin.logPath, 40))
			}
		}
	}
	return b.String()
}

// inParallel runs do on each item, two at a time (this machine's cores).
func inParallel[T any](items []T, do func(T)) {
	work := make(chan T)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				do(it)
			}
		}()
	}
	for _, it := range items {
		work <- it
	}
	close(work)
	wg.Wait()
}

// sigtermBefore tells whether a SIGTERM of the plugin came during ctr's
// creation or up to soakLeaveWindow before it: a stopping plugin keeps its
// connection, refusing new containers, until its requests under way have
// answered (the request timeout, 2 s) and its sweeper is registered, or,
// failing that, a pod starts or goes (at most leaveWait, 4 s;
// plugin/leave.go).
func (r *soakRun) sigtermBefore(ctr soakContainer) bool {
	for _, f := range r.faults {
		if f.kind == "sigterm" && !f.at.Before(ctr.createStart.Add(-soakLeaveWindow)) && !f.at.After(ctr.createEnd.Add(100*time.Millisecond)) {
			return true
		}
	}
	return false
}

// soakLeaveWindow is how long before a creation a SIGTERM counts as its
// cause: the request timeout, leaveWait and the close.
const soakLeaveWindow = 6500 * time.Millisecond
