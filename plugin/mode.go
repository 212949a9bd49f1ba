// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/sirupsen/logrus"
)

// mode is the mode in force, with the config in force.
func (p *plugin) mode() runtimemode.Mode { return p.current.Load().mode }

// reportedNRIVersion keeps the NRI version only when the runtime reported
// it: the stub fills in a guess from its own table otherwise, and that
// table stops at containerd 2.2.1 (it calls 2.3 and later v0.11.0).
func reportedNRIVersion(stubVersion, runtimeName, runtimeVersion string) string {
	switch stubVersion {
	case "", api.UnknownVersion, api.DevelVersion:
		return ""
	}
	if inferred, err := api.InferVersionFromRuntime(runtimeName, runtimeVersion); err == nil && inferred == stubVersion {
		return ""
	}
	return stubVersion
}

// chooseMode: the --mode flag, then the config's mode, then the runtime.
// A forced spec mode that would crash the runtime is refused.
func (p *plugin) chooseMode(cfg *config.Config, rt runtimemode.Runtime) (runtimemode.Mode, string, error) {
	mode, why := p.modeOverride, "set by --mode"
	if mode == runtimemode.Auto {
		mode, why = cfg.Mode, "set by the config's mode"
	}
	if mode == runtimemode.Auto {
		mode, why = runtimemode.Decide(rt)
		return mode, why, nil
	}
	return mode, why, runtimemode.RefuseForced(mode, rt)
}

// chosenMode is the mode cfg and the runtime call for. Before Configure
// the runtime is unknown and the mode stays current.
func (p *plugin) chosenMode(cfg *config.Config, current runtimemode.Mode) (runtimemode.Mode, error) {
	rt := p.runtime.Load()
	if rt == nil {
		return current, nil
	}
	mode, why, err := p.chooseMode(cfg, *rt)
	if err != nil {
		return "", err
	}
	if current != mode || !p.modeLogged.Swap(true) {
		p.log.WithFields(logrus.Fields{"runtime": rt.String(), "mode": mode, "reason": why}).Info("mode chosen")
	}
	return mode, nil
}

// applyMode puts in force the mode the config in force and the runtime
// call for (at Configure, when the runtime hands no config).
func (p *plugin) applyMode() error {
	p.applying.Lock()
	defer p.applying.Unlock()
	cur := p.current.Load()
	mode, err := p.chosenMode(cur.cfg, cur.mode)
	if err != nil {
		return err
	}
	next := *cur
	next.mode = mode
	p.current.Store(&next)
	return nil
}
