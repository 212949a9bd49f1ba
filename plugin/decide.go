// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"errors"
	"fmt"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/outcome"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/sirupsen/logrus"
)

// A pod's decision, in the order CreateContainer takes its steps
// (decideContainer first), then what RunPodSandbox adds: namespace mode's
// first write (writePodSandbox) and spec mode's early lookup (prefetch).
// What the pod's record keeps is in record.go.

// decideContainer decides for one container in the pod's mode.
func (p *plugin) decideContainer(ctx context.Context, rec *podRecord, ctr *api.Container) containerResult {
	if why := rec.cfg.policy.Excluded(rec.pod); why != "" {
		// Only the outcome: a restarted plugin, or audit, can then tell
		// an excluded container from one created while it was away.
		return containerResult{outcome: outcome.Excluded, excludedBy: why}
	}
	if rec.cfg.mode == runtimemode.Namespace {
		return p.decideInNamespaceMode(ctx, rec)
	}
	return p.decideInSpecMode(ctx, rec, ctr)
}

// decideInNamespaceMode heals a pod whose namespaces still lack their
// sysctls, then tells what the pod really holds, for the container's
// annotations.
func (p *plugin) decideInNamespaceMode(ctx context.Context, rec *podRecord) containerResult {
	d, own, ok := p.decideForPod(ctx, rec, nil)
	if !ok {
		return containerResult{outcome: outcome.LookupFailed}
	}
	if rec.needsWrite() {
		if err := p.writeIntoPod(ctx, rec, d, own, "CreateContainer"); err != nil {
			return containerResult{outcome: outcome.WriteFailed, err: err}
		}
	}
	written, errs, state := rec.namespaceOutcome()
	skipped := d.Skipped
	for _, e := range errs {
		skipped = append(skipped, policy.SkipWriteFailed.Skip(e.Key, ": "+e.Err.Error()))
	}
	if rec.valuesInPlace() {
		written, skipped = rec.placedOnly(d.Apply, skipped)
	}
	got := appliedOrNothing(written)
	if state == writeFailed {
		got = outcome.WriteFailed
	}
	return containerResult{outcome: got, applied: written, skipped: skipped}
}

// decideForPod gathers the inputs for one pod and runs the pure decision.
// ok is false when nothing may be set because the pod's own sysctls are
// unknown.
func (p *plugin) decideForPod(ctx context.Context, rec *podRecord, existing map[string]string) (policy.Decision, podsysctl.PodSysctls, bool) {
	own, ok := p.ownSysctls(ctx, rec)
	if !ok {
		return policy.Decision{}, own, false
	}
	in := policy.Input{Pod: rec.pod, Existing: sysctl.NormalizeKeys(existing), PodOwn: own.Own, GIDMappings: own.GIDMappings, Writer: rec.cfg.mode.Writer()}
	d := rec.cfg.policy.Decide(in)
	if (len(d.ProfilesAsked) > 0 || d.ProfilesRefused() != "") && rec.firstProfileReport() {
		p.reportProfiles(rec, d)
	}
	return d, own, true
}

// ownSysctls looks the pod's own sysctls up once per pod (again after a
// failure), reporting the first failure and any odd source.
func (p *plugin) ownSysctls(ctx context.Context, rec *podRecord) (podsysctl.PodSysctls, bool) {
	own, fresh, err := rec.ownSysctls(ctx, p.withinDeadline, rec.cfg.lookup.Fetch)
	if err == nil && !fresh {
		return own, true // the record's: the common case, kept cheap
	}
	log := p.recordLog(rec)
	if err != nil {
		if fresh {
			log.WithError(err).Warn("cannot read the pod's own sysctls, so setting none (never override a pod's value); trying again at its next container")
		} else if log.Logger.IsLevelEnabled(logrus.DebugLevel) {
			log.WithError(err).Debug("pod lookup failed again")
		}
		return own, false
	}
	if fresh && own.Source != podsysctl.SourceSandboxConfig {
		log.WithField("source", own.Source).Warn("read the pod's sysctls from a source with the runtime's own keys; they count as the pod's own")
	}
	return own, true
}

