// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package converge decides, key by key, how one running pod is brought to
// the config in force: what the plugin writes, what it puts back, and what
// it leaves to another writer. It is the pure part of converging running
// pods: reading and writing the pod's namespaces, and keeping
// what the plugin wrote across its restarts, are the caller's.
//
// The rule that shapes it: never fight another writer. A live value that
// is neither what the plugin last set nor what the pod had before the
// plugin's first write was set by someone else (a privileged container, an
// operator by hand), and stays.
package converge

import (
	"sort"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// Written is what the plugin remembers of one key in one pod: the value it
// last set there, and the value the pod had before its first write. Either
// may be unknown: a spec-mode container's value was written by the runtime
// from the plugin's spec (Set known from the pod's annotation, Before not).
type Written struct {
	Set       string
	HasSet    bool
	Before    string
	HasBefore bool
}

// Key is what is known of one sysctl in one running pod.
type Key struct {
	Name string
	// Want is the value a pod created now with the same attributes would
	// get; Wanted is false when the plugin no longer manages the key for
	// this pod (it left the config, or the pod left its rule, its profile
	// or the plugin's scope).
	Want   string
	Wanted bool
	// Live is the value read in the pod's namespace.
	Live string
	// Written is the plugin's memory of the key in this pod.
	Written Written
	// PodOwn: the pod sets the key itself (securityContext.sysctls).
	PodOwn bool
	// Writable: the writer can set the key in this pod; false for a
	// user-namespace pod's IPC and user.* keys, which the host-side writer
	// cannot reach.
	Writable bool
	// Landing: values the plugin put on the specs of the pod's containers
	// decided before its last write, which runc may have written since, as
	// it started them. They are the plugin's own, not another writer's.
	Landing []string
	// StillLanding: such a container may also start after this pass.
	StillLanding bool
	// Fresh is the key's value in a namespace the plugin creates fresh:
	// what a key goes back to when Before is unknown, and what an
	// untouched pod holds before the plugin's first write. A
	// per-interface key's is its stand-in's (sysctl.ProbeName). HasFresh
	// is false for keys a fresh namespace does not have.
	Fresh    string
	HasFresh bool
	// Runtime is the value the runtime itself gave the pod at its
	// creation (containerd's ip_unprivileged_port_start=0, in the
	// sandbox's spec but not the pod's config): not another writer's.
	Runtime    string
	HasRuntime bool
}

// Action is what happens to one key.
type Action int

const (
	// Keep: nothing to write; the key is converged, or not the plugin's.
	Keep Action = iota
	// Write: set Step.Value, the value the config gives.
	Write
	// Restore: put back Step.Value, the value before the plugin's first
	// write (or a fresh namespace's), then forget the key.
	Restore
	// LeaveToOther: another writer changed the key since the plugin set
	// it; leave it, and say so.
	LeaveToOther
	// CannotConverge: the writer cannot set the key in this pod, or cannot
	// tell what to put back; say so once, and do not try again.
	CannotConverge
)

var actionNames = [...]string{Keep: "keep", Write: "write", Restore: "restore", LeaveToOther: "leave to another writer", CannotConverge: "cannot converge"}

func (a Action) String() string { return actionNames[a] }

// Result is what an action, or a failed write, did to the key:
// ok is false for Keep, which does nothing.
func (a Action) Result() (r KeyResult, ok bool) {
	switch a {
	case Write:
		return KeyWritten, true
	case Restore:
		return KeyRestored, true
	case LeaveToOther:
		return KeyLeftToOther, true
	case CannotConverge:
		return KeyCannotConverge, true
	}
	return 0, false
}

// KeyResult is what a convergence did with one key of a running pod: the
// one table the metric nri_sysctl_converge_keys_total, the plugin's log
// and audit name them from.
type KeyResult uint8

const (
	KeyWritten KeyResult = iota
	KeyRestored
	KeyLeftToOther
	KeyCannotConverge
	KeyFailed

	// KeyResultCount is the number of results; each is below it.
	KeyResultCount = iota
)

var keyResults = [KeyResultCount]struct {
	// label is the metric's label value.
	label string
	// says is what the log and audit say of the key.
	says string
}{
	KeyWritten:        {label: "written", says: "set to the config's value"},
	KeyRestored:       {label: "restored", says: "put back to its value before the plugin's first write"},
	KeyLeftToOther:    {label: "left_to_other", says: "left to another writer"},
	KeyCannotConverge: {label: "cannot_converge", says: "cannot converge"},
	KeyFailed:         {label: "failed", says: "cannot converge the key in the running pod; trying again at the next convergence"},
}

// String is the metric's label value.
func (r KeyResult) String() string { return keyResults[r].label }

// Says is what the log and audit say of a key with this result.
func (r KeyResult) Says() string { return keyResults[r].says }

// Step is the decision for one key.
type Step struct {
	Key    string
	Action Action
	// Value is what Write or Restore writes.
	Value string
	// Reason says why, for logs, audit and explain.
	Reason string
	// Remember is the plugin's memory of the key once the step is done;
	// Forget: the plugin no longer holds anything of the key.
	Remember Written
	Forget   bool
}

// Plan decides each key, sorted by name.
func Plan(keys []Key) []Step {
	steps := make([]Step, 0, len(keys))
	for _, k := range keys {
		steps = append(steps, decide(k))
	}
	sort.Slice(steps, func(i, j int) bool { return steps[i].Key < steps[j].Key })
	return steps
}

// same compares values as the kernel prints them: fields split by any
// white space.
func same(a, b string) bool { return sysctl.Fold(a) == sysctl.Fold(b) }

func decide(k Key) Step {
	switch {
	case k.PodOwn:
		return keep(k, "the pod sets it itself", k.Written)
	case !k.Wanted:
		return giveBack(k)
	default:
		return bringTo(k)
	}
}

// bringTo brings a key the config gives to its value.
func bringTo(k Key) Step {
	w := k.Written
	switch {
	case same(k.Live, k.Want):
		// In force, whoever wrote it: the plugin holds it from now on, so
		// that a later value reaches it.
		w.Set, w.HasSet = k.Want, true
		return keep(k, "converged", w)
	case changedByOther(k):
		return Step{Key: k.Name, Action: LeaveToOther, Reason: "set to " + quote(k.Live) + " by another writer since the plugin set " + quote(w.Set), Remember: w}
	case !k.Writable:
		return Step{Key: k.Name, Action: CannotConverge, Reason: "the writer cannot set it in this pod's namespace", Remember: w}
	}
	if k.FirstWrite() {
		// The plugin's first write into the pod: only over a value nobody
		// set, which is then what goes back.
		if s, other := setBeforeThePlugin(k); other {
			return s
		}
		if !landed(k) {
			w.Before, w.HasBefore = k.Live, true
		}
	}
	w.Set, w.HasSet = k.Want, true
	return Step{Key: k.Name, Action: Write, Value: k.Want, Reason: quote(k.Live) + " -> " + quote(k.Want), Remember: w}
}

// setBeforeThePlugin decides a key the plugin has never set in the pod
// whose live value is not the one wanted: a value that is neither a fresh
// namespace's, nor the runtime's own, nor one of the plugin's landing,
// was set by someone else (a privileged init container, an operator by
// hand) before the plugin's first write, and stays, as a later one would.
// other is false when the plugin may write.
func setBeforeThePlugin(k Key) (s Step, other bool) {
	switch {
	case landed(k), k.HasFresh && same(k.Live, k.Fresh), k.HasRuntime && same(k.Live, k.Runtime):
		return Step{}, false
	case !k.HasFresh:
		return Step{Key: k.Name, Action: CannotConverge, Reason: "cannot tell whether another writer set " + quote(k.Live) + ": a fresh namespace's value is unknown"}, true
	case sysctl.CopiedFromHost(k.Name):
		// Not told apart from another writer's: the pod took the host's
		// value when it was made, and the host's may have changed since.
		// The plugin leaves it, as it leaves any value it did not set.
		return Step{Key: k.Name, Action: LeaveToOther, Reason: "at " + quote(k.Live) + ", not a fresh namespace's " + quote(k.Fresh) + ": set by another writer, or the host's value when the pod was made"}, true
	default:
		return Step{Key: k.Name, Action: LeaveToOther, Reason: "set to " + quote(k.Live) + " by another writer before the plugin's first write (a fresh namespace's is " + quote(k.Fresh) + ")"}, true
	}
}

// landed: the live value is one the plugin put on a container's spec.
func landed(k Key) bool {
	for _, v := range k.Landing {
		if same(k.Live, v) {
			return true
		}
	}
	return false
}

// giveBack puts back a key the plugin no longer manages, if it set it and
// nobody changed it since.
func giveBack(k Key) Step {
	w := k.Written
	switch {
	case !w.HasSet:
		return keep(k, "not the plugin's", w)
	case w.HasBefore && same(k.Live, w.Before):
		return forgetOnceLanded(k, Step{Key: k.Name, Action: Keep, Reason: "already back to " + quote(w.Before)}, w.Before)
	case backAtFresh(k):
		return forgetOnceLanded(k, Step{Key: k.Name, Action: Keep, Reason: "already back to " + quote(k.Fresh) + ", a fresh namespace's value"}, k.Fresh)
	case changedByOther(k):
		return Step{Key: k.Name, Action: LeaveToOther, Reason: "set to " + quote(k.Live) + " by another writer since the plugin set " + quote(w.Set), Forget: true}
	case !k.Writable:
		return Step{Key: k.Name, Action: CannotConverge, Reason: "no longer managed, and the writer cannot put it back in this pod's namespace", Remember: w}
	case w.HasBefore:
		return forgetOnceLanded(k, Step{Key: k.Name, Action: Restore, Value: w.Before, Reason: "no longer managed: back to " + quote(w.Before) + ", its value before the plugin's first write"}, w.Before)
	case k.HasFresh:
		return forgetOnceLanded(k, Step{Key: k.Name, Action: Restore, Value: k.Fresh, Reason: "no longer managed: back to " + quote(k.Fresh) + ", a fresh namespace's value (the value before the plugin's is unknown)"}, k.Fresh)
	default:
		return Step{Key: k.Name, Action: CannotConverge, Reason: "no longer managed, and neither its value before the plugin's nor a fresh namespace's is known", Remember: w}
	}
}

// forgetOnceLanded ends the plugin's memory of a key put back to back,
// unless a container's spec may still land the plugin's value
// (StillLanding): then the plugin keeps the key, with back as its value
// before, so that the late value is put back too.
func forgetOnceLanded(k Key, s Step, back string) Step {
	if !k.StillLanding {
		s.Forget = true
		return s
	}
	s.Remember = Written{Set: k.Written.Set, HasSet: true, Before: back, HasBefore: true}
	return s
}

// changedByOther: the plugin set the key, and the live value is neither
// what it set, nor what was there before its first write (a fresh
// namespace's value where that is unknown), nor a value of its own that a
// container's spec landed late.
func changedByOther(k Key) bool {
	return !landed(k) && !backAtFresh(k) && k.Written.ChangedByOther(k.Live)
}

// backAtFresh: the value before the plugin's is unknown (a spec-mode pod,
// whose runtime wrote the plugin's value) and the live value is a fresh
// namespace's, which stands for it. It is also what a pod holds when the
// plugin's spec never landed: the plugin answered CreateContainer, and the
// container's creation then failed (containerd restarted, a validator or
// runc refused it), so its record says it set a value nobody wrote. That
// is not another writer's value (make soak found such a pod left bare).
func backAtFresh(k Key) bool {
	return !k.Written.HasBefore && k.HasFresh && same(k.Live, k.Fresh)
}

// NeedsFresh tells whether deciding k may read a fresh namespace's value:
// the plugin's first write (to tell an untouched value from another
// writer's), or the plugin set the key with its value before unknown, and
// either the key goes back or its live value is neither the plugin's nor
// the one wanted. The caller reads fresh values only for these keys, after
// their live ones.
func NeedsFresh(k Key) bool {
	w := k.Written
	switch {
	case k.PodOwn || w.HasBefore:
		return false
	case k.FirstWrite():
		return !same(k.Live, k.Want)
	case !w.HasSet:
		return false
	}
	return !k.Wanted || (!same(k.Live, k.Want) && !same(k.Live, w.Set))
}

// FirstWrite tells whether the config gives the pod k and the plugin has
// never set it there: its live value must be told from another writer's
// before the plugin writes.
func (k Key) FirstWrite() bool {
	return k.Wanted && !k.PodOwn && !k.Written.HasSet && !k.Written.HasBefore
}

// ChangedByOther tells whether live was set by another writer: the plugin
// set the key, and live is neither what it set nor what was there before
// its first write. audit reads live values by the same rule.
func (w Written) ChangedByOther(live string) bool {
	backBefore := w.HasBefore && same(live, w.Before)
	return w.HasSet && !same(live, w.Set) && !backBefore
}

func keep(k Key, reason string, w Written) Step {
	return Step{Key: k.Name, Action: Keep, Reason: reason, Remember: w}
}

func quote(v string) string { return `"` + sysctl.Fold(v) + `"` }
