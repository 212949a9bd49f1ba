// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/sirupsen/logrus"
)

// The failure policy the plugin declares when it registers
// (onMissedDeadline). The runtime reads it once, from the Configure
// reply: a pre-installed plugin's config, which comes in that Configure,
// is in force by then; a reload's change waits for the next registration.

// declareFailurePolicy fills the policy the stub sends in its Configure
// reply from the config in force, and says what the runtime will do with it.
func (p *plugin) declareFailurePolicy(rt runtimemode.Runtime) {
	r := p.stub.Load()
	if r == nil || r.failurePolicy == nil {
		return
	}
	want := onMissedDeadline(p.current.Load().cfg)
	refuse := want == config.OnMissedDeadlineRefuse
	r.failurePolicy.FailRequest, r.failurePolicy.KeepConnected = refuse, refuse
	r.declared.Store(want)
	if !refuse {
		return
	}
	log := p.log.WithField("onMissedDeadline", want)
	switch honours, known := runtimemode.HonoursFailurePolicy(rt); {
	case honours:
		log.Info("declared the failure policy fail_request and keep_connected: a request this plugin does not answer in time fails, and the plugin stays registered")
	case known:
		log.WithField("runtime", rt.String()).Warn("declared the failure policy fail_request and keep_connected, which this runtime's NRI ignores (it honours them from NRI v0.12.4): a request this plugin does not answer in time proceeds without it; required_plugins in the runtime's config fails closed instead")
	default:
		log.WithField("runtime", rt.String()).Warn("declared the failure policy fail_request and keep_connected; cannot tell whether this runtime's NRI honours it (from NRI v0.12.4)")
	}
}

// failurePolicyChanged says when a reload changes onMissedDeadline: the
// runtime keeps what it was told at registration until the next one.
func (p *plugin) failurePolicyChanged(cfg *config.Config) {
	r := p.stub.Load()
	if r == nil {
		return
	}
	declared, ok := r.declared.Load().(string)
	if want := onMissedDeadline(cfg); ok && want != declared {
		p.log.WithFields(logrus.Fields{"onMissedDeadline": want, "in_force": declared}).Warn("onMissedDeadline changes when the plugin next registers with the runtime (a restart of the plugin or of the runtime); the runtime keeps the policy it was given until then")
	}
}

// onMissedDeadline is cfg's setting, the default before any config.
func onMissedDeadline(cfg *config.Config) string {
	if cfg == nil || cfg.OnMissedDeadline == "" {
		return config.OnMissedDeadlineProceed
	}
	return cfg.OnMissedDeadline
}
