// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/converge"
	"github.com/nri-sysctl/nri-sysctl/pkg/nsthread"
	"github.com/nri-sysctl/nri-sysctl/pkg/outcome"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/podstate"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// Converging running pods (runningPods: converge): after the plugin has
// synchronized with the runtime, and after each config put in force, one
// worker brings each running pod's namespaces to what a pod created now
// with the same attributes would get, one pod at a time, beside the NRI
// handlers and never inside one. The per-key decision is pkg/converge's;
// what the plugin set in each pod survives its restarts in pkg/podstate.

const (
	// convergeLookupTimeout bounds one pod's lookup during convergence,
	// which no request deadline covers.
	convergeLookupTimeout = 10 * time.Second
	// Before each pod the worker waits until no NRI request is under way
	// and none has returned for yieldQuiet, at most yieldWait. yieldQuiet
	// spans the gap between one pod's requests and the next pod's (its
	// sandbox is set up before its first request), so while pods are
	// being created the worker takes one pod per yieldWait, about 1 % of
	// a core, and still converges 200 pods within a minute; on a node
	// creating none it goes on at its pace (docs/benchmarks.md has the
	// figures).
	yieldQuiet = 2 * time.Second
	yieldWait  = 250 * time.Millisecond
	// specLanding is how long after a spec-mode container's decision its
	// sysctls may still land in the pod: kubelet starts the container
	// once CreateContainer returns, and runc writes the spec's sysctls as
	// it creates it. A container decided under an older config that
	// starts after its pod converged writes the older values over the
	// converged ones: they are the plugin's own, and a pass that long
	// after the convergence writes the pod again. One that starts later
	// still says so at its start (podRecord.started), and values that
	// landed count as the plugin's for specLanding from then.
	specLanding = 30 * time.Second
	// replaceRetry: a pod whose container was decided while the pass
	// planned it is tried again that much later.
	replaceRetry = time.Second
	// convergeShare: the worker rests (convergeShare-1) times the CPU
	// each pod cost (pacer): nice 19 alone does not keep a worker busy
	// for a whole pass off a two-core node's create path.
	convergeShare = 3
	// pacerMinRest and pacerMaxRest: rest is taken once it reaches the
	// first (a sleep per pod would cost more than the pod), and a rest is
	// at most the second (the process's CPU time also counts what its
	// other threads did meanwhile, a reload's check or a burst of
	// requests, and that must not stop the pass for long).
	pacerMinRest = 5 * time.Millisecond
	pacerMaxRest = 100 * time.Millisecond
)

// pacer keeps the worker's share of the CPU: after a pod that cost the
// plugin d of CPU time it owes (share-1)·d of rest. CPU, not wall time: a
// pod's lookup waits on containerd, and resting for that wait too took a
// pass over 200 pods from 0.3 s to 2.6 s (make bench-converge). share 1
// never rests (the per-pod benchmark measures the work alone).
type pacer struct {
	share int
	sleep func(time.Duration)
	// cpu is the plugin's CPU time so far (processCPU).
	cpu  func() time.Duration
	owed time.Duration
}

// processCPU is the CPU time the plugin's threads have used: the worker's
// and the namespace threads it makes (and the handlers', which are short).
func processCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// worked adds work's rest to what is owed, and rests once enough is owed.
func (p *pacer) worked(work time.Duration) {
	if p.share <= 1 || work <= 0 {
		return
	}
	p.owed += work * time.Duration(p.share-1)
	if p.owed < pacerMinRest {
		return
	}
	p.sleep(min(p.owed, pacerMaxRest))
	p.owed = 0
}

