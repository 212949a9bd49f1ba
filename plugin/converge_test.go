// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/nsthread"
	"github.com/nri-sysctl/nri-sysctl/pkg/outcome"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/sirupsen/logrus"
)

// fakeNamespaces stands in for a running pod's namespaces: what
// readNamespaces reads and writeNamespaces writes.
type fakeNamespaces struct {
	mu         sync.Mutex
	values     map[string]string
	writes     []string
	unreadable bool // every read fails
}

func (f *fakeNamespaces) setUnreadable(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unreadable = v
}

func (f *fakeNamespaces) read(_ podns.Target, keys []string) map[string]podns.Value {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]podns.Value{}
	for _, k := range keys {
		if v, ok := f.values[k]; ok && !f.unreadable {
			out[k] = podns.Value{Value: v}
		} else {
			out[k] = podns.Value{Err: os.ErrNotExist}
		}
	}
	return out
}

func (f *fakeNamespaces) write(_ podns.Target, list []sysctl.Sysctl) []podns.WriteError {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range list {
		f.values[s.Key()] = s.Value()
		f.writes = append(f.writes, s.Key()+"="+s.Value())
	}
	return nil
}

// set and get stand for another writer and a reader inside the pod: the
// plugin may read the fake meanwhile (the prefetch at RunPodSandbox).
func (f *fakeNamespaces) set(key, value string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.values[key] = value
}

func (f *fakeNamespaces) get(key string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.values[key]
}

// takeWrites returns the writes since the last call, sorted.
func (f *fakeNamespaces) takeWrites() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.writes
	f.writes = nil
	sort.Strings(w)
	return strings.Join(w, ",")
}

// kernelDefaults is a fresh pod namespace's values of fixture.Config's keys.
func kernelDefaults() map[string]string {
	return map[string]string{
		"net.ipv4.tcp_keepalive_time":         "7200",
		"net.ipv4.tcp_keepalive_intvl":        "75",
		"net.ipv4.tcp_keepalive_probes":       "9",
		"kernel.msgmax":                       "8192",
		"net.ipv4.ip_local_reserved_ports":    "",
		"net.ipv4.ip_unprivileged_port_start": "1024",
	}
}

// runningPod is a pod whose sandbox process is this test's, so that the
// converger can hold it by pidfd.
func runningPod(id string, nsTypes ...string) *api.PodSandbox {
	pod := testPod(id, nsTypes...)
	pod.Pid = uint32(os.Getpid())
	return pod
}

func newConvergeTest(t *testing.T, cfgText, stateDir string, own map[string]string) (*plugin, *fakeNamespaces) {
	t.Helper()
	p := newTestPlugin(t, cfgText, &fakeFetcher{own: own})
	ns := &fakeNamespaces{values: kernelDefaults()}
	p.readNamespaces, p.writeNamespaces = ns.read, ns.write
	p.freshValues = func(names []string) (map[string]string, error) {
		out := map[string]string{}
		for _, n := range names {
			if v, ok := kernelDefaults()[n]; ok {
				out[n] = v
			}
		}
		return out, nil
	}
	p.openPodState(stateDir)
	if p.podState == nil {
		t.Fatal("no pod state")
	}
	return p, ns
}

// synchronizedPod is a running pod the runtime told p of at Synchronize.
func synchronizedPod(t *testing.T, p *plugin, id string) *api.PodSandbox {
	t.Helper()
	pod := runningPod(id, "network", "ipc", "uts")
	if _, err := p.Synchronize(context.Background(), []*api.PodSandbox{pod}, nil); err != nil {
		t.Fatal(err)
	}
	return pod
}

// restartedOn is another plugin started on stateDir, as after a restart,
// over the same namespaces, told of pod and its containers ctrs at
// Synchronize.
func restartedOn(t *testing.T, cfgText, stateDir string, own map[string]string, ns *fakeNamespaces, pod *api.PodSandbox, ctrs ...*api.Container) *plugin {
	t.Helper()
	q, _ := newConvergeTest(t, cfgText, stateDir, own)
	q.readNamespaces, q.writeNamespaces = ns.read, ns.write
	if _, err := q.Synchronize(context.Background(), []*api.PodSandbox{pod}, ctrs); err != nil {
		t.Fatal(err)
	}
	return q
}

// passWrites returns a step: one pass, and the writes it made checked.
func passWrites(t *testing.T, p *plugin, ns *fakeNamespaces) func(what, want string) {
	return func(what, want string) {
		t.Helper()
		p.convergePass(context.Background())
		if got := ns.takeWrites(); got != want {
			t.Errorf("%s: wrote %q, want %q", what, got, want)
		}
	}
}

// wantNothingOnSpec: a container of a pod whose values are in place
// carries no sysctl on its spec, which runc would write over whatever
// the pod holds.
func wantNothingOnSpec(t *testing.T, what string, adj *api.ContainerAdjustment) {
	t.Helper()
	if got := adj.GetLinux().GetSysctl(); len(got) > 0 {
		t.Errorf("%s: the spec carries %v, want nothing", what, got)
	}
}

func reload(t testing.TB, p *plugin, text string) {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(text), nil)
	if err != nil {
		t.Fatal(err)
	}
	p.setConfig(cfg)
}

