// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package audit tells, for each running container, whether it has the
// node's defaults: from the plugin's annotations, or from the live values
// in its pod's namespaces.
package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/converge"
	"github.com/nri-sysctl/nri-sysctl/pkg/cri"
	"github.com/nri-sysctl/nri-sysctl/pkg/outcome"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/podstate"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
	"github.com/nri-sysctl/nri-sysctl/pkg/probe"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// Exit codes of audit: 1 is kept for "some container lacks the defaults",
// so that a script can tell it from audit not being able to tell.
const (
	AllFine = 0
	Lacking = 1
	Failed  = 2
)

// Request is what to audit.
type Request struct {
	// Address and Namespace are containerd's socket (CRI and its API) and
	// the containerd namespace of its pods.
	Address, Namespace string
	// Config is the plugin's config, or nil: without it a container with
	// no nri-sysctl annotation counts as lacking even in an excluded pod.
	Config *config.Config
	// Read also reads the live values in each pod's namespaces (needs
	// Config, and root).
	Read bool
	// UserNamespaceRefusals finds the keys the kernel refuses in a user
	// namespace; asked only when a listed pod has a user namespace of its
	// own.
	UserNamespaceRefusals func(*config.Config) policy.UserNamespaceRefusals
	// Warnings gets what audit could not read but judged anyway.
	Warnings io.Writer
	// PodState, with Read, is what the plugin set in each pod
	// (runningPods: converge): a key the plugin set whose live value
	// another writer changed is listed apart, not as lacking. nil: none.
	PodState *podstate.Store
}

// Run judges, for each running container, whether it has the node's
// defaults.
func Run(ctx context.Context, r Request) ([]Line, error) {
	if r.Read && r.Config == nil {
		return nil, errors.New("reading live values needs the config: the values to expect come from it")
	}
	listed, err := cri.ListRunning(ctx, r.Address)
	var found []auditContainer
	if err == nil {
		found, err = auditContainers(ctx, listed, r.Config != nil, r.Address, r.Namespace, r.Warnings)
	}
	if err != nil {
		return nil, fmt.Errorf("containerd at %s: %w", r.Address, err)
	}
	var pol *policy.Policy
	if r.Config != nil {
		var refused policy.UserNamespaceRefusals
		if r.UserNamespaceRefusals != nil && slices.ContainsFunc(found, func(c auditContainer) bool { return c.pod.decision.Pod.Own.Has(sysctl.User) }) {
			refused = r.UserNamespaceRefusals(r.Config)
		}
		pol = policy.Compile(r.Config, refused)
	}
	lines := make([]Line, 0, len(found))
	fresh := freshValues{read: probe.Fresh, warnings: r.Warnings}
	for _, c := range found {
		in := auditInput{annotations: c.annotations, policy: pol, decision: c.pod.decision}
		if r.Read {
			in.live = c.pod.liveValues(pol)
			in.state = c.pod.setByPlugin(r.PodState, r.Warnings)
			in.fresh = fresh.of(in.state)
		}
		lines = append(lines, Line{c: c, verdict: judge(in)})
	}
	return lines, nil
}

// auditInput is what audit knows of one running container.
type auditInput struct {
	// annotations of the container's OCI spec, where the plugin's are.
	annotations map[string]string
	// policy is nil without --config.
	policy *policy.Policy
	// decision is the pod as the plugin's decision sees it.
	decision policy.Input
	// live holds --read's values in the pod's namespaces, or why a key
	// could not be read; nil without --read.
	live map[string]podns.Value
	// state is what the plugin last set in the pod, and what was there
	// before its first write, per key; empty without a pod state.
	state map[string]converge.Written
	// fresh holds a fresh pod namespace's values of the keys in state
	// whose value before is unknown (freshValues); nil if not read.
	fresh map[string]string
}

type verdict struct {
	ok  bool
	why string
	// leftToOther lists keys whose live value another writer set after
	// the plugin: the plugin leaves them, so they count as converged.
	leftToOther []string
	// cannotTell: the pod's values could not be read because its process
	// exited meanwhile (the pod is going away, or its pid names another
	// process now); neither ok nor lacking.
	cannotTell bool
}

