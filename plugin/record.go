// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// podRecord is what the plugin decided for one pod and what really
// happened to it. It is made when the pod is first seen (RunPodSandbox, or
// its first container when the plugin came up after the pod) and every
// later event of the pod reads it, so annotations, logs and counts agree
// with what was written.
type podRecord struct {
	id string
	// pod is the pod as the decision sees it, read from the sandbox when
	// the record is made: a sandbox's attributes never change.
	pod policy.Pod
	// cfg is the config and mode the pod's containers are decided
	// under: the one in force when the pod was first seen, until a
	// convergence replaces the record with one under the config in force
	// then (podRecords.replace); never part of a pod's containers under
	// one config and part under another within a record.
	cfg *loaded

	// lookupSlot is held by the lookup in flight, so a pod is looked up
	// once however many containers it starts at the same time.
	lookupSlot chan struct{}

	mu  sync.Mutex
	own podsysctl.PodSysctls
	// lookedUp is set once own holds a successful lookup; a failed one is
	// tried again at the pod's next container.
	lookedUp       bool
	lookupFailures int
	// profilesReported is set once the pod's profiles were counted and
	// logged.
	profilesReported bool
	// written is what the plugin set in the pod: the keys really in its
	// namespaces (namespace mode, a convergence), or in spec mode what it
	// put on the last container's spec, which runc wrote there.
	written []sysctl.Sysctl
	// before (spec mode): the pod's values of the keys the plugin may set,
	// read at RunPodSandbox and kept only if none of its containers was
	// answered by then (answered), so runc had written none of the
	// plugin's: the values to put back, and proof that a value the plugin
	// put on a spec that never landed is no other writer's.
	before   map[string]string
	answered bool
	// leftToOther: keys a convergence found set by another writer in the
	// running pod; its next container's spec leaves them out, so that
	// runc does not overwrite them. Fixed when the record is made.
	leftToOther map[string]bool
	// inPlace: the pod's namespaces hold what the plugin gives it, as far
	// as it knows: a container whose spec carried the plugin's values has
	// started (runc wrote them), a convergence read and brought the pod
	// to its config, or the pod already had containers when the plugin
	// first saw it (Synchronize). From then on the create path writes
	// nothing into the pod, in either mode: a value another writer set
	// since is not overwritten by a container it cannot read; only a
	// convergence, which reads first, changes the pod.
	inPlace bool
	// carried (spec mode): the containers whose spec carried the
	// plugin's values and that have not started yet, at most maxCarried
	// (the newest); one that starts puts the pod's values in place.
	carried []carriedSpec
	// startedLate (spec mode): what containers decided from an earlier
	// record carried, as they started after this record replaced
	// theirs (started): the plugin's own values, landed then, until
	// specLanding after their start. At most maxCarried.
	startedLate []carriedSpec
	// specLandsBy (spec mode; guarded by podRecords.mu, not mu): until
	// then a container decided from this record may still have runc
	// write its spec's sysctls into the pod (specLanding).
	specLandsBy time.Time
	// landing: records this one replaced under another config whose
	// containers' sysctls may land after the convergence that replaced
	// them (until their specLandsBy, which no longer changes). Their
	// values are the plugin's own, not another writer's. Set before the
	// record is published; only the worker reads it (and empties it, once
	// a later record holds them).
	landing []*podRecord

	// Namespace mode only.
	writeErrs []podns.WriteError // keys the last attempt failed on
	writes    writeState
}

// newPodRecord is the record of a pod first seen now, under cfg.
func newPodRecord(cfg *loaded, pod *api.PodSandbox) *podRecord {
	rec := &podRecord{cfg: cfg}
	rec.pod, _ = readSandbox(pod, false)
	return rec
}

