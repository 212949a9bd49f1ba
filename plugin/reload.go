// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/nsthread"
	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
	"github.com/nri-sysctl/nri-sysctl/pkg/probe"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/sirupsen/logrus"
)

// applyConfig puts a validated config in force whole, or nothing of it:
// the mode it calls for must be one the runtime can take, and its
// containerd must be reachable by a lookup, before the config, what the
// probes found for it, its policy, its lookup and its mode are swapped in
// as one.
func (p *plugin) applyConfig(cfg *config.Config) error {
	return p.applyProbed(cfg, p.probeUserNamespaces(cfg))
}

// applyProbed is applyConfig with the user namespace probe of cfg already
// run, outside the lock, so that a probe at a reload's low priority never
// holds Configure up.
func (p *plugin) applyProbed(cfg *config.Config, probed userNamespaceProbed) error {
	p.applying.Lock()
	defer p.applying.Unlock()
	if err := checkInheritanceExpanded(cfg); err != nil {
		return err
	}
	prev := p.current.Load()
	refused, err := p.userNamespaceRefusals(cfg, probed, prev)
	if err != nil {
		return err
	}
	lookup, err := p.connect(cfg)
	if err != nil {
		return err
	}
	if err := p.serveMetrics(cfg); err != nil {
		return err
	}
	mode, err := p.chosenMode(cfg, prev.mode)
	if err != nil {
		return err
	}
	next := &loaded{cfg: cfg, refused: refused, policy: policy.Compile(cfg, refused), lookup: p.meter.Load().meterLookups(lookup), mode: mode}
	if beforeConfigStore != nil {
		beforeConfigStore()
	}
	p.current.Store(next)
	p.failurePolicyChanged(cfg)
	p.kickConvergence()
	logInheritance(p.log, prev.cfg, cfg)
	logUnboundedProfiles(p.log, cfg)
	return nil
}

// logUnboundedProfiles says at each load what validate warns of: sysctls
// outside Kubernetes' safe set that any pod author can ask for.
func logUnboundedProfiles(log *logrus.Logger, cfg *config.Config) {
	for _, w := range cfg.Warnings() {
		log.WithFields(logrus.Fields{"file": w.File, "line": w.Line, "key": w.Key}).Warn(w.Reason)
	}
}

// beforeConfigStore, when set by a test, runs just before a config is put
// in force.
var beforeConfigStore func()

// userNamespaceRefusals turns the user namespace probe's result for cfg
// into the keys to leave out for such pods. A value a writer is refused
// rejects cfg. Without a result, user-namespace
// pods would get keys the kernel refuses them: the last result is kept if
// it covers every key, or else cfg is rejected.
func (p *plugin) userNamespaceRefusals(cfg *config.Config, probed userNamespaceProbed, prev *loaded) (policy.UserNamespaceRefusals, error) {
	if !probed.ran {
		return nil, nil
	}
	keys, res, err := cfg.AllKeys(), probed.res, probed.err
	var problems config.Problems
	switch {
	case errors.As(err, &problems):
		return nil, problems
	case errors.Is(err, probe.ErrUserNamespacesDisabled):
		p.log.WithError(err).Warn("no pod can have a user namespace, so no key is left out for one")
		return policy.UserNamespaceRefusals{}, nil
	case err != nil:
		if prev.refused == nil || !allIn(keys, prev.cfg.AllKeys()) {
			return nil, fmt.Errorf("cannot tell which sysctls user-namespace pods may set: %w (use --skip-kernel-check to leave the probes out)", err)
		}
		p.log.WithError(err).Warn("cannot tell which sysctls user-namespace pods may set; keeping the previous result (the values for such pods were checked by host root only)")
		return prev.refused, nil
	}
	for w, reasons := range res.Refused {
		for _, k := range slices.Sorted(maps.Keys(reasons)) {
			p.log.WithFields(logrus.Fields{"key": k, "writer": w.String(), "reason": reasons[k].Error()}).Info("user-namespace pods do not get this key (userNamespaceRefused: fail keeps it)")
		}
	}
	return policy.RefusalsOf(res.Refused), nil
}

// userNamespaceProbed is the user namespace probe's result for a config;
// ran is false where there was nothing to probe (no kernel check, no key).
type userNamespaceProbed struct {
	ran bool
	res probe.UserNamespaceResult
	err error
}

// probeUserNamespaces runs the user namespace probe for cfg, when the
// kernel check is on and cfg has keys.
func (p *plugin) probeUserNamespaces(cfg *config.Config) userNamespaceProbed {
	if p.check == nil || len(cfg.AllKeys()) == 0 {
		return userNamespaceProbed{}
	}
	res, err := CheckUserNamespace(cfg, probeUserNamespace)
	return userNamespaceProbed{ran: true, res: res, err: err}
}

// UserNamespaceProbe runs the user namespace probe with values per writer.
type UserNamespaceProbe func(values map[sysctl.Writer]map[string][]string) (probe.UserNamespaceResult, error)

// probeUserNamespace is swapped in tests.
var probeUserNamespace UserNamespaceProbe = probe.UserNamespace

