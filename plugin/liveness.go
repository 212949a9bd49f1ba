// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"fmt"
	"sync/atomic"
	"time"
)

// stuckAfter is how long a config reload, or a lock the NRI handlers
// share, may stay busy before /livez calls the plugin stuck. A reload's
// kernel probes take at most about 10 s (two helper runs of 5 s), so a
// minute is well past anything that still finishes.
const stuckAfter = time.Minute

// liveness tells /livez whether the plugin still works, from what it is
// doing alone: never from containerd or NRI, which are away while
// containerd restarts, when a liveness probe must not kill the plugin.
// Nothing on the container-creation path touches it.
type liveness struct {
	stuckAfter time.Duration
	// reloadingSince is when the running config reload started (Unix
	// nanoseconds), 0 while none runs.
	reloadingSince atomic.Int64
	// lockProbeSince is when the outstanding probe of the handlers' locks
	// started, 0 when none is outstanding.
	lockProbeSince atomic.Int64
}

// reloading runs one config reload, timed for /livez.
func (l *liveness) reloading(reload func()) {
	l.reloadingSince.Store(time.Now().UnixNano())
	defer l.reloadingSince.Store(0)
	reload()
}

// alive: no reload has run for longer than stuckAfter, and the locks the
// NRI handlers take (the one a config is put in force under, the pod
// records') were free within stuckAfter. Each call starts a probe of the
// locks when none is outstanding and reads the last one's progress, so a
// wedged lock shows on the calls after it has been held stuckAfter, and
// leaves at most one goroutine waiting on it.
func (p *plugin) alive() (bool, string) {
	l := &p.live
	now := time.Now()
	if since := l.reloadingSince.Load(); since != 0 {
		if took := now.Sub(time.Unix(0, since)); took > l.stuckAfter {
			return false, fmt.Sprintf("stuck: a config reload has been running for %s", took.Round(time.Second))
		}
	}
	if since := l.lockProbeSince.Load(); since != 0 {
		if waited := now.Sub(time.Unix(0, since)); waited > l.stuckAfter {
			return false, fmt.Sprintf("stuck: the NRI handlers' locks have been held for %s", waited.Round(time.Second))
		}
		return true, "ok"
	}
	if l.lockProbeSince.CompareAndSwap(0, now.UnixNano()) {
		go func() {
			defer l.lockProbeSince.Store(0)
			p.applying.Lock()
			p.applying.Unlock() //nolint:staticcheck // only whether the lock can be taken matters
			p.records.mu.Lock()
			p.records.mu.Unlock() //nolint:staticcheck // as above
		}()
	}
	return true, "ok"
}
