// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/sirupsen/logrus"
	"pgregory.net/rapid"
)

// The model test of convergence: generated sequences of pods created,
// stopped and removed, containers whose spec lands late or never,
// another writer's writes, reloads (values changed, keys added and
// removed, a namespace excluded and let back), passes and plugin restarts
// with and without the state directory, in both modes. Only the kernel's
// side is a model (modelKernel: namespaces and their values as data, seen
// through the plugin's readNamespaces, writeNamespaces and held.take);
// the handlers, the records, the decision, the pod state and the held
// pods run for real. rapid shrinks a failing sequence to its shortest.
// go test -run TestModel -rapid.checks=N runs N sequences a mode from
// a random seed (modelChecks from modelSeed unless told).

// modelKeys are the keys the model's configs draw from, with a fresh
// namespace's value each.
var modelKeys = map[string]string{
	"net.ipv4.tcp_keepalive_time":  "7200",
	"net.ipv4.tcp_keepalive_intvl": "75",
	"net.core.somaxconn":           "4096",
	"kernel.msgmax":                "8192",
}

// modelValues are the values configs give; otherValues another writer's,
// told apart from every config's and every fresh value.
var (
	modelValues = []string{"600", "650", "16384"}
	otherValues = []string{"41", "42"}
)

const modelExcluded = "excluded"

// pendingSpec is a container not started yet, and the sysctls on its
// spec.
type pendingSpec struct {
	ctr     *api.Container
	sysctls map[string]string
}

type modelPod struct {
	sb      *api.PodSandbox
	running bool
	// own is the pod's securityContext.sysctls.
	own map[string]string
	// other is what another writer set, by key.
	other map[string]string
	// pending is the specs of containers not started yet.
	pending []pendingSpec
	ctrs    []*api.Container
	// started counts its containers that started.
	started int
	// lost: the plugin restarted without its state since it set values
	// in the pod; it may take its own for another writer's, so only
	// safety is checked.
	lost bool
	// landedSincePass: a late spec landed after the last pass.
	landedSincePass bool
}

// modelKernel is the pods' namespaces ("model:<pod>/<kind>"), each a
// key's value by key; a pod's target has no entry for a namespace it
// shares with the host. It records every breach of the invariants that
// hold at all times.
type modelKernel struct {
	mu       sync.Mutex
	ns       map[string]map[string]string
	pods     map[string]*modelPod
	breaches []string
}

// modelNamespace names a pod's namespace of one kind.
func modelNamespace(podID string, kind sysctl.Namespace) string {
	return "model:" + podID + "/" + kind.String()
}

func (k *modelKernel) namespaceOf(t podns.Target, key string) (name string, pod *modelPod, ok bool) {
	ref, has := t[sysctl.NamespaceOf(key)]
	if !has {
		return "", nil, false
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(ref.Path, "model:"), "/")
	return ref.Path, k.pods[id], true
}

func (k *modelKernel) read(t podns.Target, keys []string) map[string]podns.Value {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]podns.Value{}
	for _, key := range keys {
		name, _, ok := k.namespaceOf(t, key)
		if !ok {
			out[key] = podns.Value{Err: os.ErrNotExist}
			continue
		}
		out[key] = podns.Value{Value: k.ns[name][key]}
	}
	return out
}

func (k *modelKernel) write(t podns.Target, list []sysctl.Sysctl) []podns.WriteError {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, s := range list {
		name, pod, ok := k.namespaceOf(t, s.Key())
		switch {
		case !ok:
			k.breaches = append(k.breaches, fmt.Sprintf("wrote %s=%s into the host's namespace", s.Key(), s.Value()))
			continue
		case pod == nil || !pod.running:
			k.breaches = append(k.breaches, fmt.Sprintf("wrote %s=%s into %s, whose pod is not running", s.Key(), s.Value(), name))
		}
		k.checkWrite(pod, name, s.Key(), s.Value(), "the plugin")
		k.ns[name][s.Key()] = s.Value()
	}
	return nil
}