// runningPods are the pods the runtime runs, as the worker reaches them:
// listed at Synchronize, added at RunPodSandbox, dropped at
// StopPodSandbox and RemovePodSandbox. injected holds, per pod listed at Synchronize, what
// its containers' nri-sysctl.io/injected annotations say the plugin set
// on their specs before it (re)started. mu is a leaf.
type runningPods struct {
	mu       sync.Mutex
	pods     map[string]*api.PodSandbox
	injected map[string]map[string]string
	// cannot holds, per pod, the keys already reported as out of the
	// writer's reach: each is reported once, not at every pass.
	cannot map[string]map[string]bool
	// notHeld holds the pods already reported as ones whose sandbox
	// process the plugin does not hold (heldPods): reported once.
	notHeld map[string]bool
	// setIn holds the pods the plugin set something in since the worker
	// last kept it (keepset.go).
	setIn map[string]bool
	// withContainers holds the pods listed at Synchronize with a
	// container: their values are in place (podRecord.inPlace).
	withContainers map[string]bool
	// mayLand holds, per pod listed at Synchronize, the sysctls of the
	// plugin's that each container's spec carries where runc may have
	// written them since the plugin last read the pod: a container not
	// started yet, or started within specLanding (landingAtSync), each
	// with its ID while it has not started. syncedAt is when
	// Synchronize listed them.
	mayLand  map[string][]carriedSpec
	syncedAt time.Time
}

// landingAtSync is what containers listed at Synchronize may land in the
// pod (mayLand), and until when: specLanding after the list, as for a
// container decided then.
func (r *runningPods) landingAtSync(podID string) ([]carriedSpec, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mayLand[podID], r.syncedAt.Add(specLanding)
}

// mayStillLand tells whether runc may have written c's spec sysctls
// after the plugin last read its pod, as far as the list at now says:
// not started (containerd lists a container CREATED from before runc
// makes it until it runs), or started within specLanding, the time a
// plugin that saw the start would still have counted the values as
// landing.
func mayStillLand(c *api.Container, now time.Time) bool {
	switch c.GetState() {
	case api.ContainerState_CONTAINER_CREATED:
		return true
	case api.ContainerState_CONTAINER_RUNNING:
		return c.GetStartedAt() > now.Add(-specLanding).UnixNano()
	}
	return false
}

// carriedOnSpec is the sysctls of the plugin's on c's spec: the keys its
// nri-sysctl.io/injected annotation names, at the spec's value (what runc
// writes; the annotation may be cut), sorted. nil if the spec carries
// none.
func carriedOnSpec(c *api.Container, injected map[string]string) []sysctl.Sysctl {
	spec := c.GetLinux().GetSysctl()
	var out []sysctl.Sysctl
	for _, key := range slices.Sorted(maps.Keys(spec)) {
		if _, ok := injected[key]; ok {
			out = append(out, sysctl.New(key, spec[key]))
		}
	}
	return out
}

// listedWithContainers tells whether the pod had a container when
// Synchronize listed it.
func (r *runningPods) listedWithContainers(podID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.withContainers[podID]
}

// markSet marks the pod as one the plugin set something in.
func (r *runningPods) markSet(podID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.setIn == nil {
		r.setIn = map[string]bool{}
	}
	r.setIn[podID] = true
}

// takeSet returns the pods marked since the last call, sorted.
func (r *runningPods) takeSet() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := slices.Sorted(maps.Keys(r.setIn))
	r.setIn = nil
	return ids
}

// firstNotHeld tells whether the pod has not been reported yet as one
// whose process the plugin does not hold, and marks it reported.
func (r *runningPods) firstNotHeld(podID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.notHeld == nil {
		r.notHeld = map[string]bool{}
	}
	first := !r.notHeld[podID]
	r.notHeld[podID] = true
	return first
}

// firstCannot tells whether key has not been reported yet as one the
// writer cannot converge in the pod, and marks it reported.
func (r *runningPods) firstCannot(podID, key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cannot == nil {
		r.cannot = map[string]map[string]bool{}
	}
	if r.cannot[podID] == nil {
		r.cannot[podID] = map[string]bool{}
	}
	first := !r.cannot[podID][key]
	r.cannot[podID][key] = true
	return first
}