// A pod running before the plugin's first start gets the
// defaults without a restart; a reload reaches it; a key that leaves the
// config goes back to its value before the plugin's first write; a value
// another writer set stays, also after the plugin restarts; the pod's own
// key is never touched; with runningPods: keep nothing is written.
func TestConvergeRunningPod(t *testing.T) {
	const base = "mode: spec\nsysctls:\n  net.ipv4.tcp_keepalive_intvl: 60\n  net.ipv4.tcp_keepalive_probes: 5\n"
	dir := t.TempDir()
	own := map[string]string{"net.ipv4.tcp_keepalive_probes": "3"}
	p, ns := newConvergeTest(t, base+"  net.ipv4.tcp_keepalive_time: 600\n", dir, own)
	ns.set("net.ipv4.tcp_keepalive_probes", "3") // the pod's own
	pod := runningPod("c1", "network", "ipc", "uts")
	if _, err := p.Synchronize(context.Background(), []*api.PodSandbox{pod}, nil); err != nil {
		t.Fatal(err)
	}
	step := passWrites(t, p, ns)
	step("first start", "net.ipv4.tcp_keepalive_intvl=60,net.ipv4.tcp_keepalive_time=600")
	step("a second pass", "")

	reload(t, p, base+"  net.ipv4.tcp_keepalive_time: 650\n")
	step("reload 600 -> 650", "net.ipv4.tcp_keepalive_time=650")

	// The pod's next container carries nothing on its spec (the values
	// are in place), and is told the converged value.
	adj, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "late"})
	if err != nil {
		t.Fatal(err)
	}
	wantNothingOnSpec(t, "next container", adj)
	if got := parseApplied(adj.GetAnnotations()[outcome.AnnotationInjected])["net.ipv4.tcp_keepalive_time"]; got != "650" {
		t.Errorf("next container's annotation: tcp_keepalive_time %q, want 650", got)
	}

	// Another writer; then a restart of the plugin on the same state.
	ns.set("net.ipv4.tcp_keepalive_intvl", "33")
	q := restartedOn(t, base+"  net.ipv4.tcp_keepalive_time: 650\n", dir, own, ns, pod)
	q.convergePass(context.Background())
	if got := ns.takeWrites(); got != "" {
		t.Errorf("after a restart: wrote %q, want nothing (650 is the plugin's own, 33 another writer's)", got)
	}
	if ns.get("net.ipv4.tcp_keepalive_intvl") != "33" {
		t.Errorf("another writer's value overwritten: %q", ns.get("net.ipv4.tcp_keepalive_intvl"))
	}
	// Nor does the pod's next container carry the plugin's value on its
	// spec, which runc would write over the other writer's.
	adj, _, err = q.CreateContainer(context.Background(), pod, &api.Container{Name: "after-other"})
	if err != nil {
		t.Fatal(err)
	}
	wantNothingOnSpec(t, "next container after another writer", adj)
	if got := adj.GetAnnotations()[outcome.AnnotationSkipped]; !strings.Contains(got, "net.ipv4.tcp_keepalive_intvl (") || !strings.Contains(got, "in the running pod by another writer") {
		t.Errorf("next container's skipped annotation %q does not name another writer's tcp_keepalive_intvl", got)
	}

	// The key leaves the config: back to the kernel's 7200.
	reload(t, q, "mode: spec\nsysctls:\n  net.ipv4.tcp_keepalive_intvl: 60\n")
	q.convergePass(context.Background())
	if got := ns.takeWrites(); got != "net.ipv4.tcp_keepalive_time=7200" {
		t.Errorf("removed key: wrote %q, want net.ipv4.tcp_keepalive_time=7200", got)
	}
	if ns.get("net.ipv4.tcp_keepalive_probes") != "3" {
		t.Errorf("the pod's own value changed: %q", ns.get("net.ipv4.tcp_keepalive_probes"))
	}

	reload(t, q, "mode: spec\nrunningPods: keep\nsysctls:\n  net.ipv4.tcp_keepalive_time: 900\n")
	q.convergePass(context.Background())
	if got := ns.takeWrites(); got != "" {
		t.Errorf("runningPods: keep: wrote %q", got)
	}
}

// Host namespaces are never written, excluded pods are put back once and
// left alone, a pod not running is skipped, and a spec-mode pod's
// injected annotation counts as the plugin's own value.
func TestConvergeLeavesWhatIsNotThePlugins(t *testing.T) {
	p, ns := newConvergeTest(t, testConfig, t.TempDir(), nil)
	hostNet := runningPod("hn", "uts") // hostNetwork and hostIPC
	excluded := runningPod("ex", "network", "ipc")
	excluded.Namespace = "kube-system"
	stopped := testPod("st", "network", "ipc")
	stopped.Pid = 0
	spec := runningPod("sp", "network", "ipc")
	ns.set("net.ipv4.tcp_keepalive_time", "500") // an older config's, by its annotation
	ctrs := []*api.Container{{PodSandboxId: "sp", Annotations: map[string]string{outcome.AnnotationInjected: "net.ipv4.tcp_keepalive_time=500"}}}
	if _, err := p.Synchronize(context.Background(), []*api.PodSandbox{hostNet, excluded, stopped}, nil); err != nil {
		t.Fatal(err)
	}
	p.convergePass(context.Background())
	if got := ns.takeWrites(); got != "" {
		t.Errorf("host-namespace, excluded and stopped pods: wrote %q", got)
	}
	if _, err := p.Synchronize(context.Background(), []*api.PodSandbox{spec}, ctrs); err != nil {
		t.Fatal(err)
	}
	p.convergePass(context.Background())
	if got, want := ns.takeWrites(), "kernel.msgmax=16384,net.ipv4.tcp_keepalive_intvl=60,net.ipv4.tcp_keepalive_time=600"; got != want {
		t.Errorf("spec-mode pod: wrote %q, want %q", got, want)
	}
	state, err := p.podState.Load("sp")
	if err != nil {
		t.Fatal(err)
	}
	if w := state["net.ipv4.tcp_keepalive_time"]; w.HasBefore || w.Set != "600" {
		t.Errorf("state of a key the plugin set before its restart: %+v; want set 600 and no value before (500 was the plugin's)", w)
	}
}