// checkWrite records a write of the pod's own key, or over another
// writer's value.
func (k *modelKernel) checkWrite(pod *modelPod, name, key, value, by string) {
	if pod == nil {
		return
	}
	if _, own := pod.own[key]; own {
		k.breaches = append(k.breaches, fmt.Sprintf("%s wrote %s=%s, the pod's own key, into %s", by, key, value, name))
	}
	if v, ok := pod.other[key]; ok && k.ns[name][key] == v && value != v {
		k.breaches = append(k.breaches, fmt.Sprintf("%s wrote %s=%s over another writer's %s in %s", by, key, value, v, name))
	}
}

func (k *modelKernel) fresh(names []string) (map[string]string, error) {
	out := map[string]string{}
	for _, n := range names {
		if v, ok := modelKeys[n]; ok {
			out[n] = v
		}
	}
	return out, nil
}

// target is the pod's namespaces as the held process reaches them.
func (k *modelKernel) target(pod *api.PodSandbox) podns.Target {
	t := podns.Target{}
	for _, ns := range pod.GetLinux().GetNamespaces() {
		kind, ok := sysctl.NamespaceByOCIName(ns.GetType())
		if ok {
			t[kind] = podns.NamespaceRef{Path: modelNamespace(pod.GetId(), kind)}
		}
	}
	return t
}

// modelFetcher answers lookups with the model's pods' own keys.
type modelFetcher struct{ k *modelKernel }

func (f modelFetcher) Fetch(_ context.Context, podID string) (podsysctl.PodSysctls, error) {
	f.k.mu.Lock()
	defer f.k.mu.Unlock()
	pod := f.k.pods[podID]
	if pod == nil {
		return podsysctl.PodSysctls{}, fmt.Errorf("no pod %s", podID)
	}
	return podsysctl.PodSysctls{Own: maps.Clone(pod.own), Runtime: map[string]string{}, Source: podsysctl.SourceSandboxConfig}, nil
}

type modelMachine struct {
	mode     string
	kernel   *modelKernel
	p        *plugin
	stateDir string
	cfg      map[string]string
	exclude  bool
	nextPod  int
	tmp      func() string
}

func (m *modelMachine) configText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mode: %s\n", m.mode)
	if m.exclude {
		b.WriteString("exclude:\n  namespaces: [" + modelExcluded + "]\n")
	}
	b.WriteString("sysctls:\n")
	if len(m.cfg) == 0 {
		b.WriteString("  {}\n")
	}
	for _, k := range slices.Sorted(maps.Keys(m.cfg)) {
		fmt.Fprintf(&b, "  %s: %q\n", k, m.cfg[k])
	}
	return b.String()
}

// start makes a plugin on the model's kernel and tells it the running
// pods, as containerd does at registration.
func (m *modelMachine) start(t *rapid.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	p := newPlugin(log, nil, "")
	if _, err := p.Configure(context.Background(), m.configText(), "containerd", "2.4.2"); err != nil {
		t.Fatalf("Configure: %v\n%s", err, m.configText())
	}
	p.useFetcher(modelFetcher{m.kernel})
	p.readNamespaces, p.writeNamespaces, p.freshValues = m.kernel.read, m.kernel.write, m.kernel.fresh
	p.visitNamespaces = func(t podns.Target, keys []string, decide func(map[string]podns.Value) []sysctl.Sysctl) []podns.WriteError {
		writes := decide(p.readNamespaces(t, keys))
		if len(writes) == 0 {
			return nil
		}
		return p.writeNamespaces(t, writes)
	}
	p.held.take = func(pod *api.PodSandbox) (heldProcess, error) {
		return fakeHeld{m.kernel.target(pod)}, nil
	}
	p.afterAnswer = func(work func()) { work() }
	// The worker's rests are time, not behaviour (Pass).
	p.convergePace.sleep = func(time.Duration) {}
	p.openPodState(m.stateDir)
	m.p = p
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	for _, id := range slices.Sorted(maps.Keys(m.kernel.pods)) {
		pod := m.kernel.pods[id]
		if pod.running {
			pods = append(pods, pod.sb)
			ctrs = append(ctrs, pod.ctrs...)
		}
	}
	if _, err := p.Synchronize(context.Background(), pods, ctrs); err != nil {
		t.Fatal(err)
	}
}