// judge tells whether a container has the node's defaults. Live values,
// when read, decide: they are what the container sees (a pod healed after
// its first container keeps that container's missing annotation). Else
// the plugin's annotation does, and for a container without one, the
// config: an excluded pod, or one that would get nothing, lacks nothing.
func judge(in auditInput) verdict {
	var d policy.Decision
	if in.policy != nil {
		d = in.policy.Decide(in.decision)
	}
	if in.live != nil && in.policy != nil {
		switch {
		case d.Excluded != "":
			return verdict{ok: true, why: "excluded by " + d.Excluded}
		case len(d.Apply) == 0:
			return verdict{ok: true, why: "nothing to apply"}
		}
		var wrong, gone, other []string
		for _, s := range d.Apply {
			want := s.Value()
			// Read from the host's user namespace: host GIDs.
			if host, err := policy.HostSide(s, in.decision.Pod.Own, in.decision.GIDMappings); err == nil {
				want = host.Value()
			}
			got := in.live[s.Key()]
			switch {
			case errors.Is(got.Err, podns.ErrSandboxExited):
				gone = append(gone, s.Key()+": "+got.Err.Error())
			case got.Err != nil:
				wrong = append(wrong, s.Key()+": cannot read: "+got.Err.Error())
			case sameValue(got.Value, want):
			case neverLanded(in, s.Key(), got.Value):
				wrong = append(wrong, fmt.Sprintf("%s=%s, want %s (a fresh namespace's value: the plugin's never landed; the next convergence writes it)", s.Key(), got.Value, want))
			case in.state[s.Key()].ChangedByOther(got.Value):
				other = append(other, fmt.Sprintf("%s=%s (the plugin set %s)", s.Key(), got.Value, in.state[s.Key()].Set))
			default:
				wrong = append(wrong, fmt.Sprintf("%s=%s, want %s", s.Key(), got.Value, want))
			}
		}
		if len(wrong) > 0 {
			return verdict{ok: false, why: "live values: " + strings.Join(wrong, "; ")}
		}
		if len(gone) > 0 {
			return verdict{cannotTell: true, why: "cannot tell: the pod's process exited while audit read it: " + strings.Join(gone, "; ")}
		}
		if len(other) > 0 {
			return verdict{ok: true, leftToOther: other, why: fmt.Sprintf("live values match (%d key(s)), but for %d %s: %s", len(d.Apply)-len(other), len(other), converge.KeyLeftToOther.Says(), strings.Join(other, "; "))}
		}
		return verdict{ok: true, why: fmt.Sprintf("live values match (%d key(s))", len(d.Apply))}
	}
	if name, annotated := in.annotations[outcome.AnnotationOutcome]; annotated {
		o, known := outcome.Parse(name)
		switch {
		case !known:
			return verdict{ok: false, why: fmt.Sprintf("unknown outcome %q", name)}
		case o.Lacking() != "":
			return verdict{ok: false, why: "outcome " + name + ": " + o.Lacking()}
		}
		return verdict{ok: true, why: "outcome " + name}
	}
	_, injected := in.annotations[outcome.AnnotationInjected]
	_, skipped := in.annotations[outcome.AnnotationSkipped]
	switch {
	case injected || skipped:
		return verdict{ok: true, why: "annotated by an nri-sysctl without outcomes"}
	case in.policy != nil && d.Excluded != "":
		return verdict{ok: true, why: "no annotation; excluded by " + d.Excluded}
	case in.policy != nil && len(d.Apply) == 0:
		return verdict{ok: true, why: "no annotation; nothing to apply"}
	}
	return verdict{ok: false, why: "no nri-sysctl annotation: created while the plugin was not registered"}
}

// setByPlugin is the pod's state, once per pod; a state audit cannot read
// is warned of and counts as none.
func (p *auditPod) setByPlugin(store *podstate.Store, warnings io.Writer) map[string]converge.Written {
	if store == nil || p.id == "" {
		return nil
	}
	if p.state == nil {
		state, err := store.Load(p.id)
		if err != nil {
			fmt.Fprintf(warnings, "warning: pod %s/%s: %v; judging it without what the plugin set\n", p.namespace, p.name, err)
			state = map[string]converge.Written{}
		}
		p.state = state
	}
	return p.state
}

