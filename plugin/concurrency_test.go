// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/outcome"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/nri-sysctl/nri-sysctl/plugin/internal/trusteddir"
	"github.com/nri-sysctl/nri-sysctl/test/fixture"
	"github.com/sirupsen/logrus"
)

// Two valid configs the concurrency test reloads between, and one that is
// rejected (the config in force must stay).
const (
	concCfgA = testConfig
	concCfgB = `
sysctls:
  net.ipv4.tcp_keepalive_time: 300
  net.core.somaxconn: 4096
rules:
  - name: web
    match: {namespaces: ["web-*"]}
    sysctls: {kernel.msgmax: 8192}
exclude:
  namespaces: [kube-system]
`
	concCfgBad = "sysctls:\n  net.ipv4.tcp_keepalive_time: 1\n  vm.swappiness: 10\n"
)

// concSlot is one kind of pod; a driver goroutine runs it through many
// lifetimes (RunPodSandbox, containers, RemovePodSandbox).
type concSlot struct {
	name      string
	namespace string
	nsTypes   []string
	own       map[string]string
	fetchErr  bool
	// reuseID: every lifetime has the same sandbox id, so the cache must
	// forget it on RemovePodSandbox and look it up again.
	reuseID bool
	// want is the spec-mode sysctls under config A and B; nil: no
	// sysctls and no injected annotation (excluded, or lookup failed).
	want [2]map[string]string
}

var concSlots = []concSlot{
	{name: "plain", namespace: "default", nsTypes: []string{"network", "ipc", "uts"},
		want: [2]map[string]string{
			{"net.ipv4.tcp_keepalive_time": "600", "net.ipv4.tcp_keepalive_intvl": "60", "kernel.msgmax": "16384"},
			{"net.ipv4.tcp_keepalive_time": "300", "net.core.somaxconn": "4096"},
		}},
	{name: "web", namespace: "web-shop", nsTypes: []string{"network", "ipc"}, own: map[string]string{"net.ipv4.tcp_keepalive_intvl": "33"}, reuseID: true,
		want: [2]map[string]string{
			{"net.ipv4.tcp_keepalive_time": "600", "kernel.msgmax": "16384"},
			{"net.ipv4.tcp_keepalive_time": "300", "net.core.somaxconn": "4096", "kernel.msgmax": "8192"},
		}},
	{name: "hostnet", namespace: "default", nsTypes: []string{"ipc", "uts"},
		want: [2]map[string]string{
			{"kernel.msgmax": "16384"},
			{}, // everything skipped: only the skipped annotation
		}},
	{name: "owntime", namespace: "default", nsTypes: []string{"network", "ipc"}, own: map[string]string{"net.ipv4.tcp_keepalive_time": "900"}, reuseID: true,
		want: [2]map[string]string{
			{"net.ipv4.tcp_keepalive_intvl": "60", "kernel.msgmax": "16384"},
			{"net.core.somaxconn": "4096"},
		}},
	{name: "excluded", namespace: "kube-system", nsTypes: []string{"network", "ipc"}},
	{name: "broken", namespace: "default", nsTypes: []string{"network", "ipc"}, fetchErr: true},
}

func concSlotOf(podID string) *concSlot {
	name, _, _ := strings.Cut(podID, "~")
	for i := range concSlots {
		if concSlots[i].name == name {
			return &concSlots[i]
		}
	}
	return nil
}

// concFetcher counts lookups per pod id and fails if one pod is looked up
// by two goroutines at once.
type concFetcher struct {
	mu       sync.Mutex
	calls    map[string]int
	inFlight map[string]int
	overlap  atomic.Int32
}

func (f *concFetcher) Fetch(_ context.Context, podID string) (podsysctl.PodSysctls, error) {
	f.mu.Lock()
	f.calls[podID]++
	f.inFlight[podID]++
	if f.inFlight[podID] > 1 {
		f.overlap.Add(1)
	}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight[podID]--
		f.mu.Unlock()
	}()
	time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond) // widen the windows
	slot := concSlotOf(podID)
	if slot == nil {
		return podsysctl.PodSysctls{}, fmt.Errorf("unknown pod %s", podID)
	}
	if slot.fetchErr {
		return podsysctl.PodSysctls{}, errors.New("dial unix /run/containerd/containerd.sock: connection refused")
	}
	own := map[string]string{}
	for k, v := range slot.own {
		own[k] = v
	}
	return podsysctl.PodSysctls{Own: own, Source: podsysctl.SourceSandboxConfig}, nil
}

