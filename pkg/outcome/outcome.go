// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package outcome names what the plugin did for one container: the
// annotations it records on the container, and the one table of outcomes
// that the outcome annotation, the metric's label, the logs and audit's
// verdict all read.
package outcome

// Annotations recorded on each container the plugin decides for, so that
// `crictl inspect` shows what it did, and so that a restarted plugin (and
// audit) can tell which running containers it never saw.
const (
	AnnotationInjected = "nri-sysctl.io/injected"
	AnnotationSkipped  = "nri-sysctl.io/skipped"
	AnnotationOutcome  = "nri-sysctl.io/outcome"
)

// Outcome is what one container got.
type Outcome uint8

const (
	Applied Outcome = iota
	NothingToApply
	Excluded
	LookupFailed
	WriteFailed
	TimedOut

	// Count is the number of outcomes; each is below it.
	Count = iota
)

var table = [Count]struct {
	// name is the annotation's value and the metric's label.
	name string
	// lacking: the container lacks the defaults, for audit's reason why.
	lacking string
	// decided: the plugin decided for the container, so its keys are
	// counted and its decision logged.
	decided bool
	// heals: the pod's namespaces now hold what the config gives it.
	heals bool
	// undecided: no decision could be had (the pod's lookup failed or ran
	// out of time), which onLookupError may refuse.
	undecided bool
}{
	Applied:        {name: "applied", decided: true, heals: true},
	NothingToApply: {name: "nothing_to_apply", decided: true, heals: true},
	Excluded:       {name: "excluded"},
	LookupFailed:   {name: "lookup_failed", lacking: "the plugin could not read the pod's own sysctls and set nothing", undecided: true},
	WriteFailed:    {name: "write_failed", lacking: "some sysctls could not be written into the pod's namespaces", decided: true},
	TimedOut:       {name: "timed_out", lacking: "the plugin could not decide within the runtime's deadline and set nothing", undecided: true},
}

// String is the annotation's value and the metric's label.
func (o Outcome) String() string { return table[o].name }

// Lacking says why a container with this outcome lacks the node's
// defaults; "" when it does not.
func (o Outcome) Lacking() string { return table[o].lacking }

// Decided tells whether the plugin decided for the container: its keys are
// counted and its decision logged.
func (o Outcome) Decided() bool { return table[o].decided }

// Heals tells whether the pod's namespaces now hold what the config gives
// it, so that it no longer lacks the defaults.
func (o Outcome) Heals() bool { return table[o].heals }

// Undecided tells whether no decision could be had (lookup failed, or out
// of time): onLookupError applies.
func (o Outcome) Undecided() bool { return table[o].undecided }

// Parse reads an outcome annotation; ok is false for a value no outcome
// has.
func Parse(name string) (o Outcome, ok bool) {
	for o := range Outcome(Count) {
		if table[o].name == name {
			return o, true
		}
	}
	return 0, false
}