// reportProfiles counts and logs what became of the profiles a pod asked
// for, once per pod: every container of a pod gets the same decision.
func (p *plugin) reportProfiles(rec *podRecord, d policy.Decision) {
	p.meter.Load().profilesDecided(d)
	log := p.recordLog(rec)
	if refused := d.ProfilesRefused(); refused != "" {
		log.WithFields(logrus.Fields{"result": string(policy.ProfileRefused), "reason": refused}).Warn("profiles annotation refused; the pod gets the defaults and rules without profiles")
	}
	for _, r := range d.Profiles() {
		if r.Result == policy.ProfileApplied {
			log.WithFields(logrus.Fields{"profile": r.Name, "result": string(r.Result)}).Debug("profile applied")
			continue
		}
		log.WithFields(logrus.Fields{"profile": r.Name, "result": string(r.Result), "reason": r.Reason}).Warn("profile not applied; the pod gets the rest")
	}
}

// writeIntoPod writes what the pod's namespaces still lack: all of it at
// RunPodSandbox, or at a container's creation whatever an earlier attempt
// missed (the plugin was down, or a write failed with onError: warn).
func (p *plugin) writeIntoPod(ctx context.Context, rec *podRecord, d policy.Decision, own podsysctl.PodSysctls, event string) error {
	ctx, cancel := p.withinDeadline(ctx)
	defer cancel()
	log := p.recordLog(rec).WithField("event", event)
	pending, errs := rec.writeMissing(d.Apply, func(pending []sysctl.Sysctl) []podns.WriteError {
		if ctx.Err() != nil {
			// Nothing is written once the runtime may have moved on.
			return failEach(pending, fmt.Errorf("not written: the runtime's request deadline passed (%w)", context.Cause(ctx)))
		}
		target, release, err := p.held.target(rec.id)
		if err != nil {
			return failEach(pending, err)
		}
		defer release()
		values, errs := hostSideValues(pending, own.GIDMappings, rec.pod.Own)
		return append(errs, p.writeNamespaces(target, values)...)
	})
	p.meter.Load().namespaceWritten(len(pending), len(errs))
	if len(errs) < len(pending) {
		p.noteSet(rec)
	}
	if len(errs) == 0 {
		if len(pending) > 0 && log.Logger.IsLevelEnabled(logrus.DebugLevel) {
			log.WithField("sysctls", formatApplied(pending)).Debug("wrote into the pod's namespaces")
		}
		return nil
	}
	for _, e := range errs {
		log.WithFields(logrus.Fields{"key": e.Key, "value": e.Value, "reason": e.Err.Error()}).Warn("cannot set sysctl in the pod's namespaces")
	}
	err := fmt.Errorf("nri-sysctl: pod %s: cannot set %d sysctl(s) in its namespaces: %w", rec.name(), len(errs), joinWriteErrors(errs))
	if rec.cfg.cfg.OnError == config.OnErrorWarn {
		log.WithError(err).Warn("onError: warn, the pod goes on; the keys are tried again at its next container")
		return nil
	}
	log.WithError(err).Error("failing the request")
	return err
}

// hostSideValues is what the plugin writes from the host's user namespace
// (policy.HostSide): a key whose host-side value cannot be had fails.
func hostSideValues(list []sysctl.Sysctl, gids []policy.IDMapping, own policy.NamespaceSet) ([]sysctl.Sysctl, []podns.WriteError) {
	out := make([]sysctl.Sysctl, 0, len(list))
	var errs []podns.WriteError
	for _, s := range list {
		host, err := policy.HostSide(s, own, gids)
		if err != nil {
			errs = append(errs, podns.WriteError{Key: s.Key(), Value: s.Value(), Err: err})
			continue
		}
		out = append(out, host)
	}
	return out, errs
}

// failEach fails each of list for why.
func failEach(list []sysctl.Sysctl, why error) []podns.WriteError {
	errs := make([]podns.WriteError, len(list))
	for i, s := range list {
		errs[i] = podns.WriteError{Key: s.Key(), Value: s.Value(), Err: why}
	}
	return errs
}