// lockedBuffer collects log output from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// canonical renders an adjustment (or a namespace write) comparably.
func canonical(sysctls map[string]string, annotations map[string]string) string {
	var parts []string
	for _, k := range sortedMapKeys(sysctls) {
		parts = append(parts, "sysctl "+k+"="+sysctls[k])
	}
	for _, k := range sortedMapKeys(annotations) {
		parts = append(parts, "annotation "+k+"="+annotations[k])
	}
	return strings.Join(parts, "\n")
}

func canonicalAdj(adj *api.ContainerAdjustment) string {
	if adj == nil {
		return "<nil>"
	}
	return canonical(adj.GetLinux().GetSysctl(), adj.GetAnnotations())
}

func canonicalWrite(list []sysctl.Sysctl) string {
	m := map[string]string{}
	for _, s := range list {
		m[s.Key()] = s.Value()
	}
	return canonical(m, nil)
}

func sortedMapKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

// concLife is one lifetime of one pod, with what its containers got.
type concLife struct {
	slot *concSlot
	pod  *api.PodSandbox
	wg   sync.WaitGroup

	mu     sync.Mutex
	adjs   []string // canonical adjustments
	writes []string // canonical namespace writes (namespace mode)
	errs   []error
}

func (l *concLife) record(adj, write string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if adj != "" {
		l.adjs = append(l.adjs, adj)
	}
	if write != "" {
		l.writes = append(l.writes, write)
	}
	if err != nil {
		l.errs = append(l.errs, err)
	}
}

type concJob struct {
	life *concLife
	ctr  int
}

func newConcPlugin(t *testing.T, runtimeVersion string, f podsysctl.Fetcher, logOut io.Writer) *plugin {
	t.Helper()
	log := logrus.New()
	log.SetOutput(logOut)
	p := newPlugin(log, nil, "")
	holdAsTheSandboxSays(p)
	if _, err := p.Configure(context.Background(), concCfgA, "containerd", runtimeVersion); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	p.useFetcher(f)
	return p
}

// TestConcurrentHandlers drives CreateContainer, RunPodSandbox,
// RemovePodSandbox and Synchronize from 50 worker goroutines plus one
// driver per pod kind, while another goroutine keeps reloading the config
// (A, a rejected one, B, ...). Run it with -race. It checks outcomes:
//   - every adjustment (and, in namespace mode, every namespace write) is
//     exactly the decision for config A or for config B, never a mix;
//   - all containers of one pod lifetime get the same decision, the one its
//     namespace write (namespace mode) was made with;
//   - each pod is looked up once per lifetime, never twice at once, and an
//     excluded pod never;
//   - a failed lookup is warned about once per pod;
//   - once every pod is removed, nothing is left cached.
func TestConcurrentHandlers(t *testing.T) {
	for _, mode := range []struct{ name, version string }{
		{"spec", "2.4.2"},
		{"namespace", "2.1.9+unknown"},
	} {
		t.Run(mode.name, func(t *testing.T) { testConcurrentHandlers(t, mode.name, mode.version) })
	}
}

