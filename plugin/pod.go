package plugin

import (
	"context"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/outcome"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/sirupsen/logrus"
)

// prefetch looks a spec-mode pod up at RunPodSandbox, while the runtime
// finishes starting it; no request deadline covers it.
func (p *plugin) prefetch(rec *podRecord, pod *api.PodSandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), prefetchTimeout)
	defer cancel()
	_, _ = p.ownSysctls(ctx, rec, pod)
}

// ownSysctls looks the pod's own sysctls up once per pod (again after a
// failure), reporting the first failure and any odd source.
func (p *plugin) ownSysctls(ctx context.Context, rec *podRecord, pod *api.PodSandbox) (podsysctl.PodSysctls, bool) {
	own, fresh, err := rec.ownSysctls(ctx, p.withinDeadline, rec.cfg.lookup.Fetch)
	if err == nil && !fresh {
		return own, true // the record's: the common case, kept cheap
	}
	log := p.podLog(pod)
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

// decideForPod gathers the inputs for one pod and runs the pure decision.
// ok is false when nothing may be set because the pod's own sysctls are
// unknown.
func (p *plugin) decideForPod(ctx context.Context, rec *podRecord, pod *api.PodSandbox, existing map[string]string) (policy.Decision, podsysctl.PodSysctls, bool) {
	own, ok := p.ownSysctls(ctx, rec, pod)
	if !ok {
		return policy.Decision{}, own, false
	}
	in := policy.Input{Pod: podInfo(pod), Existing: sysctl.NormalizeKeys(existing), PodOwn: own.Own, GIDMappings: own.GIDMappings, Writer: rec.cfg.mode.Writer()}
	d := rec.cfg.policy.Decide(in)
	if (len(d.Profiles) > 0 || d.ProfilesRefused != "") && rec.firstProfileReport() {
		p.reportProfiles(pod, d)
	}
	return d, own, true
}

// reportProfiles counts and logs what became of the profiles a pod asked
// for, once per pod: every container of a pod gets the same decision.
func (p *plugin) reportProfiles(pod *api.PodSandbox, d policy.Decision) {
	p.meter.Load().profilesDecided(d)
	log := p.podLog(pod)
	if d.ProfilesRefused != "" {
		log.WithFields(logrus.Fields{"result": string(policy.ProfileRefused), "reason": d.ProfilesRefused}).Warn("profiles annotation refused; the pod gets the defaults and rules without profiles")
	}
	for _, r := range d.Profiles {
		if r.Result == policy.ProfileApplied {
			log.WithFields(logrus.Fields{"profile": r.Name, "result": string(r.Result)}).Debug("profile applied")
			continue
		}
		log.WithFields(logrus.Fields{"profile": r.Name, "result": string(r.Result), "reason": r.Reason}).Warn("profile not applied; the pod gets the rest")
	}
}

// decideInSpecMode decides for a container whose sysctls go on its spec:
// the keys already there (runtime or a lower-index plugin) stay.
func (p *plugin) decideInSpecMode(ctx context.Context, rec *podRecord, pod *api.PodSandbox, ctr *api.Container) containerResult {
	d, _, ok := p.decideForPod(ctx, rec, pod, ctr.GetLinux().GetSysctl())
	if !ok {
		return containerResult{outcome: outcome.LookupFailed}
	}
	return containerResult{outcome: appliedOrNothing(d.Apply), applied: d.Apply, onSpec: true, skipped: d.Skipped}
}

func podName(pod *api.PodSandbox) string {
	return pod.GetNamespace() + "/" + pod.GetName()
}

// podInfo takes the namespaces from the pod sandbox's own list: a missing
// entry means the pod shares the host's.
func podInfo(pod *api.PodSandbox) policy.Pod {
	info := policy.Pod{
		Namespace:      pod.GetNamespace(),
		Name:           pod.GetName(),
		Labels:         pod.GetLabels(),
		Annotations:    pod.GetAnnotations(),
		RuntimeHandler: pod.GetRuntimeHandler(),
	}
	for _, ns := range pod.GetLinux().GetNamespaces() {
		if kind, ok := sysctl.NamespaceByOCIName(ns.GetType()); ok {
			info.Own = info.Own.With(kind)
		}
	}
	return info
}

// decideContainer decides for one container in the pod's mode.
func (p *plugin) decideContainer(ctx context.Context, rec *podRecord, pod *api.PodSandbox, ctr *api.Container) containerResult {
	if why := rec.cfg.policy.Excluded(podInfo(pod)); why != "" {
		// Only the outcome: a restarted plugin, or audit, can then tell
		// an excluded container from one created while it was away.
		return containerResult{outcome: outcome.Excluded, excludedBy: why}
	}
	if rec.cfg.mode == runtimemode.Namespace {
		return p.decideInNamespaceMode(ctx, rec, pod)
	}
	return p.decideInSpecMode(ctx, rec, pod, ctr)
}