// The plugin's first write into a pod (a pod older than the plugin, a key
// new to the config) goes only over a value nobody set: a fresh
// namespace's, or the runtime's own. An earlier writer's value (a
// privileged init container's) stays, as a later one would, and the
// plugin keeps nothing of the key.
func TestConvergeFirstWriteLeavesAnEarlierWriter(t *testing.T) {
	const cfg = "mode: spec\nsysctls:\n  net.ipv4.tcp_keepalive_time: 600\n  net.ipv4.tcp_keepalive_intvl: 60\n  net.ipv4.ip_unprivileged_port_start: 1024\n"
	p, ns := newConvergeTest(t, cfg, t.TempDir(), nil)
	p.useFetcher(&fakeFetcher{runtime: map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"}})
	ns.set("net.ipv4.tcp_keepalive_intvl", "30")       // an init container's, before the plugin
	ns.set("net.ipv4.ip_unprivileged_port_start", "0") // containerd's, at the pod's creation
	pod := synchronizedPod(t, p, "older")
	passWrites(t, p, ns)("a pod older than the plugin", "net.ipv4.ip_unprivileged_port_start=1024,net.ipv4.tcp_keepalive_time=600")
	if got := ns.get("net.ipv4.tcp_keepalive_intvl"); got != "30" {
		t.Errorf("the earlier writer's tcp_keepalive_intvl = %q, want 30 kept", got)
	}
	state, err := p.podState.Load(pod.Id)
	if err != nil {
		t.Fatal(err)
	}
	if w, ok := state["net.ipv4.tcp_keepalive_intvl"]; ok {
		t.Errorf("state of the earlier writer's key: %+v, want nothing", w)
	}
	if w := state["net.ipv4.ip_unprivileged_port_start"]; w.Before != "0" || !w.HasBefore {
		t.Errorf("state of the runtime's key: %+v, want its 0 kept to go back to", w)
	}

	ns.set("net.ipv4.tcp_keepalive_probes", "3") // before the key joins the config
	reload(t, p, cfg+"  net.ipv4.tcp_keepalive_probes: 5\n  kernel.msgmax: 16384\n")
	passWrites(t, p, ns)("a reload adding a key another writer set, and one nobody set", "kernel.msgmax=16384")
	passWrites(t, p, ns)("a second pass", "")
}

// runtimeFromPause is containerd 2.0 to 2.2 to the plugin: a pod's config
// without the spec beside it, the runtime's keys read from the pause
// container only when asked.
type runtimeFromPause struct {
	added map[string]string
	asked atomic.Int32
}

func (f *runtimeFromPause) Fetch(context.Context, string) (podsysctl.PodSysctls, error) {
	return podsysctl.PodSysctls{Source: podsysctl.SourceSandboxConfig}, nil
}

func (f *runtimeFromPause) RuntimeAdded(context.Context, string, map[string]string) (map[string]string, error) {
	f.asked.Add(1)
	return f.added, nil
}

// Where the runtime's own keys do not come with the pod's lookup, the
// pass reads them from the pause container before a first write, and
// only then: a pod the plugin has set is never asked again.
func TestConvergeReadsTheRuntimesKeysForAFirstWrite(t *testing.T) {
	p, ns := newConvergeTest(t, "mode: spec\nsysctls:\n  net.ipv4.ip_unprivileged_port_start: 1024\n", t.TempDir(), nil)
	pause := &runtimeFromPause{added: map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"}}
	p.meter.Store(p.newMetrics()) // the lookup counted, as with --metrics-address
	p.useFetcher(pause)
	ns.set("net.ipv4.ip_unprivileged_port_start", "0")
	synchronizedPod(t, p, "on-2-2")
	passWrites(t, p, ns)("a first write over the runtime's value", "net.ipv4.ip_unprivileged_port_start=1024")
	passWrites(t, p, ns)("a second pass", "")
	if n := pause.asked.Load(); n != 1 {
		t.Errorf("the pause container was asked %d times, want once (for the first write only)", n)
	}
}

// The state directory is the one podstate checks: a pod's file is gone
// when the pod is removed.
func TestConvergeStateFollowsThePod(t *testing.T) {
	dir := t.TempDir()
	p, _ := newConvergeTest(t, testConfig, dir, nil)
	pod := runningPod("rm", "network", "ipc")
	if _, err := p.Synchronize(context.Background(), []*api.PodSandbox{pod}, nil); err != nil {
		t.Fatal(err)
	}
	p.convergePass(context.Background())
	if _, err := os.Stat(dir + "/rm.json"); err != nil {
		t.Fatalf("no state after a convergence: %v", err)
	}
	if err := p.RemovePodSandbox(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir + "/rm.json"); !os.IsNotExist(err) {
		t.Errorf("state kept after the pod's removal: %v", err)
	}
}

// --running-pods keep wins over the config's converge.
func TestConvergeFlagKeeps(t *testing.T) {
	p, ns := newConvergeTest(t, testConfig, t.TempDir(), nil)
	p.runningPodsOverride = config.RunningPodsKeep
	if _, err := p.Synchronize(context.Background(), []*api.PodSandbox{runningPod("k", "network", "ipc")}, nil); err != nil {
		t.Fatal(err)
	}
	p.convergePass(context.Background())
	if got := ns.takeWrites(); got != "" {
		t.Errorf("--running-pods keep: wrote %q", got)
	}
}

// A user-namespace pod converges where the host-side writer can, and a key
// the kernel refuses that writer there is reported once as cannot
// converge, never written, at no pass.
func TestConvergeUserNamespacePod(t *testing.T) {
	p, ns := newConvergeTest(t, testConfig, t.TempDir(), nil)
	next := *p.current.Load()
	refusals := policy.UserNamespaceRefusals{runtimemode.Namespace.Writer(): {"kernel.msgmax": true}}
	next.policy = policy.Compile(next.cfg, refusals)
	p.current.Store(&next)
	log := &strings.Builder{}
	p.log.SetOutput(log)
	pod := runningPod("un", "network", "ipc", "uts", "user")
	if _, err := p.Synchronize(context.Background(), []*api.PodSandbox{pod}, nil); err != nil {
		t.Fatal(err)
	}
	for pass := 1; pass <= 2; pass++ {
		p.convergePass(context.Background())
		if got, want := ns.takeWrites(), "net.ipv4.tcp_keepalive_intvl=60,net.ipv4.tcp_keepalive_time=600"; pass == 1 && got != want {
			t.Errorf("pass 1 wrote %q, want %q", got, want)
		} else if pass == 2 && got != "" {
			t.Errorf("pass 2 wrote %q", got)
		}
	}
	if n := strings.Count(log.String(), `msg="cannot converge" key=kernel.msgmax`); n != 1 {
		t.Errorf("kernel.msgmax reported %d times, want once:\n%s", n, log.String())
	}
}

// A key that leaves the config goes back to a fresh namespace's value when
// the plugin never saw the pod's own: a spec-mode pod created under the
// plugin, whose runtime wrote the plugin's values at its creation, and
// whose values could not be read at RunPodSandbox.
func TestConvergeRestoresFreshValueWhenBeforeIsUnknown(t *testing.T) {
	p, ns := newConvergeTest(t, "mode: spec\n"+testConfig, t.TempDir(), nil)
	pod := runningPod("fr", "network", "ipc", "uts")
	if _, err := p.Synchronize(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	ns.setUnreadable(true)
	if err := p.RunPodSandbox(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the read at RunPodSandbox", func() bool { return p.record(pod).valuesBefore() != nil })
	ns.setUnreadable(false)
	adj, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range adj.GetLinux().GetSysctl() {
		ns.set(k, v) // what runc writes from the spec
	}
	reload(t, p, "mode: spec\nsysctls:\n  net.ipv4.tcp_keepalive_intvl: 60\n")
	p.convergePass(context.Background())
	if got, want := ns.takeWrites(), "kernel.msgmax=8192,net.ipv4.tcp_keepalive_time=7200"; got != want {
		t.Errorf("keys that left the config: wrote %q, want %q (a fresh namespace's values)", got, want)
	}
}

// A spec-mode container whose creation failed after the plugin answered
// (containerd restarted, a later plugin or the validator refused it) never
// had its values written, so the pod holds its values before the plugin's
// while the plugin's record says it set its own. Those are no other
// writer's: the next pass writes the defaults, which the pod's next
// container is told it has (make soak found such a pod's next container
// started bare). One value is the runtime's, set as it made the pod, not a fresh
// namespace's (as containerd sets ip_unprivileged_port_start): the values
// read at RunPodSandbox tell it.
func TestConvergeWritesWhereTheSpecNeverLanded(t *testing.T) {
	p, ns := newConvergeTest(t, "mode: spec\n"+testConfig, t.TempDir(), nil)
	ns.set("net.ipv4.tcp_keepalive_intvl", "30") // the runtime's
	pod := runningPod("never-landed", "network", "ipc", "uts")
	if _, err := p.Synchronize(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.RunPodSandbox(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod's values before the plugin's", func() bool { return p.record(pod).valuesBefore() != nil })
	failed, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "app-0"})
	if err != nil {
		t.Fatal(err)
	}
	want := failed.GetLinux().GetSysctl()
	if len(want) == 0 {
		t.Fatal("the first container got no sysctls: the case is not exercised")
	}
	// Its creation fails: nothing writes the spec's values into the pod.
	reload(t, p, "mode: spec\n"+testConfig)
	p.convergePass(context.Background())
	var wrote []string
	for k, v := range want {
		wrote = append(wrote, k+"="+v)
	}
	sort.Strings(wrote)
	if got := ns.takeWrites(); got != strings.Join(wrote, ",") {
		t.Errorf("the pass wrote %q, want the defaults %q", got, strings.Join(wrote, ","))
	}
	next, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "app-1"})
	if err != nil {
		t.Fatal(err)
	}
	wantNothingOnSpec(t, "the next container", next)
	told := parseApplied(next.GetAnnotations()[outcome.AnnotationInjected])
	for k, v := range want {
		if got := told[k]; got != v {
			t.Errorf("the next container is told %s = %q, want %q (not left to another writer)", k, got, v)
		}
	}
}

// A spec-mode container decided under the config before a reload has its
// sysctls written by runc when it starts, which can be after its pod
// converged: its older value is the plugin's own, not another writer's,
// and a pass when no such container can land any more (specLanding,
// asked for by the pass) writes the pod again. Likewise for a key that
// left the config: put back again, and forgotten only once nothing can
// land. Only containers decided before the pod's values were in place
// carry any (podRecord.inPlace): one decided after the pass carries none.
func TestConvergeRedoesWhatALateContainerLanded(t *testing.T) {
	const key = "net.ipv4.tcp_keepalive_time"
	const before, after = "mode: spec\nsysctls:\n  " + key + ": 600\n", "mode: spec\nsysctls:\n  " + key + ": 650\n"
	p, ns := newConvergeTest(t, before, t.TempDir(), nil)
	pod := synchronizedPod(t, p, "race")
	step := passWrites(t, p, ns)
	create := func(name string) *api.ContainerAdjustment {
		t.Helper()
		adj, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Id: name, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return adj
	}
	retryAsked := func() bool {
		asked := p.convergeRetry != nil && p.convergeRetry.Stop()
		p.convergeRetry = nil
		return asked
	}
	// Two containers decided before anything is in place: each carries 600.
	for _, name := range []string{"starts-after-a-reload", "starts-after-a-removal"} {
		if got := create(name).GetLinux().GetSysctl()[key]; got != "600" {
			t.Fatalf("%s: spec %q, want 600", name, got)
		}
	}
	step("first pass", key+"=600")
	if retryAsked() {
		t.Error("a later pass asked for with no container decided under another config")
	}

	reload(t, p, after)
	step("reload 600 -> 650", key+"=650")
	if !retryAsked() {
		t.Error("no later pass asked for, while the containers decided under 600 may still start")
	}
	ns.set(key, "600") // runc starts the first after the pass
	step("the pass asked for", key+"=650")
	wantNothingOnSpec(t, "container after the pass", create("decided-after"))
	ns.set(key, "900") // another writer's value is still left alone
	step("another writer", "")
	ns.set(key, "650")

	// The key leaves the config while the second may still land.
	reload(t, p, "mode: spec\nsysctls:\n  net.ipv4.tcp_keepalive_intvl: 60\n")
	step("key removed", "net.ipv4.tcp_keepalive_intvl=60,"+key+"=7200")
	ns.set(key, "600") // the second starts
	step("the pass after it landed", key+"=7200")
	// Nothing can land any more: the key is forgotten, and a value set
	// later is nobody's business of the plugin.
	p.records.mu.Lock()
	rec := p.records.pods[pod.GetId()]
	for _, l := range rec.landing {
		l.specLandsBy = time.Time{}
	}
	p.records.mu.Unlock()
	step("once nothing can land", "")
	ns.set(key, "650")
	step("a value set after", "")
}

// A container decided under an older config whose spec lands after the
// pass that converged its pod, the plugin restarted in between: the
// restarted plugin knows the value for its own from the container as
// Synchronize lists it (created, or started within specLanding), and
// writes the pod again; one listed as started earlier is past the time a
// plugin that saw it would have counted it as landing, and its value is
// left as another writer's.
func TestSpecLandingAcrossARestart(t *testing.T) {
	const key = "net.ipv4.tcp_keepalive_time"
	const before, after = "mode: spec\nsysctls:\n  " + key + ": 600\n", "mode: spec\nsysctls:\n  " + key + ": 650\n"
	for _, tc := range []struct {
		name       string
		state      api.ContainerState
		startedAgo time.Duration
		startsLate bool
		want       string
	}{
		{"created at the restart, starts after it", api.ContainerState_CONTAINER_CREATED, 0, false, key + "=650"},
		{"created at the restart, starts long after it", api.ContainerState_CONTAINER_CREATED, 0, true, key + "=650"},
		{"started just before the restart", api.ContainerState_CONTAINER_RUNNING, time.Second, false, key + "=650"},
		{"started long before the restart", api.ContainerState_CONTAINER_RUNNING, 2 * specLanding, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p, ns := newConvergeTest(t, before, dir, nil)
			pod := synchronizedPod(t, p, "late")
			ctr := &api.Container{Id: "c", PodSandboxId: pod.GetId(), Name: "c"}
			adj, _, err := p.CreateContainer(context.Background(), pod, ctr)
			if err != nil {
				t.Fatal(err)
			}
			if got := adj.GetLinux().GetSysctl()[key]; got != "600" {
				t.Fatalf("spec %q, want 600", got)
			}
			reload(t, p, after)
			passWrites(t, p, ns)("reload 600 -> 650", key+"=650")
			p.keepSetPods()

			// As containerd lists it after the restart.
			ctr.State, ctr.Annotations = tc.state, adj.GetAnnotations()
			ctr.Linux = &api.LinuxContainer{Sysctl: adj.GetLinux().GetSysctl()}
			if tc.state == api.ContainerState_CONTAINER_RUNNING {
				ctr.StartedAt = time.Now().Add(-tc.startedAgo).UnixNano()
				ns.set(key, "600") // runc wrote it before the restart
			}
			q := restartedOn(t, after, dir, nil, ns, pod, ctr)
			if tc.state == api.ContainerState_CONTAINER_CREATED {
				passWrites(t, q, ns)("before it starts", "")
				if q.convergeRetry == nil || !q.convergeRetry.Stop() {
					t.Error("no later pass asked for, while the created container may still start")
				}
				q.convergeRetry = nil
				if tc.startsLate {
					// Past specLanding: only its start tells.
					q.records.mu.Lock()
					for _, l := range q.records.pods[pod.GetId()].landing {
						l.specLandsBy = time.Time{}
					}
					q.records.mu.Unlock()
				}
				ns.set(key, "600") // runc writes it after the restart
				select {
				case <-q.convergeKick:
				default:
				}
				if err := q.StartContainer(context.Background(), pod, ctr); err != nil {
					t.Fatal(err)
				}
				select {
				case <-q.convergeKick:
				default:
					t.Error("no pass asked for when the container started")
				}
			}
			passWrites(t, q, ns)("the restarted plugin's pass", tc.want)
		})
	}
}

// A container decided under 600 starts long after the reload's pass
// brought its pod to 650, past the time its spec was known to land
// (specLanding): its start tells the plugin that the older values landed,
// the worker is asked for a pass, and the pass writes 650 again. A
// container decided after the pass starts with nothing to redo.
func TestSpecLandingLongAfterItsDecision(t *testing.T) {
	const key = "net.ipv4.tcp_keepalive_time"
	const before, after = "mode: spec\nsysctls:\n  " + key + ": 600\n", "mode: spec\nsysctls:\n  " + key + ": 650\n"
	p, ns := newConvergeTest(t, before, t.TempDir(), nil)
	p.convergeKick = make(chan struct{}, 1)
	pod := synchronizedPod(t, p, "slow")
	step := passWrites(t, p, ns)
	kicked := func() bool {
		select {
		case <-p.convergeKick:
			return true
		default:
			return false
		}
	}
	slow := &api.Container{Id: "slow", Name: "slow"}
	if _, _, err := p.CreateContainer(context.Background(), pod, slow); err != nil {
		t.Fatal(err)
	}
	reload(t, p, after)
	kicked()
	step("reload 600 -> 650", key+"=650")
	// Long after: no record counts its spec as landing any more.
	p.records.mu.Lock()
	for _, l := range p.records.pods[pod.GetId()].landing {
		l.specLandsBy = time.Time{}
	}
	p.records.mu.Unlock()
	if p.convergeRetry != nil {
		p.convergeRetry.Stop()
		p.convergeRetry = nil
	}

	ns.set(key, "600") // runc creates the container
	if err := p.StartContainer(context.Background(), pod, slow); err != nil {
		t.Fatal(err)
	}
	if !kicked() {
		t.Error("no pass asked for when a container decided under 600 started")
	}
	step("the pass after it started", key+"=650")

	later := &api.Container{Id: "later", Name: "later"}
	wantNothingOnSpec(t, "container after the pass", mustCreate(t, p, pod, later))
	if err := p.StartContainer(context.Background(), pod, later); err != nil {
		t.Fatal(err)
	}
	if kicked() {
		t.Error("a pass asked for when a container that carried nothing started")
	}
	ns.set(key, "900") // another writer's, still left
	step("another writer", "")
}

func mustCreate(t *testing.T, p *plugin, pod *api.PodSandbox, ctr *api.Container) *api.ContainerAdjustment {
	t.Helper()
	adj, _, err := p.CreateContainer(context.Background(), pod, ctr)
	if err != nil {
		t.Fatal(err)
	}
	return adj
}

// What the plugin knows of a pod only from its containers' annotations
// (it stopped before the worker kept what it set at creation) is kept in
// the pod's state by the next pass, even a pass that changes none of it:
// once those containers are gone, a restart would otherwise take the
// plugin's own value for another writer's and never put it back.
func TestPassKeepsWhatOnlyTheAnnotationsHeld(t *testing.T) {
	const key = "net.ipv4.tcp_keepalive_time"
	const with, without = "mode: spec\nsysctls:\n  " + key + ": 600\n", "mode: spec\nsysctls:\n  net.core.somaxconn: 4096\n"
	dir := t.TempDir()
	p, ns := newConvergeTest(t, with, dir, nil)
	pod := synchronizedPod(t, p, "unkept")
	ctr := &api.Container{Id: "c", PodSandboxId: pod.GetId(), Name: "c"}
	adj := mustCreate(t, p, pod, ctr)
	ctr.State, ctr.Annotations = api.ContainerState_CONTAINER_RUNNING, adj.GetAnnotations()
	ctr.Linux = &api.LinuxContainer{Sysctl: adj.GetLinux().GetSysctl()}
	ns.set(key, "600") // runc wrote it; the plugin stops before keeping it

	q := restartedOn(t, with, dir, nil, ns, pod, ctr)
	passWrites(t, q, ns)("the pass after the restart", "")
	r := restartedOn(t, without, dir, nil, ns, pod) // the container is gone
	passWrites(t, r, ns)("the key out of the config", key+"=7200")
}

// Containers created while a reload converges their pod, each landing
// what its spec carries a moment after its decision as runc would, half
// of them only after the pass: once they have all started, a pass leaves
// the pod at the new value, whichever order the decisions, the pass and
// the landings took.
func TestConvergeWithContainersStartingMeanwhile(t *testing.T) {
	const key = "net.ipv4.tcp_keepalive_time"
	for round := range 20 {
		p, ns := newConvergeTest(t, "mode: spec\nsysctls:\n  "+key+": 600\n", t.TempDir(), nil)
		pod := synchronizedPod(t, p, "busy")
		var wg sync.WaitGroup
		passed := make(chan struct{})
		for i := range 4 {
			wg.Go(func() {
				ctr := &api.Container{Id: fmt.Sprint("c", i), Name: fmt.Sprint("c", i)}
				adj, _, err := p.CreateContainer(context.Background(), pod, ctr)
				if err != nil {
					t.Error(err)
					return
				}
				if i%2 == 0 {
					<-passed // starts only after the pass
				}
				time.Sleep(time.Duration(i*round%7) * 100 * time.Microsecond)
				if v, ok := adj.GetLinux().GetSysctl()[key]; ok {
					ns.set(key, v) // runc starts it
				}
				if err := p.StartContainer(context.Background(), pod, ctr); err != nil {
					t.Error(err)
				}
			})
		}
		reload(t, p, "mode: spec\nsysctls:\n  "+key+": 650\n")
		p.convergePass(context.Background())
		close(passed)
		wg.Wait()
		p.convergePass(context.Background()) // the pass asked for
		got := ns.get(key)
		if got != "650" {
			t.Fatalf("round %d: the pod holds %s after its containers started, want 650", round, got)
		}
	}
}

// The worker runs at the lowest priority, so that on a busy node the
// runtime and the handlers take the CPU first: its writes are made from a
// thread at nsthread.BackgroundNice.
func TestConvergeWorkerRunsInTheBackground(t *testing.T) {
	p, ns := newConvergeTest(t, "mode: spec\nsysctls:\n  net.ipv4.tcp_keepalive_time: 600\n", t.TempDir(), nil)
	nice := make(chan int, 1)
	p.writeNamespaces = func(target podns.Target, list []sysctl.Sysctl) []podns.WriteError {
		select {
		case nice <- threadNiceForTest(t):
		default:
		}
		return ns.write(target, list)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.convergeRunningPods(ctx) }()
	defer func() { cancel(); <-done }()
	if _, err := p.Synchronize(context.Background(), []*api.PodSandbox{runningPod("bg", "network", "ipc", "uts")}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-nice:
		if got != nsthread.BackgroundNice {
			t.Errorf("the worker wrote from a thread at nice %d, want %d", got, nsthread.BackgroundNice)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the worker wrote nothing within 30 s of Synchronize")
	}
}

// A pod that creates a container under each of many configs within
// specLanding keeps only the newest maxLanding records as landing, and
// no more are reachable from its record through theirs.
func TestConvergeLandingIsBounded(t *testing.T) {
	p, _ := newConvergeTest(t, "mode: spec\nsysctls:\n  net.ipv4.tcp_keepalive_time: 600\n", t.TempDir(), nil)
	pod := synchronizedPod(t, p, "many")
	for i := range 3 * maxLanding {
		if _, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: fmt.Sprint("c", i)}); err != nil {
			t.Fatal(err)
		}
		reload(t, p, fmt.Sprintf("mode: spec\nsysctls:\n  net.ipv4.tcp_keepalive_time: %d\n", 601+i))
		p.convergePass(context.Background())
	}
	rec := p.record(pod)
	if len(rec.landing) != maxLanding {
		t.Fatalf("landing: %d records, want %d", len(rec.landing), maxLanding)
	}
	reachable := map[*podRecord]bool{}
	var walk func(*podRecord)
	walk = func(r *podRecord) {
		for _, l := range r.landing {
			if !reachable[l] {
				reachable[l] = true
				walk(l)
			}
		}
	}
	walk(rec)
	if len(reachable) != maxLanding {
		t.Errorf("%d records reachable through landing, want %d", len(reachable), maxLanding)
	}
	values, _ := rec.landingSince(p.records.landsBy(rec), p.current.Load(), time.Now())
	if got := values["net.ipv4.tcp_keepalive_time"]; len(got) != maxLanding || got[maxLanding-1] != fmt.Sprint(601+3*maxLanding-2) {
		t.Errorf("landing values %v: want the newest %d, the last %d", got, maxLanding, 601+3*maxLanding-2)
	}
}

// A key that a single reload takes out of the config, in a pod whose
// container was decided under the config before: put back at once, and
// again after the container's value lands, then forgotten.
func TestConvergeRemovedKeyWithALateContainer(t *testing.T) {
	const key = "net.ipv4.tcp_keepalive_time"
	p, ns := newConvergeTest(t, "mode: spec\nsysctls:\n  "+key+": 600\n  net.ipv4.tcp_keepalive_intvl: 60\n", t.TempDir(), nil)
	pod := synchronizedPod(t, p, "removed")
	step := passWrites(t, p, ns)
	step("first pass", "net.ipv4.tcp_keepalive_intvl=60,"+key+"=600")
	if _, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "late"}); err != nil {
		t.Fatal(err)
	}
	reload(t, p, "mode: spec\nsysctls:\n  net.ipv4.tcp_keepalive_intvl: 60\n")
	step("key removed", key+"=7200")
	ns.set(key, "600") // the container decided under 600 starts
	step("the pass after it landed", key+"=7200")
}