// neverLanded: the plugin's record says it set key with the value before
// unknown (spec mode: the runtime wrote it), and the pod holds a fresh
// namespace's value: the container whose spec carried it failed to be
// created. That is lacking, not another writer's value, as the plugin's
// convergence judges it (converge's backAtFresh), which writes it again.
func neverLanded(in auditInput, key, live string) bool {
	w := in.state[key]
	fresh, known := in.fresh[key]
	return w.HasSet && !w.HasBefore && known && sameValue(live, fresh) && !sameValue(live, w.Set)
}

// freshValues reads the fresh namespace values neverLanded needs, at most
// once per key in an audit: a pod's state names the keys. A read that
// fails is warned of once, and its keys judged without it.
type freshValues struct {
	read     func(names []string) (map[string]string, error)
	warnings io.Writer
	values   map[string]string
	asked    map[string]bool
	warned   bool
}

func (f *freshValues) of(state map[string]converge.Written) map[string]string {
	var names []string
	for key, w := range state {
		if w.HasSet && !w.HasBefore && !f.asked[key] {
			names = append(names, key)
		}
	}
	if len(names) > 0 {
		if f.asked == nil {
			f.asked, f.values = map[string]bool{}, map[string]string{}
		}
		slices.Sort(names)
		for _, name := range names {
			f.asked[name] = true
		}
		values, err := f.read(names)
		if err != nil && !f.warned && f.warnings != nil {
			f.warned = true
			fmt.Fprintf(f.warnings, "warning: %v: a key the plugin set with its value before unknown counts as left to another writer when its value differs\n", err)
		}
		maps.Copy(f.values, values)
	}
	return f.values
}

// sameValue compares sysctl values as the kernel prints them: fields may
// be separated by tabs ("0\t2147483647") where the config has spaces.
func sameValue(a, b string) bool {
	return slices.Equal(strings.Fields(a), strings.Fields(b))
}

// auditPod is one ready pod sandbox.
type auditPod struct {
	id, namespace, name string
	// state is what the plugin set in the pod (setByPlugin), read once.
	state    map[string]converge.Written
	decision policy.Input
	// process is a process in the pod's namespaces (the sandbox's, or else
	// one of its running containers'), with a pidfd taken when audit first
	// saw it and the pod's network namespace it must still be in.
	process podns.Process
	// gone is set when the process had exited already when audit first
	// saw it.
	gone error
}

type auditContainer struct {
	pod         *auditPod
	id, name    string
	annotations map[string]string
}

// Line is one running container and its verdict.
type Line struct {
	c       auditContainer
	verdict verdict
}

// auditContainers gives each listed container its pod as the decision sees
// it. With lookups, each pod's own sysctls are read from containerd as the
// plugin reads them.
func auditContainers(ctx context.Context, found []cri.Container, lookups bool, address, namespace string, stderr io.Writer) ([]auditContainer, error) {
	var lookup *podsysctl.Containerd
	if lookups {
		var err error
		if lookup, err = podsysctl.NewContainerd(address, namespace, 0); err != nil {
			return nil, err
		}
		defer lookup.Close()
	}
	pods := map[*cri.Pod]*auditPod{}
	out := make([]auditContainer, 0, len(found))
	for _, c := range found {
		pod := pods[c.Pod]
		if pod == nil {
			pod = &auditPod{id: c.Pod.ID, namespace: c.Pod.Namespace, name: c.Pod.Name, process: podns.Process{Pid: int(c.Pod.Pid), NetPath: c.Pod.NetNSPath}}
			if pod.process.Pid > 0 {
				// Taken now, closed when audit exits: a pid that is
				// another process by the time audit reads is caught.
				fd, err := podns.OpenPidfd(pod.process.Pid)
				switch {
				case err == nil:
					pod.process.Pidfd = fd
				case errors.Is(err, podns.ErrSandboxExited):
					pod.gone = err
				}
			}
			pod.decision.Pod = policy.Pod{Namespace: c.Pod.Namespace, Name: c.Pod.Name, Labels: c.Pod.Labels, Annotations: c.Pod.Annotations, RuntimeHandler: c.Pod.RuntimeHandler, Own: c.Pod.Own}
			if lookup != nil {
				own, err := lookup.Fetch(ctx, c.Pod.ID)
				if err != nil {
					fmt.Fprintf(stderr, "warning: pod %s/%s: cannot read its own sysctls (%v); judging it as if it set none\n", pod.namespace, pod.name, err)
				}
				pod.decision.PodOwn, pod.decision.GIDMappings = own.Own, own.GIDMappings
			}
			pods[c.Pod] = pod
		}
		out = append(out, auditContainer{pod: pod, id: c.ID, name: c.Name, annotations: c.Annotations})
	}
	return out, nil
}

