// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/outcome"
	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/sirupsen/logrus"
)

// containerResult is what CreateContainer found for one container: finish turns it
// into the annotations, the counts and the log line, so the three agree.
type containerResult struct {
	outcome outcome.Outcome
	// excludedBy names the exclusion criterion (outcome.Excluded).
	excludedBy string
	// applied is what the container really has; onSpec is set in spec
	// mode, where the plugin puts applied on the container's spec.
	applied []sysctl.Sysctl
	onSpec  bool
	// skipped holds the keys it does not get, write failures included.
	skipped []policy.Skipped
	// err fails the request (onError: fail), with no annotation.
	err error
}

// finish annotates the container with its outcome, counts it and logs it.
func (p *plugin) finish(rec *podRecord, ctr *api.Container, d containerResult) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	m := p.meter.Load()
	if d.err != nil {
		m.containerOutcome(d.outcome)
		return nil, nil, d.err
	}
	adj := &api.ContainerAdjustment{}
	if d.onSpec {
		for _, s := range d.applied {
			adj.SetLinuxSysctl(s.Key(), s.Value())
		}
	}
	if len(d.applied) > 0 {
		adj.AddAnnotation(outcome.AnnotationInjected, formatApplied(d.applied))
	}
	skipped := formatSkipped(d.skipped)
	if skipped != "" {
		adj.AddAnnotation(outcome.AnnotationSkipped, skipped)
	}
	adj.AddAnnotation(outcome.AnnotationOutcome, d.outcome.String())
	if p.log.IsLevelEnabled(logrus.DebugLevel) { // the fields allocate
		p.logDecision(rec, ctr, d, skipped)
	}
	// Only a container that was decided for counts its keys: an excluded
	// one, or one whose pod could not be looked up, was given none.
	if d.outcome.Decided() {
		m.decided(rec.id, d.outcome, d.applied, d.skipped)
	} else {
		m.containerOutcome(d.outcome)
	}
	return adj, nil, nil
}

// logDecision logs, at debug level, what a container was given and why.
func (p *plugin) logDecision(rec *podRecord, ctr *api.Container, d containerResult, skipped string) {
	log := p.recordLog(rec).WithField("container", ctr.GetName())
	switch {
	case d.outcome.Decided():
		log.WithFields(logrus.Fields{"applied": formatApplied(d.applied), "skipped": skipped, "outcome": d.outcome.String()}).Debug("decision")
		logSkippedKeys(log, d.skipped)
	case d.excludedBy != "":
		log.WithFields(logrus.Fields{"outcome": d.outcome.String(), "reason": d.excludedBy}).Debug("decision")
	}
	// An undecided one: ownSysctls or decideInTime logged why.
}

// logSkippedKeys logs, at debug level, one line per key a container did not
// get, with the key and the reason as fields, so that a log query on
// key=... finds them (the decision line holds them all in one field).
func logSkippedKeys(log *logrus.Entry, skipped []policy.Skipped) {
	for _, s := range skipped {
		log.WithFields(logrus.Fields{"key": s.Key, "value": s.Value, "reason": s.Reason, "reason_code": s.Code.Label()}).Debug("sysctl skipped")
	}
}

// maxAnnotationBytes bounds each annotation the plugin sets, whatever a
// pod or a config puts in it; a cut one ends in cutMarker.
const maxAnnotationBytes = 4096

// cutMarker ends an annotation cut at maxAnnotationBytes, with the count of
// entries left out.
const cutMarker = " ... (%d more, cut at %d bytes)"

// cutMarkerPattern matches cutMarker at the end of a text.
var cutMarkerPattern = regexp.MustCompile(strings.ReplaceAll(regexp.QuoteMeta(cutMarker), "%d", `[0-9]+`) + `$`)

// parseApplied reads what formatApplied wrote, as a plugin that restarted
// finds it on a container: "key=value,key=value", where a value may hold
// commas itself (a list: a part that does not start with a key and "="
// goes on the value before it), and a cut text ends in cutMarker after
// its last whole entry (the keys cut off are not in it).
func parseApplied(text string) map[string]string {
	text = cutMarkerPattern.ReplaceAllString(text, "")
	out := map[string]string{}
	key := ""
	for _, part := range strings.Split(text, ",") {
		if k, v, ok := strings.Cut(part, "="); ok && sysctl.ValidateName(k) == nil && sysctl.ValidateNamespaced(k) == nil {
			key, out[k] = k, v
			continue
		}
		if key != "" {
			out[key] += "," + part
		}
	}
	return out
}

func formatApplied(list []sysctl.Sysctl) string {
	parts := make([]string, len(list))
	for i, s := range list {
		parts[i] = s.Key() + "=" + s.Value()
	}
	return joinBounded(parts, ",", maxAnnotationBytes)
}

func formatSkipped(list []policy.Skipped) string {
	parts := make([]string, len(list))
	for i, s := range list {
		parts[i] = s.Key + " (" + s.Reason + ")"
	}
	return joinBounded(parts, "; ", maxAnnotationBytes)
}

// joinBounded joins the parts, or when they do not fit in most bytes as
// many whole parts as fit beside the cut marker, which says how many it
// left out. most must leave room for the marker (maxAnnotationBytes does).
func joinBounded(parts []string, sep string, most int) string {
	total := max(0, len(parts)-1) * len(sep)
	for _, part := range parts {
		total += len(part)
	}
	if total <= most {
		return strings.Join(parts, sep)
	}
	room := most - len(fmt.Sprintf(cutMarker, len(parts), most))
	var b strings.Builder
	for i, part := range parts {
		need := len(part)
		if i > 0 {
			need += len(sep)
		}
		if b.Len()+need > room {
			fmt.Fprintf(&b, cutMarker, len(parts)-i, most)
			return b.String()
		}
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(part)
	}
	return b.String()
}

// lackingDefaults lists running containers the plugin never decided for
// (no outcome annotation, nor the older injected/skipped ones) in pods that
// are not excluded and would get something.
func lackingDefaults(pol *policy.Policy, pods map[string]*api.PodSandbox, ctrs []*api.Container) []*api.Container {
	if pol.Empty() {
		return nil
	}
	var out []*api.Container
	for _, c := range ctrs {
		pod := pods[c.GetPodSandboxId()]
		if pod == nil || c.GetState() != api.ContainerState_CONTAINER_RUNNING {
			continue
		}
		ann := c.GetAnnotations()
		if _, ok := ann[outcome.AnnotationOutcome]; ok {
			continue
		}
		if _, ok := ann[outcome.AnnotationInjected]; ok {
			continue
		}
		if _, ok := ann[outcome.AnnotationSkipped]; ok {
			continue
		}
		// Without the pod's own sysctls (not looked up here) this is an
		// upper bound: a pod that sets every key itself lacks nothing.
		info, _ := readSandbox(pod, false)
		if d := pol.Decide(policy.Input{Pod: info}); d.Excluded == "" && len(d.Apply) > 0 {
			out = append(out, c)
		}
	}
	return out
}
