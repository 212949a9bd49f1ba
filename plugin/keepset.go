// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"maps"

	"github.com/nri-sysctl/nri-sysctl/pkg/converge"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
)

// What the plugin sets in a pod at its creation is kept in the pod's
// state (pkg/podstate) as a convergence keeps what it writes: so that
// after a restart the plugin knows its own values from the state, not
// from its containers' annotations, which cannot hold every value whole.
// The handlers only mark the pod (noteSet); the worker writes the file,
// off the create path.

// noteSet marks that the plugin set something in the pod, for the worker
// to keep.
func (p *plugin) noteSet(rec *podRecord) {
	if p.podState == nil {
		return
	}
	p.running.markSet(rec.id)
	select {
	case p.keepKick <- struct{}{}:
	default:
	}
}

// keepSetPods keeps what the plugin set in each pod marked since the
// last time. Only the worker calls it.
func (p *plugin) keepSetPods() {
	for _, id := range p.running.takeSet() {
		if rec := p.records.find(id); rec != nil {
			p.keepSet(rec)
		}
	}
}

// keepSet adds what rec says the plugin set in the pod to the pod's
// state: each key's value set (in spec mode only where the state holds
// none), and its value before when the state holds none and the record
// read one.
func (p *plugin) keepSet(rec *podRecord) {
	held, err := p.podState.Load(rec.id)
	if err != nil {
		p.recordLog(rec).WithError(err).Warn("cannot read what the plugin set in the pod, so not adding to it")
		return
	}
	memory := maps.Clone(held)
	before := rec.valuesBefore()
	spec := rec.cfg.mode != runtimemode.Namespace
	for _, s := range rec.setByPlugin() {
		w := memory[s.Key()]
		if w.HasSet && spec {
			// The state's value is one the plugin wrote or saw in force;
			// a spec's may never land (its container's creation failed),
			// and one that lands is the pod's record's (Landing) until
			// the next pass holds it. Namespace mode's values were
			// written.
			continue
		}
		if v, ok := before[s.Key()]; ok && !w.HasBefore {
			w.Before, w.HasBefore = v, true
		}
		w.Set, w.HasSet = s.Value(), true
		memory[s.Key()] = w
	}
	if maps.EqualFunc(held, memory, func(a, b converge.Written) bool { return a == b }) {
		return
	}
	if err := p.podState.Save(rec.id, memory); err != nil {
		p.recordLog(rec).WithError(err).Warn("cannot keep what the plugin set in the pod")
	}
}