// liveValues reads, once per pod, the values of the keys the decision
// gives it, inside the pod's namespaces.
func (p *auditPod) liveValues(pol *policy.Policy) map[string]podns.Value {
	d := pol.Decide(p.decision)
	keys := make([]string, len(d.Apply))
	for i, s := range d.Apply {
		keys[i] = s.Key()
	}
	if p.process.Pid == 0 {
		out := make(map[string]podns.Value, len(keys))
		for _, k := range keys {
			out[k] = podns.Value{Err: errors.New("no process of the pod found")}
		}
		return out
	}
	if p.gone != nil {
		out := make(map[string]podns.Value, len(keys))
		for _, k := range keys {
			out[k] = podns.Value{Err: p.gone}
		}
		return out
	}
	return podns.Read(podns.PidTarget(p.process, p.decision.Pod.Own.Has), keys)
}

// Print prints one line per container, then the lacking ones again
// in a summary, and returns the exit code: 1 when any container lacks the
// defaults, else 2 when audit could not tell for some (their pod's
// process exited meanwhile), else 0.
func Print(w io.Writer, lines []Line) int {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tPOD\tCONTAINER\tID\tWHY")
	var lacking, unknown, other []Line
	for _, l := range lines {
		status := "ok"
		switch {
		case l.verdict.cannotTell:
			status = "UNKNOWN"
			unknown = append(unknown, l)
		case !l.verdict.ok:
			status = "LACKING"
			lacking = append(lacking, l)
		case len(l.verdict.leftToOther) > 0:
			status = "ok*"
			other = append(other, l)
		}
		fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%s\t%s\n", status, l.c.pod.namespace, l.c.pod.name, l.c.name, l.c.id, l.verdict.why)
	}
	tw.Flush()
	if len(unknown) > 0 {
		fmt.Fprintf(w, "cannot tell for %d of %d running container(s): their pod's process exited while audit read it (run audit again):\n", len(unknown), len(lines))
		for _, l := range unknown {
			fmt.Fprintf(w, "  %s/%s container %s (%s)\n", l.c.pod.namespace, l.c.pod.name, l.c.name, l.c.id)
		}
	}
	if len(other) > 0 {
		fmt.Fprintf(w, "keys %s (ok*: the plugin does not overwrite a value set after its own):\n", converge.KeyLeftToOther.Says())
		for _, l := range other {
			fmt.Fprintf(w, "  %s/%s container %s (%s): %s\n", l.c.pod.namespace, l.c.pod.name, l.c.name, l.c.id, strings.Join(l.verdict.leftToOther, "; "))
		}
	}
	switch {
	case len(lacking) > 0:
		fmt.Fprintf(w, "%d of %d running container(s) lack the node's defaults:\n", len(lacking), len(lines))
		for _, l := range lacking {
			fmt.Fprintf(w, "  %s/%s container %s (%s)\n", l.c.pod.namespace, l.c.pod.name, l.c.name, l.c.id)
		}
		return Lacking
	case len(unknown) > 0:
		return Failed
	}
	fmt.Fprintf(w, "all %d running container(s) have the node's defaults\n", len(lines))
	return AllFine
}