func (r *runningPods) set(pods []*api.PodSandbox, ctrs []*api.Container) {
	next := make(map[string]*api.PodSandbox, len(pods))
	for _, pod := range pods {
		next[pod.GetId()] = pod
	}
	injected := map[string]map[string]string{}
	withContainers := map[string]bool{}
	mayLand := map[string][]carriedSpec{}
	now := time.Now()
	for _, c := range ctrs {
		podID := c.GetPodSandboxId()
		if next[podID] == nil {
			continue
		}
		withContainers[podID] = true
		text, ok := c.GetAnnotations()[outcome.AnnotationInjected]
		if !ok {
			continue
		}
		m := injected[podID]
		if m == nil {
			m = map[string]string{}
			injected[podID] = m
		}
		applied := parseApplied(text)
		maps.Copy(m, applied)
		// Bounded as a record's carried containers are: a pod author
		// chooses how many containers a pod has.
		if spec := carriedOnSpec(c, applied); spec != nil && mayStillLand(c, now) && len(mayLand[podID]) < maxCarried {
			l := carriedSpec{values: spec}
			if c.GetState() == api.ContainerState_CONTAINER_CREATED {
				l.id = c.GetId()
			}
			mayLand[podID] = append(mayLand[podID], l)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pods, r.injected, r.withContainers = next, injected, withContainers
	r.mayLand, r.syncedAt = mayLand, now
	// What was reported of pods no longer listed goes with them.
	maps.DeleteFunc(r.cannot, func(id string, _ map[string]bool) bool { return next[id] == nil })
	maps.DeleteFunc(r.notHeld, func(id string, _ bool) bool { return next[id] == nil })
	maps.DeleteFunc(r.setIn, func(id string, _ bool) bool { return next[id] == nil })
}

func (r *runningPods) add(pod *api.PodSandbox) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pods == nil {
		r.pods = map[string]*api.PodSandbox{}
	}
	r.pods[pod.GetId()] = pod
}

func (r *runningPods) remove(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pods, id)
	delete(r.injected, id)
	delete(r.cannot, id)
	delete(r.notHeld, id)
	delete(r.setIn, id)
	delete(r.withContainers, id)
}

// list is the running pods, by ID, each with what its containers'
// annotations say the plugin set.
func (r *runningPods) list() ([]*api.PodSandbox, map[string]map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*api.PodSandbox, 0, len(r.pods))
	for _, pod := range r.pods {
		out = append(out, pod)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetId() < out[j].GetId() })
	injected := make(map[string]map[string]string, len(r.injected))
	for id, m := range r.injected {
		injected[id] = m
	}
	return out, injected
}

// kickConvergence asks the worker for a pass; a pass already asked for
// covers it.
func (p *plugin) kickConvergence() {
	select {
	case p.convergeKick <- struct{}{}:
	default:
	}
}

// convergeRunningPods is the worker: once the runtime has synchronized
// with the plugin, a pass per kick, until ctx ends. It runs at the lowest
// priority (nsthread.Background), and so do the namespace threads it
// makes: on a busy node, containerd, the shims, runc and the plugin's
// handlers take the CPU first.
func (p *plugin) convergeRunningPods(ctx context.Context) {
	nsthread.Background(func() { p.convergeOnKick(ctx) })
}

func (p *plugin) convergeOnKick(ctx context.Context) {
	select {
	case <-p.synchronized:
	case <-ctx.Done():
		return
	}
	for {
		select {
		case <-p.keepKick:
			p.keepSetPods()
		case <-p.convergeKick:
			p.keepSetPods()
			p.convergePass(ctx)
		case <-ctx.Done():
			return
		}
	}
}

// convergePass drops the state of pods no longer running, then brings
// every running pod to the config in force now.
func (p *plugin) convergePass(ctx context.Context) {
	pods, injected := p.running.list()
	p.pruneStates(pods)
	cur := p.current.Load()
	if p.runningPods(cur.cfg) == config.RunningPodsKeep {
		return
	}
	fresh := freshCache{read: p.freshValues, log: p.log}
	var retry time.Duration
	for _, pod := range pods {
		if ctx.Err() != nil {
			return
		}
		p.requests.waitQuiet(yieldQuiet, yieldWait)
		start := p.convergePace.cpu()
		wait := p.convergePod(ctx, cur, pod, injected[pod.GetId()], &fresh)
		p.convergePace.worked(p.convergePace.cpu() - start)
		if wait > 0 && (retry == 0 || wait < retry) {
			retry = wait
		}
	}
	if retry > 0 {
		p.convergeLater(retry)
	}
}