func joinWriteErrors(errs []podns.WriteError) error {
	list := make([]error, len(errs))
	for i, e := range errs {
		list[i] = e
	}
	return errors.Join(list...)
}

// decideInSpecMode decides for a container whose sysctls go on its spec:
// the keys already there (runtime or a lower-index plugin) stay.
func (p *plugin) decideInSpecMode(ctx context.Context, rec *podRecord, ctr *api.Container) containerResult {
	d, _, ok := p.decideForPod(ctx, rec, ctr.GetLinux().GetSysctl())
	if !ok {
		return containerResult{outcome: outcome.LookupFailed}
	}
	if rec.valuesInPlace() {
		// Nothing on the spec: what the pod holds is told, not written.
		applied, skipped := rec.placedOnly(d.Apply, d.Skipped)
		return containerResult{outcome: appliedOrNothing(applied), applied: applied, skipped: skipped}
	}
	if len(rec.leftToOther) > 0 {
		d.Apply, d.Skipped = leaveToOthers(d.Apply, d.Skipped, rec.leftToOther)
	}
	rec.noteSetOnSpec(ctr.GetId(), d.Apply)
	if len(d.Apply) > 0 {
		p.noteSet(rec)
	}
	return containerResult{outcome: appliedOrNothing(d.Apply), applied: d.Apply, onSpec: true, skipped: d.Skipped}
}

// leaveToOthers takes out of apply the keys another writer set in the
// running pod since the plugin did, as skipped.
func leaveToOthers(apply []sysctl.Sysctl, skipped []policy.Skipped, others map[string]bool) ([]sysctl.Sysctl, []policy.Skipped) {
	kept := make([]sysctl.Sysctl, 0, len(apply))
	for _, s := range apply {
		if others[s.Key()] {
			skipped = append(skipped, policy.SkipExisting.Skip(s.Key(), ": set in the running pod by another writer"))
			continue
		}
		kept = append(kept, s)
	}
	return kept, skipped
}

// writePodSandbox decides for a namespace-mode pod at RunPodSandbox and
// writes it into the pod's namespaces.
func (p *plugin) writePodSandbox(ctx context.Context, rec *podRecord) error {
	d, own, ok := p.decideForPod(ctx, rec, nil)
	if !ok {
		return nil
	}
	if err := p.writeIntoPod(ctx, rec, d, own, "RunPodSandbox"); err != nil {
		// The pod gets no container: count it as one whose write
		// failed, as CreateContainer counts its own.
		p.meter.Load().containerOutcome(outcome.WriteFailed)
		return err
	}
	return nil
}

// prefetch looks a spec-mode pod up at RunPodSandbox, while the runtime
// finishes starting it; no request deadline covers it.
func (p *plugin) prefetch(rec *podRecord, sb *api.PodSandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), prefetchTimeout)
	defer cancel()
	if own, ok := p.ownSysctls(ctx, rec); ok {
		p.readBefore(rec, sb, own)
	}
}

// readBefore reads a spec-mode pod's values of the keys the plugin would
// set in it, as its values before the plugin's (podRecord.noteBefore).
func (p *plugin) readBefore(rec *podRecord, sb *api.PodSandbox, own podsysctl.PodSysctls) {
	if sb.GetPid() <= 0 {
		return
	}
	d := rec.cfg.policy.Decide(policy.Input{Pod: rec.pod, PodOwn: own.Own, GIDMappings: own.GIDMappings, Writer: rec.cfg.mode.Writer()})
	if len(d.Apply) == 0 {
		return
	}
	names := make([]string, len(d.Apply))
	for i, s := range d.Apply {
		names[i] = s.Key()
	}
	target, release, err := p.held.target(rec.id)
	if err != nil {
		return
	}
	defer release()
	values := map[string]string{}
	for name, v := range p.readNamespaces(target, names) {
		if v.Err == nil {
			values[name] = v.Value
		}
	}
	rec.noteBefore(values)
}

// appliedOrNothing is the outcome of a container that got what it was given.
func appliedOrNothing(applied []sysctl.Sysctl) outcome.Outcome {
	if len(applied) > 0 {
		return outcome.Applied
	}
	return outcome.NothingToApply
}
