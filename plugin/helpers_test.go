// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"strings"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
)

// useFetcher makes every config, the one in force and later ones, look
// pods up through f.
func (p *plugin) useFetcher(f podsysctl.Fetcher) {
	p.connect = func(*config.Config) (podsysctl.Fetcher, error) { return f, nil }
	next := *p.current.Load()
	next.lookup = p.meter.Load().meterLookups(f)
	p.current.Store(&next)
}

// setConfig puts cfg in force without the probe or a mode change.
func (p *plugin) setConfig(cfg *config.Config) {
	next := *p.current.Load()
	next.cfg, next.refused, next.policy = cfg, nil, policy.Compile(cfg, nil)
	p.current.Store(&next)
}

// hasRecord tells whether the plugin keeps a record for the pod.
func (p *plugin) hasRecord(podID string) bool {
	p.records.mu.Lock()
	defer p.records.mu.Unlock()
	_, ok := p.records.pods[podID]
	return ok
}

// lackingLogged counts the containers Synchronize logged as lacking the
// defaults: one line names each.
func lackingLogged(log string) int { return strings.Count(log, "lacks the node's sysctl defaults") }

// noSuchPid is the sandbox pid of test pods: above the kernel's
// PID_MAX_LIMIT (4194304), it is never a live process, so a namespace-mode
// record takes no pidfd for it.
const noSuchPid = 4194999
