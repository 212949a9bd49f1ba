// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package plugin is nri-sysctl's NRI plugin: the handlers the runtime
// calls, a pod's record, the decision's inputs, namespace mode, what a
// container is told and counted, reloads and metrics. Run serves it;
// the binary's commands are in cmd/nri-sysctl.
package plugin

import (
	"context"
	"strings"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/sirupsen/logrus"
)

// The NRI handlers, in the order the runtime calls them. The plugin's state
// is in state.go, a pod's record (what the plugin read of the pod, and what
// it wrote) in record.go, the decision's steps in call order in decide.go,
// the mode in mode.go, and what a container is told and counted in
// outcome.go.

// Configure takes the config text containerd passes to a pre-installed
// plugin, and picks how sysctls reach pods on this runtime. A mode that
// would crash the runtime fails the registration.
func (p *plugin) Configure(_ context.Context, text, runtimeName, runtimeVersion string) (api.EventMask, error) {
	rt := runtimemode.Runtime{Name: runtimeName, Version: runtimeVersion}
	if r := p.stub.Load(); r != nil {
		rt.NRIVersion = reportedNRIVersion(r.runtime.RuntimeNRIVersion(), runtimeName, runtimeVersion)
	}
	p.runtime.Store(&rt)
	if strings.TrimSpace(text) != "" {
		cfg, err := config.Parse("NRI plugin config", []byte(text), p.check)
		if err == nil {
			err = p.applyConfig(cfg)
		}
		if err != nil {
			p.log.WithError(err).Error("rejecting config from the runtime")
			return 0, err
		}
		p.log.WithFields(logrus.Fields{"defaults": len(cfg.Sysctls), "rules": len(cfg.Rules)}).Info("config from the runtime")
	} else if err := p.applyMode(); err != nil {
		p.log.WithError(err).Error("refusing to register")
		return 0, err
	}
	p.declareFailurePolicy(rt)
	p.meter.Load().connected(true)
	return api.MustParseEventMask("RunPodSandbox", "CreateContainer", "StartContainer", "StopPodSandbox", "RemovePodSandbox"), nil
}

// Synchronize counts running containers that lack the defaults: created
// while the plugin was away (fail-open). It also forgets pods removed while
// the plugin was away: their RemovePodSandbox never reached it. The runtime
// sends no event to a plugin until its Synchronize has returned, so pods
// not in the list have no event in flight.
func (p *plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	defer p.synchronizedOnce.Do(func() { close(p.synchronized) })
	byID := make(map[string]*api.PodSandbox, len(pods))
	for _, pod := range pods {
		byID[pod.GetId()] = pod
	}
	p.records.retain(func(id string) bool { return byID[id] != nil })
	p.held.sync(pods)
	p.running.set(pods, ctrs)
	// After Synchronize returns: the runtime holds its NRI lock for the
	// whole call, so the worker reads and writes files and pods only then.
	p.kickConvergence()
	missing := lackingDefaults(p.current.Load().policy, byID, ctrs)
	p.meter.Load().synchronizedWith(missing)
	if len(missing) > 0 {
		then := "their pods keep what they have (runningPods: keep)"
		if p.runningPods(p.current.Load().cfg) != config.RunningPodsKeep {
			then = "their pods converge now (runningPods: converge)"
		}
		p.log.WithField("containers", len(missing)).Warn("running containers lack the node's sysctl defaults: they were created while the plugin was not registered; " + then)
		for _, c := range missing {
			pod := byID[c.GetPodSandboxId()]
			p.podLog(pod).WithField("container", c.GetName()).Info("lacks the node's sysctl defaults")
		}
	}
	return nil, nil
}

