package main

import (
	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/sirupsen/logrus"
)

func (p *plugin) mode() runtimemode.Mode { return p.applyMode.Load().(runtimemode.Mode) }

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
	if mode == runtimemode.Auto || mode == "" {
		mode, why = runtimemode.Mode(cfg.Mode), "set by the config's mode"
	}
	if mode == runtimemode.Auto || mode == "" {
		mode, why = runtimemode.Decide(rt)
		return mode, why, nil
	}
	return mode, why, runtimemode.RefuseForced(mode, rt)
}

// setMode puts in force the mode cfg and the runtime call for. Before
// Configure the runtime is unknown and nothing changes.
func (p *plugin) setMode(cfg *config.Config) error {
	rt := p.runtime.Load()
	if rt == nil {
		return nil
	}
	mode, why, err := p.chooseMode(cfg, *rt)
	if err != nil {
		return err
	}
	if old := p.mode(); old != mode || !p.modeLogged.Swap(true) {
		p.log.WithFields(logrus.Fields{"runtime": rt.String(), "mode": mode, "reason": why}).Info("mode chosen")
	}
	p.applyMode.Store(mode)
	return nil
}

// writerFor tells who writes the sysctls in a mode: runc inside the pod in
// spec mode, the plugin as host root in namespace mode.
func writerFor(m runtimemode.Mode) sysctl.Writer {
	if m == runtimemode.Spec {
		return sysctl.WriterInPod
	}
	return sysctl.WriterHost
}