func (m *modelMachine) runningPods() []string {
	var ids []string
	for _, id := range slices.Sorted(maps.Keys(m.kernel.pods)) {
		if m.kernel.pods[id].running {
			ids = append(ids, id)
		}
	}
	return ids
}

// CreatePod runs a new pod and its first container.
func (m *modelMachine) CreatePod(t *rapid.T) {
	if len(m.kernel.pods) >= 5 {
		t.Skip("enough pods")
	}
	id := fmt.Sprintf("m%d", m.nextPod)
	m.nextPod++
	hostNet := rapid.Bool().Draw(t, "hostNetwork")
	kinds := []string{"ipc", "uts"}
	if !hostNet {
		kinds = append(kinds, "network")
	}
	sb := testPod(id, kinds...)
	if rapid.Bool().Draw(t, "excludedNamespace") {
		sb.Namespace = modelExcluded
	}
	pod := &modelPod{sb: sb, running: true, own: map[string]string{}, other: map[string]string{}}
	if rapid.Bool().Draw(t, "ownKey") {
		key := rapid.SampledFrom(slices.Sorted(maps.Keys(modelKeys))).Draw(t, "own")
		pod.own[key] = "33"
	}
	m.kernel.mu.Lock()
	m.kernel.pods[id] = pod
	for _, kind := range []sysctl.Namespace{sysctl.Net, sysctl.IPC, sysctl.UTS} {
		m.kernel.ns[modelNamespace(id, kind)] = map[string]string{}
	}
	for key, v := range modelKeys {
		if name, _, ok := m.kernel.namespaceOf(m.kernel.target(sb), key); ok {
			m.kernel.ns[name][key] = v
			if own, ok := pod.own[key]; ok {
				m.kernel.ns[name][key] = own // the runtime sets the pod's own at creation
			}
		}
	}
	m.kernel.mu.Unlock()
	if err := m.p.RunPodSandbox(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	m.createContainer(t, pod)
}

// CreateContainer adds a container to a running pod.
func (m *modelMachine) CreateContainer(t *rapid.T) {
	ids := m.runningPods()
	if len(ids) == 0 {
		t.Skip("no running pod")
	}
	m.createContainer(t, m.kernel.pods[rapid.SampledFrom(ids).Draw(t, "pod")])
}

func (m *modelMachine) createContainer(t *rapid.T, pod *modelPod) {
	ctr := &api.Container{Id: fmt.Sprintf("%s-c%d", pod.sb.Id, len(pod.ctrs)), PodSandboxId: pod.sb.Id, Name: "app"}
	adj, _, err := m.p.CreateContainer(context.Background(), pod.sb, ctr)
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	ctr.Annotations = adj.GetAnnotations()
	pod.ctrs = append(pod.ctrs, ctr)
	if spec := adj.GetLinux().GetSysctl(); len(spec) > 0 {
		pod.pending = append(pod.pending, pendingSpec{ctr: ctr, sysctls: spec})
		return
	}
	m.startContainer(t, pod, ctr)
}

// startContainer tells the plugin that the container started, as the
// runtime does once runc has made it.
func (m *modelMachine) startContainer(t *rapid.T, pod *modelPod, ctr *api.Container) {
	pod.started++
	if err := m.p.StartContainer(context.Background(), pod.sb, ctr); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
}

// LandSpec: runc starts a container whose spec the plugin answered,
// writing its sysctls; perhaps long after, perhaps never.
func (m *modelMachine) LandSpec(t *rapid.T) {
	var ids []string
	for _, id := range m.runningPods() {
		if len(m.kernel.pods[id].pending) > 0 {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		t.Skip("nothing to land")
	}
	pod := m.kernel.pods[rapid.SampledFrom(ids).Draw(t, "pod")]
	landing := pod.pending[0]
	spec := landing.sysctls
	pod.pending = pod.pending[1:]
	if rapid.Bool().Draw(t, "creationFailed") {
		return
	}
	m.land(pod, spec)
	m.startContainer(t, pod, landing.ctr)
}

// land is runc writing a spec's sysctls into the pod as it makes the
// container.
func (m *modelMachine) land(pod *modelPod, spec map[string]string) {
	m.kernel.mu.Lock()
	defer m.kernel.mu.Unlock()
	target := m.kernel.target(pod.sb)
	for _, key := range slices.Sorted(maps.Keys(spec)) {
		name, _, ok := m.kernel.namespaceOf(target, key)
		if !ok {
			m.kernel.breaches = append(m.kernel.breaches, fmt.Sprintf("a spec the plugin answered sets %s, of a namespace the pod shares with the host", key))
			continue
		}
		m.kernel.checkWrite(pod, name, key, spec[key], "a spec the plugin answered")
		m.kernel.ns[name][key] = spec[key]
	}
	pod.landedSincePass = true
}

// OtherWrites: a privileged container of the pod, or an operator acting
// on its running containers, sets a key the pod does not set itself.
func (m *modelMachine) OtherWrites(t *rapid.T) {
	var ids []string
	for _, id := range m.runningPods() {
		// A spec answered before the write lands the plugin's value over
		// it; runc does that, whatever the plugin knows. A pod none of
		// whose containers started has nobody in it to write.
		if pod := m.kernel.pods[id]; len(pod.pending) == 0 && pod.started > 0 {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		t.Skip("no pod")
	}
	pod := m.kernel.pods[rapid.SampledFrom(ids).Draw(t, "pod")]
	key := rapid.SampledFrom(slices.Sorted(maps.Keys(modelKeys))).Draw(t, "key")
	if _, own := pod.own[key]; own {
		t.Skip("the pod's own key")
	}
	m.kernel.mu.Lock()
	defer m.kernel.mu.Unlock()
	name, _, ok := m.kernel.namespaceOf(m.kernel.target(pod.sb), key)
	if !ok {
		t.Skip("a host namespace")
	}
	v := rapid.SampledFrom(otherValues).Draw(t, "value")
	m.kernel.ns[name][key] = v
	pod.other[key] = v
}

// StopPod stops a running pod, as kubelet stops a finished Job's.
func (m *modelMachine) StopPod(t *rapid.T) {
	ids := m.runningPods()
	if len(ids) == 0 {
		t.Skip("no running pod")
	}
	pod := m.kernel.pods[rapid.SampledFrom(ids).Draw(t, "pod")]
	m.kernel.mu.Lock()
	pod.running = false
	m.kernel.mu.Unlock()
	if err := m.p.StopPodSandbox(context.Background(), pod.sb); err != nil {
		t.Fatal(err)
	}
}

// RemovePod removes a stopped pod.
func (m *modelMachine) RemovePod(t *rapid.T) {
	var ids []string
	for _, id := range slices.Sorted(maps.Keys(m.kernel.pods)) {
		if !m.kernel.pods[id].running {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		t.Skip("no stopped pod")
	}
	id := rapid.SampledFrom(ids).Draw(t, "pod")
	if err := m.p.RemovePodSandbox(context.Background(), m.kernel.pods[id].sb); err != nil {
		t.Fatal(err)
	}
	m.kernel.mu.Lock()
	delete(m.kernel.pods, id)
	m.kernel.mu.Unlock()
}

// Reload puts a new config in force: keys added, removed or changed, the
// excluded namespace gained or lost.
func (m *modelMachine) Reload(t *rapid.T) {
	next := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(modelKeys)) {
		if rapid.Bool().Draw(t, "has "+k) {
			next[k] = rapid.SampledFrom(modelValues).Draw(t, k)
		}
	}
	m.cfg, m.exclude = next, rapid.Bool().Draw(t, "exclude")
	cfg, err := config.Parse("model.yaml", []byte(m.configText()), nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, m.configText())
	}
	m.p.setConfig(cfg)
}

// Restart stops the plugin and starts another, with its state directory
// or a new one.
func (m *modelMachine) Restart(t *rapid.T) {
	for _, pod := range m.kernel.pods {
		if m.mode == "spec" && (pod.landedSincePass || len(pod.pending) > 0) {
			// Not stopped yet (docs/security.md): what the plugin knows
			// of a spec that may land, or landed after a pass, is in
			// memory only; a restarted plugin takes it for another
			// writer's.
			t.Skip("a spec may land, or landed since the last pass")
		}
	}
	// The worker keeps what the plugin set at once (keepKick); a stop in
	// the moment between is not modelled (docs/security.md): the state
	// would then say less than the containers' annotations, which are
	// not read beside a state.
	m.p.keepSetPods()
	if !rapid.Bool().Draw(t, "keepState") {
		m.stateDir = m.tmp()
		for _, pod := range m.kernel.pods {
			pod.lost = true
		}
	}
	m.start(t)
}

// KeepSet: the worker keeps what the plugin set at creation in the
// pods' state, as it does between passes.
func (m *modelMachine) KeepSet(*rapid.T) { m.p.keepSetPods() }

// Pass runs one convergence pass, as the worker does after a kick.
func (m *modelMachine) Pass(t *rapid.T) {
	// A quiet node: the worker does not wait for requests to settle.
	m.p.requests.mu.Lock()
	m.p.requests.lastDone = time.Time{}
	m.p.requests.mu.Unlock()
	m.p.keepSetPods()
	m.p.convergePass(context.Background())
	m.checkConverged(t)
	// A spec may land after any number of passes. Not modelled: one
	// that lands more than specLanding after its decision (a sequence
	// here takes less), which the plugin takes for another writer's
	// (docs/security.md).
	for _, pod := range m.kernel.pods {
		pod.landedSincePass = false
	}
}

// checkConverged: after a pass, every running pod holds, key by key, what
// a pod created now would get, apart from its own keys and another
// writer's; a key the plugin does not give it is at a fresh value.
func (m *modelMachine) checkConverged(t *rapid.T) {
	m.kernel.mu.Lock()
	defer m.kernel.mu.Unlock()
	for _, id := range m.runningPods() {
		pod := m.kernel.pods[id]
		if pod.lost || len(pod.pending) > 0 || pod.landedSincePass {
			continue
		}
		target := m.kernel.target(pod.sb)
		for _, key := range slices.Sorted(maps.Keys(modelKeys)) {
			name, _, ok := m.kernel.namespaceOf(target, key)
			if !ok {
				continue
			}
			want, why := modelKeys[key], "a fresh value"
			switch v, cfg := m.cfg[key]; {
			case pod.own[key] != "":
				want, why = pod.own[key], "the pod's own"
			case pod.other[key] != "":
				want, why = pod.other[key], "another writer's"
			case cfg && (!m.exclude || pod.sb.Namespace != modelExcluded):
				want, why = v, "the config's"
			}
			if got := m.kernel.ns[name][key]; got != want {
				t.Fatalf("after a pass, pod %s (%s) %s = %s, want %s (%s)", id, pod.sb.Namespace, key, got, want, why)
			}
		}
	}
}

func (m *modelMachine) Check(t *rapid.T) {
	m.kernel.mu.Lock()
	defer m.kernel.mu.Unlock()
	if len(m.kernel.breaches) > 0 {
		t.Fatalf("%s", strings.Join(m.kernel.breaches, "\n"))
	}
}

// modelChecks is how many sequences a mode runs, and modelSeed where
// they start, unless -rapid.checks or -rapid.seed says otherwise: fixed,
// so that make test costs the same and finds the same each time. A run
// given -rapid.checks alone starts from a random seed, to look further.
const (
	modelChecks = "1000"
	modelSeed   = "20261207"
)

func TestModel(t *testing.T) {
	told := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { told[f.Name] = true })
	if !told["rapid.checks"] {
		for name, v := range map[string]string{"rapid.checks": modelChecks, "rapid.seed": modelSeed} {
			if told[name] {
				continue
			}
			if err := flag.Set(name, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, mode := range []string{"spec", "namespace"} {
		t.Run(mode, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				m := &modelMachine{mode: mode, kernel: &modelKernel{ns: map[string]map[string]string{}, pods: map[string]*modelPod{}}, cfg: map[string]string{"net.ipv4.tcp_keepalive_time": "600"}, tmp: t.TempDir}
				m.stateDir = m.tmp()
				m.start(rt)
				rt.Repeat(rapid.StateMachineActions(m))
			})
		})
	}
}
