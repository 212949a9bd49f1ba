package main

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
	cur := p.current.Load()
	p.current.Store(&loaded{cfg: cur.cfg, policy: cur.policy, lookup: p.meter.Load().meterLookups(f)})
}

// setConfig puts cfg in force without the probe or a mode change.
func (p *plugin) setConfig(cfg *config.Config) {
	p.current.Store(&loaded{cfg: cfg, policy: policy.Compile(cfg), lookup: p.current.Load().lookup})
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