// RunPodSandbox holds the pod's sandbox process (held.go) and, in
// namespace mode, writes the pod's sysctls into its namespaces, before any
// app container exists. In spec mode it starts holding the process,
// looking the pod up and reading its values before the plugin's, while the
// runtime finishes starting it.
func (p *plugin) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	if !p.requests.enter() {
		// Leaving: the connection closes while this waits (leave.go).
		// Whichever plugin answers the pod's first container (this one
		// refuses it) gives the pod what it lacks then.
		p.requests.offerClose(p.requestTimeout())
		return nil
	}
	defer p.requests.done()
	p.running.add(pod)
	rec := p.record(pod)
	applies := !rec.cfg.policy.Empty() && rec.cfg.policy.Excluded(rec.pod) == ""
	if rec.cfg.mode != runtimemode.Namespace {
		// Off the create path: in spec mode only the reads after it go
		// through what is held (prefetch, convergence).
		p.afterAnswer(func() {
			p.held.hold(pod)
			if applies {
				p.prefetch(rec, pod)
			}
		})
		return nil
	}
	p.held.hold(pod) // the writes below go through it
	if !applies {
		return nil
	}
	return answerInTime(ctx, p, func(ctx context.Context) error {
		return p.writePodSandbox(ctx, rec)
	}, func() error {
		// Its first container heals what the pod still lacks.
		p.recordLog(rec).WithField("deadline", p.requestTimeout()).Warn("could not write into the pod's namespaces within the runtime's request deadline: its first container gets them")
		return nil
	})
}

// CreateContainer sets the sysctls on the container's spec in spec mode;
// in namespace mode it writes what the pod's namespaces still lack. In
// both modes it annotates what the container really got.
func (p *plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if !p.requests.enter() {
		p.podLog(pod).WithField("container", ctr.GetName()).Warn("stopping: refusing the container, so that it is retried")
		return nil, nil, errLeaving
	}
	defer p.requests.done()
	// A pod is first seen at RunPodSandbox or Synchronize; this holds it
	// only if neither reached the plugin.
	p.held.hold(pod)
	rec := p.recordForContainer(pod)
	if rec.cfg.policy.Empty() {
		return nil, nil, nil
	}
	d := p.decideInTime(ctx, rec, func(ctx context.Context) containerResult {
		return p.decideContainer(ctx, rec, ctr)
	})
	return p.finish(rec, ctr, d)
}

// StartContainer: the runtime has made the container's task, so runc
// has written what its spec carried into the pod. If that was the
// plugin's values (spec mode), they are in place, and the pod's later
// containers carry none (podRecord.inPlace). A container decided before
// a convergence replaced its pod's record landed the older values over
// the converged ones, however late it started: a pass redoes the pod.
func (p *plugin) StartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if !p.requests.enter() {
		// Leaving: the connection closes while this waits (leave.go).
		p.requests.offerClose(p.requestTimeout())
		return nil
	}
	defer p.requests.done()
	if rec := p.records.find(pod.GetId()); rec != nil && rec.started(ctr.GetId(), time.Now()) {
		p.podLog(pod).WithField("container", ctr.GetName()).Info("a container decided before its pod converged started, with the older values on its spec: converging the pod again")
		p.kickConvergence()
	}
	return nil
}

// StopPodSandbox lets the pod's sandbox process go and leaves the pod out
// of convergence: once stopped, its pid may name any process. The runtime
// sends it after the pod is stopped; the process held since the pod's
// first sight (held.go) guards the time before.
func (p *plugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	if !p.requests.enter() {
		// Leaving: the connection closes while this waits (leave.go).
		p.requests.offerClose(p.requestTimeout())
		return nil
	}
	defer p.requests.done()
	p.held.release(pod.GetId())
	p.running.remove(pod.GetId())
	p.podLog(pod).Info("pod stopped: the plugin writes nothing more into it")
	return nil
}

// RemovePodSandbox drops the pod's record.
func (p *plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	if !p.requests.enter() {
		// Leaving: the connection closes while this waits (leave.go).
		p.requests.offerClose(p.requestTimeout())
		return nil
	}
	defer p.requests.done()
	p.records.forget(pod.GetId())
	p.held.release(pod.GetId())
	p.running.remove(pod.GetId())
	if p.podState != nil {
		if err := p.podState.Remove(pod.GetId()); err != nil {
			p.podLog(pod).WithError(err).Warn("cannot remove the pod's state")
		}
	}
	p.meter.Load().podRemoved(pod.GetId())
	// What the plugin keeps per pod, for the churn benchmark (make
	// bench-churn): it must drop to 0 once every pod is removed.
	if p.log.IsLevelEnabled(logrus.DebugLevel) {
		p.log.WithField("pods", p.records.len()).Debug("pod records")
	}
	return nil
}