// readSandbox is the pod as the decision sees it, and, withTarget, where
// its namespaces are: by their path (the network one has it), or else
// through the sandbox's pid, which must still be in the pod's network
// namespace when it has one (podns.NamespaceRef.NetPath). A namespace
// missing from the sandbox's own list is the host's.
func readSandbox(pod *api.PodSandbox, withTarget bool) (policy.Pod, podns.Target) {
	info := policy.Pod{
		Namespace:      pod.GetNamespace(),
		Name:           pod.GetName(),
		Labels:         pod.GetLabels(),
		Annotations:    pod.GetAnnotations(),
		RuntimeHandler: pod.GetRuntimeHandler(),
	}
	var target podns.Target
	if withTarget {
		target = podns.Target{}
	}
	for _, ns := range pod.GetLinux().GetNamespaces() {
		kind, ok := sysctl.NamespaceByOCIName(ns.GetType())
		if !ok {
			continue
		}
		info.Own = info.Own.With(kind)
		if withTarget {
			ref := podns.NamespaceRef{Path: ns.GetPath()}
			if ref.Path == "" {
				ref.Pid = int(pod.GetPid())
			}
			target[kind] = ref
		}
	}
	if net := target[sysctl.Net].Path; net != "" {
		for kind, ref := range target {
			if ref.Pid > 0 {
				ref.NetPath = net
				target[kind] = ref
			}
		}
	}
	return info, target
}

// name is the pod's namespace/name, as errors name it.
func (r *podRecord) name() string { return r.pod.Namespace + "/" + r.pod.Name }

// writeState is where a namespace-mode pod stands.
type writeState int

const (
	// notWritten: nothing attempted yet (RunPodSandbox was missed, or the
	// pod's own sysctls could not be read yet).
	notWritten writeState = iota
	// writeFailed: some keys failed with onError: warn; they are tried
	// again at the pod's next container.
	writeFailed
	// writeDone: every key the decision gave is in the pod's namespaces.
	writeDone
)

func (w writeState) String() string {
	switch w {
	case notWritten:
		return "not written"
	case writeFailed:
		return "write failed"
	case writeDone:
		return "written"
	}
	return "not written"
}

// ownSysctls returns the pod's own sysctls, looking them up the first time
// (and again after a failure), within ctx as bound narrows it. fresh is true for the call that
// did the lookup, which reports what it found.
func (r *podRecord) ownSysctls(ctx context.Context, bound func(context.Context) (context.Context, context.CancelFunc), fetch func(context.Context, string) (podsysctl.PodSysctls, error)) (own podsysctl.PodSysctls, fresh bool, err error) {
	if own, ok := r.cachedOwn(); ok {
		return own, false, nil
	}
	// Waiting for a lookup in flight, or doing one, is bounded.
	ctx, cancel := bound(ctx)
	defer cancel()
	select {
	case r.lookupSlot <- struct{}{}:
	case <-ctx.Done():
		return podsysctl.PodSysctls{}, false, fmt.Errorf("waiting for the pod's lookup: %w", context.Cause(ctx))
	}
	defer func() { <-r.lookupSlot }()
	if own, ok := r.cachedOwn(); ok {
		return own, false, nil
	}
	own, err = fetch(ctx, r.id)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.lookupFailures++
		return podsysctl.PodSysctls{}, r.lookupFailures == 1, err
	}
	r.own, r.lookedUp = own, true
	return own, true, nil
}

// firstProfileReport tells the one caller per pod that should count and
// log its profiles.
func (r *podRecord) firstProfileReport() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := !r.profilesReported
	r.profilesReported = true
	return first
}

func (r *podRecord) cachedOwn() (podsysctl.PodSysctls, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.own, r.lookedUp
}

// decidesAtOnce tells whether a decision for the pod can wait on nothing:
// its own sysctls are known and, in namespace mode, its namespaces hold
// what they should.
func (r *podRecord) decidesAtOnce() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lookedUp && (r.cfg.mode != runtimemode.Namespace || r.writes == writeDone)
}

// writeMissing writes what of apply the pod's namespaces do not hold yet
// through write, and keeps what happened (recordWrite). It returns what
// it attempted and what failed of it.
func (r *podRecord) writeMissing(apply []sysctl.Sysctl, write func([]sysctl.Sysctl) []podns.WriteError) (attempted []sysctl.Sysctl, errs []podns.WriteError) {
	r.mu.Lock()
	for _, s := range apply {
		if !hasKey(r.written, s.Key()) {
			attempted = append(attempted, s)
		}
	}
	r.mu.Unlock()
	if len(attempted) > 0 {
		errs = write(attempted)
	}
	r.recordWrite(attempted, errs)
	return attempted, errs
}

