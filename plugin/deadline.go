// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/outcome"
)

// errLookupRefused fails a container whose pod could not be looked up, or
// decided for, in time on a node with onLookupError: fail. The runtime
// fails that container and the kubelet retries it; like errLeaving it is
// no error NRI takes as a dead plugin.
var errLookupRefused = errors.New("nri-sysctl: cannot tell this pod's own sysctls in time (onLookupError: fail): container creation refused so that it is retried, not created without the node's sysctl defaults")

// decideInTime answers within the runtime's deadline whatever decide does
// (answerInTime): a decision still running then is answered as
// outcome.TimedOut. With onLookupError: fail, a container whose pod could
// not be looked up or decided for in time is refused instead.
func (p *plugin) decideInTime(ctx context.Context, rec *podRecord, decide func(context.Context) containerResult) containerResult {
	var d containerResult
	if rec.decidesAtOnce() {
		// Nothing left that waits on I/O: the decision is pure and
		// bounded, so it needs no watch (the common case, kept cheap).
		d = decide(ctx)
	} else {
		d = answerInTime(ctx, p, decide, func() containerResult {
			p.recordLog(rec).WithField("deadline", p.requestTimeout()).Warn("no decision within the runtime's request deadline: answering without one")
			return containerResult{outcome: outcome.TimedOut}
		})
	}
	if d.err == nil && d.outcome.Undecided() && rec.cfg.cfg.OnLookupError == config.OnLookupErrorFail {
		p.recordLog(rec).WithField("outcome", d.outcome.String()).Warn("onLookupError: fail, refusing the container so that it is retried")
		d.err = fmt.Errorf("pod %s: %w", rec.name(), errLookupRefused)
	}
	return d
}

// answerInTime runs work within the work deadline (withinDeadline) and
// returns its result, or late()'s should work still run half a margin
// later: the runtime gets an answer before its own deadline by design,
// whatever a step does. work's late result is dropped; what it wrote, it
// recorded (namespace mode), so a pod's next container tells the truth.
func answerInTime[T any](ctx context.Context, p *plugin, work func(context.Context) T, late func() T) T {
	bounded, cancel := p.withinDeadline(ctx)
	defer cancel()
	answerBy, _ := bounded.Deadline()
	done := make(chan T, 1)
	go func() { done <- work(bounded) }()
	timer := time.NewTimer(time.Until(answerBy.Add(p.deadlineMargin() / 2)))
	defer timer.Stop()
	select {
	case v := <-done:
		return v
	case <-timer.C:
		return late()
	}
}