func testConcurrentHandlers(t *testing.T, mode, runtimeVersion string) {
	const (
		workers         = 50
		lifetimes       = 30
		ctrsPerLifetime = 12
	)
	nsMode := mode == "namespace"

	// Oracle: each slot's decision under A and under B, computed one call
	// at a time on fresh plugins, and checked against the hand-written want.
	oracle := map[string][2]string{}
	oracleWrite := map[string][2]string{}
	for i := range concSlots {
		s := &concSlots[i]
		for ci, cfg := range []string{concCfgA, concCfgB} {
			f := &concFetcher{calls: map[string]int{}, inFlight: map[string]int{}}
			q := newConcPlugin(t, runtimeVersion, f, io.Discard)
			q.setConfig(fixture.MustParse(t, cfg))
			var wrote []string
			q.writeNamespaces = func(_ podns.Target, list []sysctl.Sysctl) []podns.WriteError {
				wrote = append(wrote, canonicalWrite(list))
				return nil
			}
			pod := concPod(s, 0)
			if err := q.RunPodSandbox(context.Background(), pod); err != nil {
				t.Fatal(err)
			}
			adj, _, err := q.CreateContainer(context.Background(), pod, &api.Container{Id: "oracle", Name: "app", PodSandboxId: pod.Id})
			if err != nil {
				t.Fatal(err)
			}
			o := oracle[s.name]
			o[ci] = canonicalAdj(adj)
			oracle[s.name] = o
			w := oracleWrite[s.name]
			w[ci] = strings.Join(wrote, "|")
			oracleWrite[s.name] = w
			// Sanity of the oracle against the hand-written expectation.
			switch {
			case s.want[ci] == nil && (len(adj.GetLinux().GetSysctl()) > 0 || annotation(adj, outcome.AnnotationInjected) != ""):
				t.Fatalf("oracle %s/%d: want nothing set, got %s", s.name, ci, o[ci])
			case s.want[ci] != nil && nsMode:
				if want := canonical(s.want[ci], nil); len(s.want[ci]) > 0 && w[ci] != want {
					t.Fatalf("oracle %s/%d: namespace write %q, want %q", s.name, ci, w[ci], want)
				}
				if len(adj.GetLinux().GetSysctl()) != 0 {
					t.Fatalf("oracle %s/%d: spec sysctls in namespace mode", s.name, ci)
				}
			case s.want[ci] != nil:
				if got := adj.GetLinux().GetSysctl(); !reflect.DeepEqual(nonNil(got), s.want[ci]) {
					t.Fatalf("oracle %s/%d: sysctls %v, want %v", s.name, ci, got, s.want[ci])
				}
			}
		}
	}

	logBuf := &lockedBuffer{}
	f := &concFetcher{calls: map[string]int{}, inFlight: map[string]int{}}
	p := newConcPlugin(t, runtimeVersion, f, logBuf)
	if got := string(p.mode()); got != mode {
		t.Fatalf("plugin mode %s, want %s", got, mode)
	}
	var writesMu sync.Mutex
	writesByPod := map[string][]string{}
	podByIPC := map[int]string{}
	p.writeNamespaces = func(target podns.Target, list []sysctl.Sysctl) []podns.WriteError {
		// Every slot has its own IPC namespace, reached through the
		// sandbox pid, which concPod makes unique per lifetime.
		writesMu.Lock()
		id := podByIPC[target[sysctl.IPC].Pid]
		writesByPod[id] = append(writesByPod[id], canonicalWrite(list))
		writesMu.Unlock()
		return nil
	}
	pathA, pathB, pathBad := trusteddir.WriteConfig(t, concCfgA), trusteddir.WriteConfig(t, concCfgB), trusteddir.WriteConfig(t, concCfgBad)

	// alive is what a Synchronize would be told exists. Pods are added and
	// removed under lifeMu, and Synchronize runs under it: the runtime
	// sends no pod event while a plugin synchronizes.
	var lifeMu sync.Mutex
	alive := map[string]*api.PodSandbox{}
	legacy := testPod("legacy", "network", "ipc")
	running := api.ContainerState_CONTAINER_RUNNING
	legacyCtrs := []*api.Container{
		{Id: "l1", PodSandboxId: "legacy", State: running},
		{Id: "l2", PodSandboxId: "legacy", State: running},
		{Id: "l3", PodSandboxId: "legacy", State: running, Annotations: map[string]string{outcome.AnnotationInjected: "x=1"}},
	}

	jobs := make(chan concJob)
	var workersWG sync.WaitGroup
	for w := 0; w < workers; w++ {
		workersWG.Add(1)
		go func() {
			defer workersWG.Done()
			for j := range jobs {
				ctr := &api.Container{Id: fmt.Sprintf("%s-c%d", j.life.pod.Id, j.ctr), Name: fmt.Sprintf("c%d", j.ctr), PodSandboxId: j.life.pod.Id}
				adj, updates, err := p.CreateContainer(context.Background(), j.life.pod, ctr)
				if err == nil && updates != nil {
					err = fmt.Errorf("unexpected updates %v", updates)
				}
				j.life.record(canonicalAdj(adj), "", err)
				j.life.wg.Done()
			}
		}()
	}

	stop := make(chan struct{})
	var bgWG sync.WaitGroup
	var reloads, syncs atomic.Int32
	bgWG.Add(2)
	go func() { // config reloads
		defer bgWG.Done()
		paths := []string{pathB, pathBad, pathA, pathBad}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p.reload(paths[i%len(paths)])
			reloads.Add(1)
			time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
		}
	}()
	go func() { // Synchronize, as on a reconnect
		defer bgWG.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			lifeMu.Lock()
			pods := []*api.PodSandbox{legacy}
			for _, pod := range alive {
				pods = append(pods, pod)
			}
			if _, err := p.Synchronize(context.Background(), pods, legacyCtrs); err != nil {
				t.Errorf("Synchronize: %v", err)
			}
			lifeMu.Unlock()
			syncs.Add(1)
			time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
		}
	}()

	var lives []*concLife
	var livesMu sync.Mutex
	var driversWG sync.WaitGroup
	for i := range concSlots {
		s := &concSlots[i]
		driversWG.Add(1)
		go func() {
			defer driversWG.Done()
			for l := 0; l < lifetimes; l++ {
				life := &concLife{slot: s, pod: concPod(s, l)}
				writesMu.Lock()
				_, target := readSandbox(life.pod, true)
				podByIPC[target[sysctl.IPC].Pid] = life.pod.Id
				writesMu.Unlock()
				livesMu.Lock()
				lives = append(lives, life)
				livesMu.Unlock()
				lifeMu.Lock()
				alive[life.pod.Id] = life.pod
				lifeMu.Unlock()
				if err := p.RunPodSandbox(context.Background(), life.pod); err != nil {
					life.record("", "", fmt.Errorf("RunPodSandbox: %w", err))
				}
				life.wg.Add(ctrsPerLifetime)
				for c := 0; c < ctrsPerLifetime; c++ {
					jobs <- concJob{life: life, ctr: c}
				}
				life.wg.Wait()
				if err := p.RemovePodSandbox(context.Background(), life.pod); err != nil {
					life.record("", "", fmt.Errorf("RemovePodSandbox: %w", err))
				}
				// Namespace writes are keyed by pod id; collect this
				// lifetime's before a reused id starts the next one.
				writesMu.Lock()
				life.writes = writesByPod[life.pod.Id]
				delete(writesByPod, life.pod.Id)
				writesMu.Unlock()
				lifeMu.Lock()
				delete(alive, life.pod.Id)
				lifeMu.Unlock()
			}
		}()
	}
	driversWG.Wait()
	close(jobs)
	workersWG.Wait()
	close(stop)
	bgWG.Wait()
	t.Logf("%s mode: %d lifetimes x %d containers, %d reloads, %d Synchronize calls", mode, len(lives), ctrsPerLifetime, reloads.Load(), syncs.Load())

	// Every adjustment is A's or B's decision, and one lifetime has one.
	seen := [2]int{}
	for _, life := range lives {
		name := life.pod.Id
		for _, err := range life.errs {
			t.Errorf("pod %s: %v", name, err)
		}
		if len(life.adjs) != ctrsPerLifetime {
			t.Errorf("pod %s: %d adjustments recorded, want %d", name, len(life.adjs), ctrsPerLifetime)
			continue
		}
		o, ow := oracle[life.slot.name], oracleWrite[life.slot.name]
		match := map[int]bool{0: true, 1: true} // configs consistent with everything so far
		for _, adj := range life.adjs {
			ok := false
			for ci := range o {
				if adj == o[ci] {
					ok = true
				} else {
					delete(match, ci)
				}
			}
			if !ok {
				t.Errorf("pod %s: adjustment is neither config A's nor B's decision:\n%s\nA:\n%s\nB:\n%s", name, adj, o[0], o[1])
			}
		}
		if nsMode {
			w := strings.Join(life.writes, "|")
			for ci := range ow {
				if w != ow[ci] {
					delete(match, ci)
				}
			}
			if w != ow[0] && w != ow[1] {
				t.Errorf("pod %s: namespace writes %q are neither A's %q nor B's %q", name, w, ow[0], ow[1])
			}
		}
		if len(match) == 0 {
			t.Errorf("pod %s: its containers (and namespace write) were decided with different configs: adjustments %q, writes %q", name, distinct(life.adjs), life.writes)
		}
		if len(match) == 1 {
			for ci := range match {
				seen[ci]++
			}
		}
	}
	t.Logf("lifetimes decided with A: %d, with B: %d (the rest look the same under both)", seen[0], seen[1])
	if seen[0] == 0 || seen[1] == 0 {
		t.Errorf("reloads never took effect for some pods: A %d, B %d lifetimes", seen[0], seen[1])
	}

	// Lookups: once per lifetime, excluded pods never; a failed lookup is
	// tried again at each container, at most once per event.
	if n := f.overlap.Load(); n > 0 {
		t.Errorf("%d lookups ran while another lookup of the same pod was in flight", n)
	}
	wantCalls := map[string]int{}
	for _, life := range lives {
		if life.slot.namespace != "kube-system" {
			wantCalls[life.pod.Id]++
		}
	}
	f.mu.Lock()
	for id, n := range f.calls {
		if slot := concSlotOf(id); slot != nil && slot.fetchErr && n >= 1 && n <= ctrsPerLifetime+1 {
			wantCalls[id] = n
		}
	}
	if !reflect.DeepEqual(f.calls, wantCalls) {
		for id, n := range f.calls {
			if wantCalls[id] != n {
				t.Errorf("pod %s looked up %d times, want %d", id, n, wantCalls[id])
			}
		}
		for id, n := range wantCalls {
			if _, ok := f.calls[id]; !ok {
				t.Errorf("pod %s never looked up, want %d", id, n)
			}
		}
	}
	f.mu.Unlock()

	// Warnings: one per pod whose lookup failed, however many retries.
	logText := logBuf.String()
	warned := map[string]int{}
	for _, line := range strings.Split(logText, "\n") {
		if strings.Contains(line, "level=warning") && strings.Contains(line, "cannot read the pod's own sysctls") {
			if m := regexp.MustCompile(`pod="?(p-[^ "]+)`).FindStringSubmatch(line); m != nil {
				warned[m[1]]++
			}
		}
	}
	for l := 0; l < lifetimes; l++ {
		if pod := fmt.Sprintf("p-broken~%d", l); warned[pod] != 1 {
			t.Errorf("%d lookup-failure warnings for %s, want 1", warned[pod], pod)
		}
	}
	if len(warned) != lifetimes {
		t.Errorf("lookup-failure warnings for %d pods, want %d: %v", len(warned), lifetimes, warned)
	}
	// Synchronize reports the two unannotated legacy containers, every time.
	reports := regexp.MustCompile(`running containers lack the node's sysctl defaults.* containers=(\d+)`).FindAllStringSubmatch(logText, -1)
	if len(reports) != int(syncs.Load()) {
		t.Errorf("%d Synchronize reports for %d calls", len(reports), syncs.Load())
	}
	for _, r := range reports {
		if r[1] != "2" {
			t.Errorf("Synchronize reported %s containers without defaults, want 2", r[1])
			break
		}
	}

	if n := p.records.len(); n != 0 {
		t.Errorf("%d pods still cached after every pod was removed", n)
	}
}

var concPid atomic.Uint32

// concPod is lifetime l of slot s. Slots with reuseID keep one id; the
// sandbox pid is new each time.
func concPod(s *concSlot, l int) *api.PodSandbox {
	id := s.name + "~" + fmt.Sprint(l)
	if s.reuseID {
		id = s.name + "~same"
	}
	pod := testPod(id, s.nsTypes...)
	pod.Namespace = s.namespace
	pod.Pid = 10000 + concPid.Add(1)
	return pod
}

func distinct(list []string) []string {
	set := map[string]bool{}
	var out []string
	for _, s := range list {
		if !set[s] {
			set[s] = true
			out = append(out, s)
		}
	}
	return out
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