// needsWrite tells whether namespace mode still owes the pod its sysctls.
func (r *podRecord) needsWrite() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writes != writeDone
}

// recordWrite keeps what an attempt wrote: keys that were written stay
// written; the failed ones are tried again at the next container.
func (r *podRecord) recordWrite(attempted []sysctl.Sysctl, errs []podns.WriteError) {
	r.mu.Lock()
	defer r.mu.Unlock()
	failed := make(map[string]bool, len(errs))
	for _, e := range errs {
		failed[e.Key] = true
	}
	for _, s := range attempted {
		if !failed[s.Key()] && !hasKey(r.written, s.Key()) {
			r.written = append(r.written, s)
		}
	}
	r.writeErrs = errs
	if len(errs) == 0 {
		r.writes = writeDone
	} else {
		r.writes = writeFailed
	}
}

// namespaceOutcome is what the pod's namespaces hold and what failed, for
// annotations.
func (r *podRecord) namespaceOutcome() (written []sysctl.Sysctl, errs []podns.WriteError, state writeState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sysctl.Sysctl(nil), r.written...), append([]podns.WriteError(nil), r.writeErrs...), r.writes
}

// landingSince is what of the pod's earlier decisions may have landed, or
// may still land, at now, as the worker converges it to cur: the
// containers of the records r keeps (landing), and r's own when r is
// under another config (mark: r's specLandsBy, read under
// podRecords.mu). A record counts until specLanding after its window
// ends, so that the pass asked for at its end still sees its values; after
// that its values are nobody's. values is what they put on their specs,
// key by key; until is when the last of them can land.
func (r *podRecord) landingSince(mark time.Time, cur *loaded, now time.Time) (values map[string][]string, until time.Time) {
	add := func(set []sysctl.Sysctl, by time.Time) {
		if !now.Before(by.Add(specLanding)) {
			return
		}
		if values == nil {
			values = map[string][]string{}
		}
		for _, s := range set {
			values[s.Key()] = append(values[s.Key()], s.Value())
		}
		if by.After(until) {
			until = by
		}
	}
	for _, l := range r.landing {
		add(l.setByPlugin(), l.specLandsBy) // a replaced record's: no longer changes
	}
	if r.cfg != cur {
		add(r.setByPlugin(), mark)
	}
	r.mu.Lock()
	late := slices.Clone(r.startedLate)
	r.mu.Unlock()
	for _, l := range late {
		add(l.values, l.at) // landed at its start
	}
	return values, until
}

// landingRecords stands for the decisions of a plugin before this one
// whose values containers listed at Synchronize may land (spec mode): a
// record each, whose values land until landsBy. Without them, a value
// runc writes after a restart would be taken for another writer's.
// carried is those not started yet: whenever they start, they land
// (started).
func landingRecords(specs []carriedSpec, landsBy time.Time) (landing []*podRecord, carried []carriedSpec) {
	for _, spec := range specs {
		landing = append(landing, &podRecord{specLandsBy: landsBy, written: spec.values})
		if spec.id != "" {
			carried = append(carried, spec)
		}
	}
	return landing, carried
}

// landingWait is how long until no container of the records r keeps as
// landing can land its sysctls; 0 if none can.
func (r *podRecord) landingWait() time.Duration {
	var until time.Time
	for _, l := range r.landing {
		if l.specLandsBy.After(until) {
			until = l.specLandsBy
		}
	}
	if until.IsZero() {
		return 0
	}
	return max(time.Until(until), time.Millisecond)
}