// convergeLater asks for a pass after wait: for the pods where a
// container decided under an older config may land its sysctls after the
// pass. Only the worker calls it.
func (p *plugin) convergeLater(wait time.Duration) {
	if p.convergeRetry == nil {
		p.convergeRetry = time.AfterFunc(wait, p.kickConvergence)
		return
	}
	p.convergeRetry.Reset(wait)
}

// pruneStates removes the state of pods not in running: removed while the
// plugin was away, or while a pass saved theirs. Only the worker writes
// the states, so none is made meanwhile.
func (p *plugin) pruneStates(running []*api.PodSandbox) {
	if p.podState == nil {
		return
	}
	ids := make(map[string]bool, len(running))
	for _, pod := range running {
		ids[pod.GetId()] = true
	}
	if _, err := p.podState.Prune(func(id string) bool { return ids[id] }); err != nil {
		p.log.WithError(err).Warn("cannot prune the state of removed pods")
	}
}

// freshCache holds, for one pass, the values of keys in namespaces made
// fresh: what a key goes back to when its value before the plugin's first
// write is unknown.
type freshCache struct {
	read   func([]string) (map[string]string, error)
	log    *logrus.Logger
	values map[string]string
	tried  map[string]bool
	// failed is why a read failed, until report logs it: fill runs inside
	// a pod's namespaces (podns.Visit), where a log hook that opens a
	// socket (syslog reconnecting) would open it in the pod's.
	failed error
}

// report logs the read that failed since the last report, if any.
func (f *freshCache) report() {
	if f.failed != nil {
		f.log.WithError(f.failed).Warn("cannot read a fresh namespace's values: where the value before the plugin's is unknown, a key at a value not the plugin's stays as it is")
		f.failed = nil
	}
}

// fill gives each key that needs it (converge.NeedsFresh, so its live
// value is read first) a fresh namespace's value, reading the keys not
// read yet in this pass.
func (f *freshCache) fill(keys []converge.Key) {
	var missing []string
	for _, k := range keys {
		if converge.NeedsFresh(k) && !f.tried[k.Name] {
			missing = append(missing, k.Name)
		}
	}
	if len(missing) > 0 && f.read != nil {
		if f.values == nil {
			f.values, f.tried = map[string]string{}, map[string]bool{}
		}
		got, err := f.read(missing)
		if err != nil {
			f.failed = err
		}
		for _, name := range missing {
			f.tried[name] = true
			if v, ok := got[name]; ok {
				f.values[name] = v
			}
		}
	}
	for i := range keys {
		if v, ok := f.values[keys[i].Name]; ok {
			keys[i].Fresh, keys[i].HasFresh = v, true
		}
	}
}

// runningPods is what becomes of running pods under cfg: --running-pods,
// else the config's runningPods.
func (p *plugin) runningPods(cfg *config.Config) string {
	if p.runningPodsOverride != "" {
		return p.runningPodsOverride
	}
	return cfg.RunningPods
}