// A record's values count as landing only until specLanding after its
// window: later, the same value set by hand is another writer's.
func TestConvergeLandingEnds(t *testing.T) {
	const key = "net.ipv4.tcp_keepalive_time"
	p, ns := newConvergeTest(t, "mode: spec\nsysctls:\n  "+key+": 600\n", t.TempDir(), nil)
	pod := synchronizedPod(t, p, "ends")
	step := passWrites(t, p, ns)
	step("first pass", key+"=600")
	if _, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "c"}); err != nil {
		t.Fatal(err)
	}
	reload(t, p, "mode: spec\nsysctls:\n  "+key+": 650\n")
	step("reload", key+"=650")
	// Long after: the landing window and its grace are over.
	p.records.mu.Lock()
	for _, l := range p.records.pods[pod.GetId()].landing {
		l.specLandsBy = time.Now().Add(-2*specLanding - time.Second)
	}
	p.records.mu.Unlock()
	ns.set(key, "600") // an operator, by hand
	step("a value set by hand later", "")
	if ns.get(key) != "600" {
		t.Errorf("another writer's value overwritten: %q", ns.get(key))
	}
}

// A container decided from a pod's record after the pass read the
// record's mark and before it replaced the record: the pass's plan did
// not count it, so the record is not replaced and the pod is tried again
// (replaceRetry); nothing is written meanwhile.
func TestConvergeRetriesAPodDecidedDuringItsPlan(t *testing.T) {
	p, _ := newConvergeTest(t, "mode: spec\nsysctls:\n  net.ipv4.tcp_keepalive_time: 600\n", t.TempDir(), nil)
	pod := synchronizedPod(t, p, "during")
	old := p.record(pod)
	mark := p.records.landsBy(old)
	if _, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "meanwhile"}); err != nil {
		t.Fatal(err)
	}
	reload(t, p, "mode: spec\nsysctls:\n  net.ipv4.tcp_keepalive_time: 650\n")
	next, wait := p.replaceRecord(old, mark, p.current.Load(), pod, nil)
	if next != nil || wait != replaceRetry {
		t.Fatalf("replaceRecord after a container was decided: a record %t, wait %v; want none, wait %v", next != nil, wait, replaceRetry)
	}
	if p.record(pod) != old {
		t.Error("the record was replaced")
	}
	next, wait = p.replaceRecord(old, p.records.landsBy(old), p.current.Load(), pod, nil)
	if next == nil || wait != 0 || len(next.landing) != 1 || next.landing[0] != old {
		t.Errorf("replaceRecord with the mark read again: a record %t, wait %v; want one keeping the old one as landing", next != nil, wait)
	}
}