// noteConverged keeps what a convergence left set by the plugin in the
// pod, over what the record held of the same keys (a container decided
// from it meanwhile, or the record it replaced). A key the pass planned
// and does not leave set (put back, forgotten, left to another writer)
// is no longer the plugin's: kept, it would come back as the plugin's
// from the record where the pod's state holds nothing.
func (r *podRecord) noteConverged(planned []string, written []sysctl.Sysctl) {
	r.mu.Lock()
	defer r.mu.Unlock()
	merged := append([]sysctl.Sysctl(nil), written...)
	for _, s := range r.written {
		if !hasKey(written, s.Key()) && !slices.Contains(planned, s.Key()) {
			merged = append(merged, s)
		}
	}
	r.written = merged
}

// noteSetOnSpec keeps what the plugin put on a container's spec (spec
// mode), and the container, so that its start puts the values in place.
func (r *podRecord) noteSetOnSpec(ctrID string, applied []sysctl.Sysctl) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.written, r.answered = applied, true
	if len(applied) == 0 {
		return
	}
	if len(r.carried) == maxCarried {
		r.carried = r.carried[1:] // the oldest: it then never counts
	}
	r.carried = append(r.carried, carriedSpec{id: ctrID, values: applied})
}

// carriedSpec is a container whose spec carried the plugin's values, and
// those values; at is when it started (startedLate).
type carriedSpec struct {
	id     string
	values []sysctl.Sysctl
	at     time.Time
}

// maxCarried bounds the containers a record keeps as carrying the
// plugin's values: kubelet starts a pod's containers one at a time, so
// more than a few in flight is a pod author's doing. One dropped only
// leaves the pod's values not yet in place.
const maxCarried = 8

// started notes that a container of the pod started: runc has written
// what its spec carried, so if it carried the plugin's values, they are
// in place. late tells that they are not what the record holds: the
// container was decided from a record a convergence replaced since, and
// its values, the plugin's own, landed over the converged ones
// (startedLate), for a pass to redo now.
func (r *podRecord) started(ctrID string, now time.Time) (late bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.IndexFunc(r.carried, func(c carriedSpec) bool { return c.id == ctrID })
	if i < 0 {
		return false
	}
	c := r.carried[i]
	r.carried = slices.Delete(r.carried, i, i+1)
	r.inPlace = true
	if sameSysctls(c.values, r.written) {
		return false
	}
	c.at = now
	r.startedLate = slices.DeleteFunc(r.startedLate, func(l carriedSpec) bool { return !now.Before(l.at.Add(specLanding)) })
	if len(r.startedLate) == maxCarried {
		r.startedLate = r.startedLate[1:]
	}
	r.startedLate = append(r.startedLate, c)
	return true
}

// sameSysctls tells whether a and b hold the same keys at the same values.
func sameSysctls(a, b []sysctl.Sysctl) bool {
	if len(a) != len(b) {
		return false
	}
	for _, s := range a {
		if !slices.Contains(b, s) {
			return false
		}
	}
	return true
}

// carriedSpecs is copies of carried and startedLate, for the record that
// replaces r.
func (r *podRecord) carriedSpecs() (carried, startedLate []carriedSpec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.carried), slices.Clone(r.startedLate)
}

// valuesInPlace tells whether the pod's values are in place (inPlace).
func (r *podRecord) valuesInPlace() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inPlace
}

// placedOnly is what a container of a pod whose values are in place is
// told it has: the keys of apply the plugin set in the pod at the same
// value; the rest skipped, for a convergence to set (or, when another
// writer set them, to leave).
func (r *podRecord) placedOnly(apply []sysctl.Sysctl, skipped []policy.Skipped) ([]sysctl.Sysctl, []policy.Skipped) {
	apply, skipped = leaveToOthers(apply, skipped, r.leftToOther)
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := make([]sysctl.Sysctl, 0, len(apply))
	for _, s := range apply {
		if slices.Contains(r.written, s) {
			kept = append(kept, s)
		} else {
			skipped = append(skipped, policy.SkipConvergence.Skip(s.Key(), ""))
		}
	}
	return kept, skipped
}

// noteBefore keeps values read in the pod as its values before the
// plugin's, unless one of its containers was answered meanwhile: runc may
// then have written the plugin's values before the read.
func (r *podRecord) noteBefore(values map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.answered {
		r.before = values
	}
}

// valuesBefore is what noteBefore kept (nil if nothing).
func (r *podRecord) valuesBefore() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.before
}