// CheckUserNamespace runs the user namespace probe (run: probe.UserNamespace
// but in tests) with the values cfg
// gives user-namespace pods. It fails with config.Problems when a writer
// is refused one of them, and with the probe's error when it could not run.
func CheckUserNamespace(cfg *config.Config, run UserNamespaceProbe) (probe.UserNamespaceResult, error) {
	res, err := run(policy.UserNamespaceValues(cfg, probeGIDs()))
	if err != nil {
		return res, err
	}
	if problems := policy.UserNamespaceProblems(cfg, probeGIDs(), res.Refused, res.Stored); len(problems) > 0 {
		return res, problems
	}
	return res, nil
}

// probeGIDs is the user namespace probe's gid mapping: the values it
// writes are clamped to it, as a pod's are to its own.
func probeGIDs() []policy.IDMapping {
	containerID, hostID, size := probe.HelperGIDs()
	return []policy.IDMapping{{ContainerID: containerID, HostID: hostID, Size: size}}
}

// allIn tells whether every one of keys is in sorted.
func allIn(keys, sorted []string) bool {
	for _, k := range keys {
		if _, found := slices.BinarySearch(sorted, k); !found {
			return false
		}
	}
	return true
}

// loadInitialConfig reads the config file. A pre-installed plugin may get
// its config from containerd in Configure instead, so a missing file is
// only an error for a plugin started by hand or by systemd. When the file
// is rejected and the plugin starts on its last good config, rejected is
// the digest of the file's text, which the watcher must not try again.
func (p *plugin) loadInitialConfig(path string, preinstalled bool) (rejected string, err error) {
	if preinstalled {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			p.log.WithField("file", path).Info("no config file; waiting for the config from the runtime")
			return "", nil
		}
	}
	// Read before the load: if the file changes in between, the watcher
	// sees one change too many, never one too few.
	before, _ := configDigest(path)
	cfg, err := p.loadFile(path)
	if err == nil {
		err = p.applyConfig(cfg)
	}
	if err != nil {
		if err := p.startOnLastGood(path, err); err != nil {
			return "", err
		}
		// The file stays rejected until it changes.
		return before, nil
	}
	p.log.WithFields(logrus.Fields{"file": path, "defaults": len(cfg.Sysctls), "inherited": len(cfg.Inherited()), "rules": len(cfg.Rules), "profiles": len(cfg.Profiles)}).Info("config loaded")
	p.keepAsLastGood(cfg)
	return "", nil
}

// watchReloads re-reads the config file on SIGHUP. The channel is
// registered before the plugin registers with the runtime, so an early
// SIGHUP is kept for later instead of killing the process.
func (p *plugin) watchReloads(ctx context.Context, path string, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			p.live.reloading(func() { p.reload(path) })
		}
	}
}

// notifyOnSIGHUP starts catching SIGHUP at once, before anything slow.
func notifyOnSIGHUP() (<-chan os.Signal, func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup, func() { signal.Stop(hup) }
}

// loadFile loads the config file, refusing one that anyone but root could
// have written unless told otherwise.
func (p *plugin) loadFile(path string) (*config.Config, error) {
	if p.allowInsecureConfig {
		return config.Load(path, p.check)
	}
	return config.LoadTrusted(path, p.check)
}

// reload re-reads the config file; a bad file, or one whose mode the
// runtime cannot take, is rejected whole and the config in force stays.
func (p *plugin) reload(path string) {
	// Reading and checking the file (the kernel check and the user
	// namespace probe make namespaces) is off every request's path, so it
	// runs at the lowest priority; putting it in force takes the lock
	// Configure needs, so that does not.
	var cfg *config.Config
	var probed userNamespaceProbed
	var err error
	nsthread.Background(func() {
		if cfg, err = p.loadFile(path); err == nil {
			probed = p.probeUserNamespaces(cfg)
		}
	})
	if err == nil {
		err = p.applyProbed(cfg, probed)
	}
	p.meter.Load().reloaded(err)
	if err != nil {
		p.log.WithError(err).WithField("file", path).Error("reload rejected, keeping the config in force")
		p.events.Warn(reasonConfigRejected, fmt.Sprintf("reload rejected: %v (the config in force, sha256 %s, stays)", err, config.ShortHash(p.current.Load().cfg.TextSHA256)))
		return
	}
	reaches := p.reloadReaches(cfg)
	p.log.WithFields(logrus.Fields{"file": path, "defaults": len(cfg.Sysctls), "inherited": len(cfg.Inherited()), "rules": len(cfg.Rules), "profiles": len(cfg.Profiles), "mode": p.mode()}).Info("config reloaded; it applies to " + reaches)
	p.keepAsLastGood(cfg)
	p.events.Normal(reasonConfigReloaded, fmt.Sprintf("config reloaded (sha256 %s): %d default(s), %d rule(s), %d profile(s), for %s", config.ShortHash(cfg.TextSHA256), len(cfg.Sysctls), len(cfg.Rules), len(cfg.Profiles), reaches))
}

// reloadReaches says which pods a config put in force reaches, under the
// runningPods setting in force.
func (p *plugin) reloadReaches(cfg *config.Config) string {
	if p.runningPods(cfg) == config.RunningPodsKeep {
		return "pods created from now on (runningPods: keep)"
	}
	return "pods created from now on, and running pods as they converge (runningPods: converge)"
}