// A pod's values read after one of its containers was answered may hold
// what runc wrote from that container's spec: they are not kept as its
// values before the plugin's.
func TestValuesBeforeOnlyUntilTheFirstAnswer(t *testing.T) {
	rec := &podRecord{}
	rec.noteBefore(map[string]string{"net.ipv4.tcp_keepalive_time": "7200"})
	if got := rec.valuesBefore()["net.ipv4.tcp_keepalive_time"]; got != "7200" {
		t.Fatalf("read before any answer: kept %q, want 7200", got)
	}
	late := &podRecord{}
	late.noteSetOnSpec("c0", []sysctl.Sysctl{sysctl.New("net.ipv4.tcp_keepalive_time", "600")})
	late.noteBefore(map[string]string{"net.ipv4.tcp_keepalive_time": "600"})
	if got := late.valuesBefore(); got != nil {
		t.Errorf("read after the pod's first answer: kept %v, want nothing", got)
	}
}

// The worker rests (share-1) times its work, once the rest owed reaches
// pacerMinRest, at most pacerMaxRest at a time; share 0 or 1 never rests.
func TestPacerRests(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name  string
		share int
		works []time.Duration
		want  []time.Duration
	}{
		{"small works add up before a rest", 4, []time.Duration{ms, ms, ms}, []time.Duration{6 * ms}},
		{"a long work rests at most pacerMaxRest", 4, []time.Duration{time.Second}, []time.Duration{pacerMaxRest}},
		{"each rest pays what is owed", 4, []time.Duration{2 * ms, 2 * ms}, []time.Duration{6 * ms, 6 * ms}},
		{"under pacerMinRest, no rest yet", 4, []time.Duration{ms}, nil},
		{"share 2 rests as long as it worked", 2, []time.Duration{5 * ms}, []time.Duration{5 * ms}},
		{"share 1 never rests", 1, []time.Duration{time.Second}, nil},
		{"the zero pacer never rests", 0, []time.Duration{time.Second}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var slept []time.Duration
			p := pacer{share: tc.share, sleep: func(d time.Duration) { slept = append(slept, d) }}
			for _, w := range tc.works {
				p.worked(w)
			}
			if fmt.Sprint(slept) != fmt.Sprint(tc.want) {
				t.Errorf("rests %v, want %v", slept, tc.want)
			}
		})
	}
}