// setByPlugin is what this run of the plugin set in the pod, in either mode.
func (r *podRecord) setByPlugin() []sysctl.Sysctl {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sysctl.Sysctl(nil), r.written...)
}

func hasKey(list []sysctl.Sysctl, key string) bool {
	for _, s := range list {
		if s.Key() == key {
			return true
		}
	}
	return false
}

// podRecords holds a record per live pod.
type podRecords struct {
	mu   sync.Mutex
	pods map[string]*podRecord
}

func newPodRecords() *podRecords { return &podRecords{pods: map[string]*podRecord{}} }

// get returns the pod's record, making it with newRecord on first sight.
func (s *podRecords) get(podID string, newRecord func() *podRecord) *podRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.getLocked(podID, newRecord)
}

// getForContainer is get for a container's decision: in spec mode, with
// a config that sets anything, the record it returns is marked as one
// whose spec values may land in the pod until landsBy (specLandsBy), in
// the same lock as a convergence's replace, so that a convergence either
// sees the mark or the container gets the replacing record.
func (s *podRecords) getForContainer(podID string, newRecord func() *podRecord, landsBy time.Time) *podRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.getLocked(podID, newRecord)
	if r.cfg.mode != runtimemode.Namespace && !r.cfg.policy.Empty() && landsBy.After(r.specLandsBy) {
		r.specLandsBy = landsBy
	}
	return r
}

// find returns the pod's record, or nil if it has none.
func (s *podRecords) find(podID string) *podRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pods[podID]
}

func (s *podRecords) getLocked(podID string, newRecord func() *podRecord) *podRecord {
	if r, ok := s.pods[podID]; ok {
		return r
	}
	r := newRecord()
	r.id = podID
	r.lookupSlot = makeSlot()
	s.pods[podID] = r
	return r
}

func makeSlot() chan struct{} { return make(chan struct{}, 1) }

func (s *podRecords) forget(podID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pods, podID)
}

// maxLanding bounds the records a record keeps as landing: a pod that
// creates containers under many configs within specLanding (reloads back
// to back) keeps the newest.
const maxLanding = 4

// landsBy is rec's specLandsBy, read in the lock that guards it.
func (s *podRecords) landsBy(rec *podRecord) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return rec.specLandsBy
}

// replace puts next in old's place, unless the pod was removed or its
// record replaced meanwhile, or a container was decided from old since
// the caller read its mark (landsBy): then changed is true, and the
// caller, whose plan did not count that container, tries again later.
// next keeps, as landing, old and the records old kept whose containers'
// sysctls may land after now, when they were under another config than
// next; the records it keeps keep none of their own, so that none is
// reachable past maxLanding. A handler still holding old finishes with it.
func (s *podRecords) replace(old, next *podRecord, now, mark time.Time) (swapped, changed bool) {
	next.id = old.id
	next.lookupSlot = makeSlot()
	s.mu.Lock()
	switch {
	case s.pods[old.id] != old:
	case !old.specLandsBy.Equal(mark):
		changed = true
	default:
		for _, l := range slices.Concat(old.landing, []*podRecord{old}) {
			// Only the worker reads a record's landing: it moves here.
			l.landing = nil
			if !l.specLandsBy.After(now) {
				continue
			}
			if l.cfg == next.cfg {
				// Its containers carry next's values: they land as
				// next's would, and land older ones once next is
				// replaced under another config.
				if l.specLandsBy.After(next.specLandsBy) {
					next.specLandsBy = l.specLandsBy
				}
				continue
			}
			if len(next.landing) == maxLanding {
				next.landing = next.landing[1:] // the oldest
			}
			next.landing = append(next.landing, l)
		}
		s.pods[old.id] = next
		swapped = true
	}
	s.mu.Unlock()
	return swapped, changed
}

// retain drops every pod for which keep returns false: pods removed while
// the plugin was not connected, whose RemovePodSandbox it never saw.
func (s *podRecords) retain(keep func(podID string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.pods {
		if !keep(id) {
			delete(s.pods, id)
		}
	}
}

func (s *podRecords) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pods)
}