// convergePod brings one running pod to cur: its pod's own keys, host
// namespaces and other writers' values untouched. It returns how long
// until a container decided under an older config can no longer land
// its sysctls (specLanding), when one may, for a pass then; else 0.
func (p *plugin) convergePod(ctx context.Context, cur *loaded, sb *api.PodSandbox, injected map[string]string, fresh *freshCache) time.Duration {
	if sb.GetPid() <= 0 {
		return 0 // not running: nothing to write into
	}
	rec := p.record(sb)
	target, release, err := p.held.target(rec.id)
	if err != nil {
		if p.running.firstNotHeld(rec.id) {
			p.recordLog(rec).WithError(err).Warn("cannot converge the pod: the plugin does not hold its sandbox process, so it writes nothing into it")
		}
		return 0
	}
	defer release()
	info := rec.pod

	lookupCtx, cancel := context.WithTimeout(ctx, convergeLookupTimeout)
	own, ok := p.ownSysctls(lookupCtx, rec)
	cancel()
	if !ok {
		return 0 // reported by ownSysctls; tried again at the next pass
	}
	memory, kept, err := p.loadPodState(rec, injected)
	if err != nil {
		p.recordLog(rec).WithError(err).Warn("cannot read what the plugin set in the pod, so leaving it as it is")
		p.meter.Load().convergeKeys(converge.KeyFailed, 1)
		return 0
	}
	keys := convergeKeys(cur, info, own, memory)
	if own.RuntimeUnread() && slices.ContainsFunc(keys, converge.Key.FirstWrite) {
		added := p.runtimeAdded(ctx, cur, rec, own.Own)
		for i := range keys {
			keys[i].Runtime, keys[i].HasRuntime = added[keys[i].Name]
		}
	}
	mark, now := p.records.landsBy(rec), time.Now()
	landing, landingUntil := rec.landingSince(mark, cur, now)
	for i := range keys {
		keys[i].Landing = landing[keys[i].Name]
		keys[i].StillLanding = landingUntil.After(now) && len(keys[i].Landing) > 0
	}
	if len(keys) == 0 {
		next, wait := p.replaceRecord(rec, mark, cur, sb, nil)
		if next == nil {
			return wait
		}
		return next.landingWait()
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.Name
	}
	// Read, plan and write in one visit to the pod's namespaces.
	var (
		readable []converge.Key
		steps    []converge.Step
		next     *podRecord
		wait     time.Duration
		exited   bool
	)
	writeErrs := p.visitNamespaces(target, names, func(live map[string]podns.Value) []sysctl.Sysctl {
		if readable, exited = withLiveValues(keys, live); exited {
			return nil
		}
		fresh.fill(readable)
		steps = converge.Plan(readable)
		// The pod's record moves to cur before the writes: a container
		// decided from here on carries what the pass writes, not the
		// older config's values, which runc would write over it.
		if next, wait = p.replaceRecord(rec, mark, cur, sb, leftToOther(steps)); next == nil {
			return nil
		}
		return writesOf(steps)
	})
	fresh.report()
	switch {
	case exited:
		return 0 // the pod went away mid-pass: quietly
	case next == nil:
		return wait
	}
	if p.applyPlan(rec, steps, memory, kept, writeErrs) {
		// Its containers see the defaults now, whatever their
		// annotations say: no longer lacking (Synchronize's count).
		p.meter.Load().podHealed(rec.id)
	}
	planned := make([]string, len(readable))
	for i, k := range readable {
		planned[i] = k.Name
	}
	next.noteConverged(planned, wantedLive(readable, memory))
	return next.landingWait()
}

// runtimeAdded is what the runtime set in the pod at its creation beside
// its own keys, read from the pause container where the pod's lookup did
// not bring it; nil (nothing known) if it cannot be read, so that such a
// value is left as another writer's rather than written over.
func (p *plugin) runtimeAdded(ctx context.Context, cur *loaded, rec *podRecord, own map[string]string) map[string]string {
	ctx, cancel := context.WithTimeout(ctx, convergeLookupTimeout)
	defer cancel()
	added, err := podsysctl.RuntimeAdded(ctx, cur.lookup, rec.id, own)
	if err != nil {
		p.recordLog(rec).WithError(err).Debug("cannot read what the runtime set at the pod's creation")
		return nil
	}
	return added
}

// withLiveValues is keys with the pod's live value each (live, as read),
// leaving out the ones not in its namespaces (a per-interface key);
// exited tells that the pod went away.
func withLiveValues(keys []converge.Key, live map[string]podns.Value) (readable []converge.Key, exited bool) {
	for _, k := range keys {
		v := live[k.Name]
		if errors.Is(v.Err, podns.ErrSandboxExited) {
			return nil, true
		}
		if v.Err != nil {
			continue
		}
		k.Live = v.Value
		readable = append(readable, k)
	}
	return readable, false
}

// writesOf is what the plan writes.
func writesOf(steps []converge.Step) []sysctl.Sysctl {
	var writes []sysctl.Sysctl
	for _, s := range steps {
		if s.Action == converge.Write || s.Action == converge.Restore {
			writes = append(writes, sysctl.New(s.Key, s.Value))
		}
	}
	return writes
}