// The plugin's worker is paced, and a pass rests between its pods: with
// a CPU clock that moves 1 ms per reading, each pod owes 3 ms, so the
// rests come every other pod.
func TestConvergePassRestsBetweenPods(t *testing.T) {
	if got := newPlugin(logrus.New(), nil, "").convergePace.share; got != convergeShare || convergeShare < 2 {
		t.Fatalf("the worker's share is %d, want convergeShare (%d, at least 2)", got, convergeShare)
	}
	p, _ := newConvergeTest(t, "sysctls:\n  net.ipv4.tcp_keepalive_time: 600\n", t.TempDir(), nil)
	var rests []time.Duration
	var cpu time.Duration
	clock := func() time.Duration { cpu += time.Millisecond; return cpu }
	p.convergePace = pacer{share: 4, sleep: func(d time.Duration) { rests = append(rests, d) }, cpu: clock}
	pods := []*api.PodSandbox{runningPod("a", "network"), runningPod("b", "network"), runningPod("c", "network")}
	if _, err := p.Synchronize(context.Background(), pods, nil); err != nil {
		t.Fatal(err)
	}
	p.convergePass(context.Background())
	if want := []time.Duration{6 * time.Millisecond}; fmt.Sprint(rests) != fmt.Sprint(want) {
		t.Errorf("rests %v in a pass over %d pods, want %v", rests, len(pods), want)
	}
}

