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
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/sirupsen/logrus"
)

// writeIntoPod writes what the pod's namespaces still lack: all of it at
// RunPodSandbox, or at a container's creation whatever an earlier attempt
// missed (the plugin was down, or a write failed with onError: warn).
func (p *plugin) writeIntoPod(ctx context.Context, rec *podRecord, pod *api.PodSandbox, d policy.Decision, own podsysctl.PodSysctls, event string) error {
	ctx, cancel := p.withinDeadline(ctx)
	defer cancel()
	log := p.podLog(pod).WithField("event", event)
	written, _, _ := rec.namespaceOutcome()
	var pending []sysctl.Sysctl
	for _, s := range d.Apply {
		if !hasKey(written, s.Key()) {
			pending = append(pending, s)
		}
	}
	var errs []podns.WriteError
	switch {
	case len(pending) == 0:
	case ctx.Err() != nil:
		// Nothing is written once the runtime may have moved on.
		for _, s := range pending {
			errs = append(errs, podns.WriteError{Key: s.Key(), Value: s.Value(), Err: fmt.Errorf("not written: the runtime's request deadline passed (%w)", context.Cause(ctx))})
		}
	default:
		values, valueErrs := hostSideValues(pending, own.GIDMappings, pod)
		target := namespaceTarget(pod)
		release := rec.anchor(target)
		errs = append(valueErrs, p.writeNamespaces(target, values)...)
		release()
	}
	rec.recordWrite(pending, errs)
	p.meter.Load().namespaceWritten(len(pending), len(errs))
	if len(errs) == 0 {
		if len(pending) > 0 && log.Logger.IsLevelEnabled(logrus.DebugLevel) {
			log.WithField("sysctls", formatApplied(pending)).Debug("wrote into the pod's namespaces")
		}
		return nil
	}
	for _, e := range errs {
		log.WithFields(logrus.Fields{"key": e.Key, "value": e.Value, "reason": e.Err.Error()}).Warn("cannot set sysctl in the pod's namespaces")
	}
	err := fmt.Errorf("nri-sysctl: pod %s: cannot set %d sysctl(s) in its namespaces: %w", podName(pod), len(errs), joinWriteErrors(errs))
	if rec.cfg.cfg.OnError == config.OnErrorWarn {
		log.WithError(err).Warn("onError: warn, the pod goes on; the keys are tried again at its next container")
		return nil
	}
	log.WithError(err).Error("failing the request")
	return err
}

// hostSideValues is what the plugin writes from the host's user namespace
// (policy.HostSide): a key whose host-side value cannot be had fails.
func hostSideValues(list []sysctl.Sysctl, gids []policy.IDMapping, pod *api.PodSandbox) ([]sysctl.Sysctl, []podns.WriteError) {
	own := podInfo(pod).Own
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

// decideInNamespaceMode heals a pod whose namespaces still lack their
// sysctls, then tells what the pod really holds, for the container's
// annotations.
func (p *plugin) decideInNamespaceMode(ctx context.Context, rec *podRecord, pod *api.PodSandbox) containerResult {
	d, own, ok := p.decideForPod(ctx, rec, pod, nil)
	if !ok {
		return containerResult{outcome: outcome.LookupFailed}
	}
	if rec.needsWrite() {
		if err := p.writeIntoPod(ctx, rec, pod, d, own, "CreateContainer"); err != nil {
			return containerResult{outcome: outcome.WriteFailed, err: err}
		}
	}
	written, errs, state := rec.namespaceOutcome()
	skipped := d.Skipped
	for _, e := range errs {
		skipped = append(skipped, policy.SkipWriteFailed.Skip(e.Key, ": "+e.Err.Error()))
	}
	got := appliedOrNothing(written)
	if state == writeFailed {
		got = outcome.WriteFailed
	}
	return containerResult{outcome: got, applied: written, skipped: skipped}
}

func joinWriteErrors(errs []podns.WriteError) error {
	list := make([]error, len(errs))
	for i, e := range errs {
		list[i] = e
	}
	return errors.Join(list...)
}

// namespaceTarget finds the pod's namespaces: by their path (the network
// one has it), or else through the sandbox's pid.
func namespaceTarget(pod *api.PodSandbox) podns.Target {
	t := podns.Target{}
	for _, ns := range pod.GetLinux().GetNamespaces() {
		kind, ok := sysctl.NamespaceByOCIName(ns.GetType())
		if !ok {
			continue
		}
		ref := podns.NamespaceRef{Path: ns.GetPath()}
		if ref.Path == "" {
			ref.Pid = int(pod.GetPid())
		}
		t[kind] = ref
	}
	return t
}

// writePodSandbox decides for a namespace-mode pod at RunPodSandbox and
// writes it into the pod's namespaces.
func (p *plugin) writePodSandbox(ctx context.Context, rec *podRecord, pod *api.PodSandbox) error {
	d, own, ok := p.decideForPod(ctx, rec, pod, nil)
	if !ok {
		return nil
	}
	if err := p.writeIntoPod(ctx, rec, pod, d, own, "RunPodSandbox"); err != nil {
		// The pod gets no container: count it as one whose write
		// failed, as CreateContainer counts its own.
		p.meter.Load().containerOutcome(outcome.WriteFailed)
		return err
	}
	return nil
}