// leftToOther is the keys of steps left to another writer.
func leftToOther(steps []converge.Step) map[string]bool {
	var out map[string]bool
	for _, s := range steps {
		if s.Action == converge.LeaveToOther {
			if out == nil {
				out = map[string]bool{}
			}
			out[s.Key] = true
		}
	}
	return out
}

// convergeKeys is every key the plugin may act on in the pod: the ones cur
// gives it and the ones the plugin set there before. Keys of a namespace
// the pod shares with the host are left out: the host's are never written.
func convergeKeys(cur *loaded, pod policy.Pod, sysctls podsysctl.PodSysctls, memory map[string]converge.Written) []converge.Key {
	podOwn, gids := sysctls.Own, sysctls.GIDMappings
	byName := map[string]*converge.Key{}
	key := func(name string) *converge.Key {
		if k := byName[name]; k != nil {
			return k
		}
		_, own := podOwn[name]
		k := &converge.Key{Name: name, Written: memory[name], PodOwn: own, Writable: true}
		k.Runtime, k.HasRuntime = sysctls.Runtime[name]
		byName[name] = k
		return k
	}
	if !cur.policy.Empty() && cur.policy.Excluded(pod) == "" {
		d := cur.policy.Decide(policy.Input{Pod: pod, PodOwn: podOwn, GIDMappings: gids, Writer: runtimemode.Namespace.Writer()})
		host, errs := hostSideValues(d.Apply, gids, pod.Own)
		for _, s := range host {
			k := key(s.Key())
			k.Want, k.Wanted = s.Value(), true
		}
		for _, e := range errs {
			k := key(e.Key)
			k.Want, k.Wanted, k.Writable = e.Value, true, false
		}
		// Keys the kernel refuses to the host-side writer in the pod's
		// user namespace (IPC keys, user.*): out of its reach.
		for _, s := range d.Skipped {
			if s.Code == policy.SkipUserNamespace {
				k := key(s.Key)
				k.Wanted, k.Writable = true, false
			}
		}
	}
	for name := range memory {
		key(name)
	}
	out := make([]converge.Key, 0, len(byName))
	for _, k := range byName {
		if pod.Own.Has(sysctl.NamespaceOf(k.Name)) {
			out = append(out, *k)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// loadPodState is what the plugin set in the pod: its state file, else
// what this run wrote (namespace mode) or put on its containers' specs,
// else what its containers' annotations say it set before a restart. The
// annotation is not read beside a state: a key the plugin forgot (put
// back, or left to another writer once out of the config) would come
// back from it as the plugin's. kept tells that the memory is the state
// file's.
func (p *plugin) loadPodState(rec *podRecord, injected map[string]string) (memory map[string]converge.Written, kept bool, err error) {
	memory = map[string]converge.Written{}
	if p.podState != nil {
		m, err := p.podState.Load(rec.id)
		if err != nil {
			return nil, false, err
		}
		memory = m
	}
	if len(memory) > 0 {
		return memory, true, nil
	}
	for k, v := range injected {
		memory[k] = converge.Written{Set: v, HasSet: true}
	}
	for _, s := range rec.setByPlugin() {
		memory[s.Key()] = converge.Written{Set: s.Value(), HasSet: true}
	}
	for k, v := range rec.valuesBefore() {
		if w, ok := memory[k]; ok {
			w.Before, w.HasBefore = v, true
			memory[k] = w
		}
	}
	return memory, false, nil
}

// applyPlan reports what the plan's writes (made, with writeErrs the
// keys that failed) and what it leaves, and keeps what the plugin now
// holds of each key (memory, updated in place) in the pod's state; kept:
// memory came from the state (loadPodState), else the state holds none
// of it yet.
// converged is false when a key failed or cannot converge.
func (p *plugin) applyPlan(rec *podRecord, steps []converge.Step, memory map[string]converge.Written, kept bool, writeErrs []podns.WriteError) (converged bool) {
	m := p.meter.Load()
	log := p.recordLog(rec)
	var changes []string
	held := maps.Clone(memory)
	for _, s := range steps {
		switch r, _ := s.Action.Result(); s.Action {
		case converge.LeaveToOther:
			log.WithFields(logrus.Fields{"key": s.Key, "reason": s.Reason}).Warn(r.Says())
			m.convergeKeys(r, 1)
		case converge.CannotConverge:
			if p.running.firstCannot(rec.id, s.Key) {
				log.WithFields(logrus.Fields{"key": s.Key, "reason": s.Reason}).Warn(r.Says())
				m.convergeKeys(r, 1)
			}
		}
	}
	failed := map[string]bool{}
	for _, e := range writeErrs {
		if errors.Is(e.Err, podns.ErrSandboxExited) {
			// The pod went away: quietly, nothing kept. (A visit writes
			// through the namespaces it read in, so a pod that exits
			// after the read is written as it goes.)
			return false
		}
		failed[e.Key] = true
		log.WithFields(logrus.Fields{"key": e.Key, "value": e.Value, "reason": e.Err.Error()}).Warn(converge.KeyFailed.Says())
	}
	m.convergeKeys(converge.KeyFailed, len(failed))
	for _, s := range steps {
		if failed[s.Key] {
			continue // the plugin's memory of it stays as it was
		}
		switch {
		case s.Forget:
			delete(memory, s.Key)
		case s.Remember.HasSet || s.Remember.HasBefore:
			memory[s.Key] = s.Remember
		}
		if s.Action == converge.Write || s.Action == converge.Restore {
			r, _ := s.Action.Result()
			changes = append(changes, s.Key+": "+s.Reason)
			m.convergeKeys(r, 1)
		}
	}
	// A pass that changed nothing the state holds writes no file. What
	// came from the annotations or this run's record is written once: a
	// restart would lose it with the containers that carried it.
	if p.podState != nil && (!maps.Equal(held, memory) || !kept && len(memory) > 0) {
		if err := p.podState.Save(rec.id, memory); err != nil {
			log.WithError(err).Warn("cannot keep what the plugin set in the pod")
		}
	}
	if len(changes) > 0 {
		m.podConverged()
		log.WithField("changes", strings.Join(changes, "; ")).Info("converged running pod")
	}
	return len(failed) == 0 && !slices.ContainsFunc(steps, func(s converge.Step) bool { return s.Action == converge.CannotConverge })
}

// wantedLive is what the plugin holds in the pod after a pass: every key
// it set, as it set it.
func wantedLive(keys []converge.Key, memory map[string]converge.Written) []sysctl.Sysctl {
	var out []sysctl.Sysctl
	for _, k := range keys {
		if w, ok := memory[k.Name]; ok && k.Wanted && w.HasSet && w.Set == k.Want {
			out = append(out, sysctl.New(k.Name, k.Want))
		}
	}
	return out
}

// replaceRecord makes the pod's record one under cur, leaving out of its
// containers' specs the keys another writer holds (others): the pod's
// next container (its spec in spec mode, its annotations in both) then
// agrees with what converges, rather than carrying the config the pod was
// first seen under. It returns the new record, or nil if the pod went
// away or its record was replaced meanwhile, or, with a wait of
// replaceRetry, if a container was decided from old since the pass read
// its mark (podRecords.replace).
func (p *plugin) replaceRecord(old *podRecord, mark time.Time, cur *loaded, sb *api.PodSandbox, others map[string]bool) (*podRecord, time.Duration) {
	next := newPodRecord(cur, sb)
	own, looked := old.cachedOwn()
	next.own, next.lookedUp = own, looked
	next.written = old.setByPlugin()
	next.before, next.answered = old.valuesBefore(), true
	next.writes = writeDone
	next.leftToOther = others
	next.inPlace = true // read and brought to cur
	next.carried, next.startedLate = old.carriedSpecs()
	switch swapped, changed := p.records.replace(old, next, time.Now(), mark); {
	case changed:
		return nil, replaceRetry
	case !swapped:
		return nil, 0
	}
	return next, 0
}

// openPodState opens the directory the plugin keeps what it set per pod
// in; convergence goes on without it (the state is then lost at a restart).
func (p *plugin) openPodState(dir string) {
	if dir == "" {
		return
	}
	store, err := podstate.Open(dir)
	if err != nil {
		p.log.WithError(err).Warn("cannot keep pod state: after a restart the plugin's own values in running pods look like another writer's")
		return
	}
	p.podState = store
}