// Once a pod's values are in place (a container that carried them
// started, a pass brought the pod to its config, or the pod had
// containers when the plugin first saw it), the create path writes
// nothing into it in either mode: a value another writer set since is
// not overwritten by a container that cannot read it; the pass, which
// reads first, leaves it. A container told what it has names the key
// left to convergence.
func TestContainersOfAPodInPlaceWriteNothing(t *testing.T) {
	const key, other = "net.ipv4.tcp_keepalive_intvl", "41"
	create := func(t *testing.T, p *plugin, pod *api.PodSandbox, id string) *api.ContainerAdjustment {
		t.Helper()
		adj, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Id: id, Name: id, PodSandboxId: pod.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		return adj
	}
	t.Run("spec, created under the plugin", func(t *testing.T) {
		p, ns := newConvergeTest(t, "mode: spec\n"+testConfig, t.TempDir(), nil)
		pod := synchronizedPod(t, p, "spec-created")
		first := create(t, p, pod, "c0")
		if first.GetLinux().GetSysctl()[key] == "" {
			t.Fatalf("first container's spec lacks %s: the case is not exercised", key)
		}
		// Decided before the first started: nothing is in place yet.
		if got := create(t, p, pod, "c1").GetLinux().GetSysctl()[key]; got == "" {
			t.Errorf("a container decided before the first started carries no %s", key)
		}
		if err := p.StartContainer(context.Background(), pod, &api.Container{Id: "c0", PodSandboxId: pod.GetId()}); err != nil {
			t.Fatal(err)
		}
		ns.set(key, other)
		wantNothingOnSpec(t, "a container after the first started", create(t, p, pod, "c2"))
		p.convergePass(context.Background())
		if ns.get(key) != other {
			t.Errorf("another writer's %s=%s overwritten by the pass: %s", key, other, ns.get(key))
		}
	})
	for _, mode := range []string{"spec", "namespace"} {
		t.Run(mode+", listed at Synchronize with a container", func(t *testing.T) {
			p, ns := newConvergeTest(t, "mode: "+mode+"\n"+testConfig, t.TempDir(), nil)
			pod := runningPod("listed", "network", "ipc", "uts")
			ctr := &api.Container{Id: "init", Name: "init", PodSandboxId: pod.GetId()}
			if _, err := p.Synchronize(context.Background(), []*api.PodSandbox{pod}, []*api.Container{ctr}); err != nil {
				t.Fatal(err)
			}
			ns.set(key, other) // a privileged init container's, before the plugin
			adj := create(t, p, pod, "app")
			wantNothingOnSpec(t, "the pod's next container", adj)
			if got := ns.takeWrites(); got != "" {
				t.Errorf("the create path wrote %q into a pod it first saw with a container", got)
			}
			if got := adj.GetAnnotations()[outcome.AnnotationSkipped]; !strings.Contains(got, key+" ("+policy.SkipConvergence.String()) {
				t.Errorf("skipped annotation %q does not leave %s to convergence", got, key)
			}
			p.convergePass(context.Background())
			if ns.get(key) != other {
				t.Errorf("another writer's %s=%s overwritten by the pass: %s", key, other, ns.get(key))
			}
			if got := ns.get("net.ipv4.tcp_keepalive_time"); got == kernelDefaults()["net.ipv4.tcp_keepalive_time"] {
				t.Errorf("the pass left tcp_keepalive_time at a fresh namespace's %s", got)
			}
		})
	}
}

// A key put back once it left the config is no longer the plugin's in the
// pod's record either: when it comes back to the config, the next first
// write records its value before, so that after a restart the key, out
// of the config again, goes back to it. (The model found the record
// bringing the key back as the plugin's where the pod's state held
// nothing, and the state never learning its value before.)
func TestKeyPutBackIsForgottenByTheRecordToo(t *testing.T) {
	const withKey, without = "mode: spec\nsysctls:\n  kernel.msgmax: 600\n  net.core.somaxconn: 600\n", "mode: spec\nsysctls:\n  net.core.somaxconn: 600\n"
	dir := t.TempDir()
	p, ns := newConvergeTest(t, withKey, dir, nil)
	pod := runningPod("host-net", "ipc", "uts") // the net key is the host's: the pod's state holds msgmax alone
	if _, err := p.Synchronize(context.Background(), []*api.PodSandbox{pod}, nil); err != nil {
		t.Fatal(err)
	}
	step := passWrites(t, p, ns)
	step("first pass", "kernel.msgmax=600")
	reload(t, p, without)
	step("the key leaves the config", "kernel.msgmax=8192")
	reload(t, p, withKey)
	step("the key comes back", "kernel.msgmax=600")

	q := restartedOn(t, without, dir, nil, ns, pod)
	q.convergePass(context.Background())
	if got := ns.takeWrites(); got != "kernel.msgmax=8192" {
		t.Errorf("after a restart with the key out of the config: wrote %q, want kernel.msgmax=8192", got)
	}
}
