// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nri-sysctl/nri-sysctl/pkg/atomicfile"
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/sirupsen/logrus"
)

// The last good config (--last-good-config PATH) is a copy, kept on the
// node, of the text of the last config the plugin put in force. Under
// Kubernetes a rejected ConfigMap edit stays in the mounted file; without
// the copy, a restart of the plugin's pod (a crash, an eviction, a node
// reboot) would find only the rejected file and refuse to start, and every
// pod on the node would go without its defaults until someone fixed the
// ConfigMap. With it the plugin starts on the copy, says so, and keeps
// watching the file.

// keepAsLastGood writes the text of cfg, just put in force from its file,
// to the last-good path. The text is read again and must hash to what was
// loaded: a file changed meanwhile is not kept (the watch reloads it, and
// that reload keeps it). A failure is logged and changes nothing else: the
// config is in force either way.
func (p *plugin) keepAsLastGood(cfg *config.Config) {
	path := p.lastGoodPath
	if path == "" || cfg.Source == path {
		return
	}
	log := p.log.WithFields(logrus.Fields{"file": cfg.Source, "last_good": path, "sha256": cfg.TextSHA256})
	text, err := config.ReadFile(cfg.Source)
	if err == nil && config.TextSHA256(text) != cfg.TextSHA256 {
		err = errors.New("the file changed since it was loaded")
	}
	if err != nil {
		log.WithError(err).Warn("cannot keep the config as the last good one; the copy on the node stays as it was")
		return
	}
	if kept, err := config.ReadFile(path); err == nil && config.TextSHA256(kept) == cfg.TextSHA256 {
		return
	}
	if err := atomicfile.Write(path, text, 0o600); err != nil {
		log.WithError(err).Warn("cannot keep the config as the last good one; the copy on the node stays as it was")
		return
	}
	log.Info("kept the config in force as the last good config")
}

// startOnLastGood is loadInitialConfig's way out when the config file was
// rejected (missing, unreadable, untrusted or invalid, or refused by
// applyConfig): with a last-good path that holds a config passing the
// same checks, the plugin runs on that one, and the rejection is logged,
// counted as a failed reload and sent as an Event. Otherwise it returns
// the error to refuse to start with: rejected itself without a last-good
// path, else with why the kept config is no use (none kept yet, on a first
// start, or it fails too), and sends that as an Event.
func (p *plugin) startOnLastGood(file string, rejected error) error {
	cfg, err := p.loadLastGood(rejected)
	if err != nil {
		p.events.Warn(reasonConfigRejected, "config rejected at start, refusing to start: "+err.Error())
		return err
	}
	// applyConfig started metrics, if any: count the rejection there.
	p.meter.Load().reloaded(rejected)
	p.log.WithError(rejected).WithFields(logrus.Fields{
		"file":      file,
		"last_good": p.lastGoodPath,
		"sha256":    cfg.TextSHA256,
		"defaults":  len(cfg.Sysctls),
		"rules":     len(cfg.Rules),
	}).Error("config file rejected; running on the last good config kept on the node until the file is fixed")
	p.events.Warn(reasonLastGoodConfig, fmt.Sprintf("config rejected at start, running on the last good config (sha256 %s): %v", config.ShortHash(cfg.TextSHA256), rejected))
	return nil
}

// loadLastGood puts the last good config in force, or says why not.
func (p *plugin) loadLastGood(rejected error) (*config.Config, error) {
	path := p.lastGoodPath
	if path == "" {
		return nil, rejected
	}
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w (no last good config kept in %s yet)", rejected, path)
	}
	cfg, err := p.loadFile(path)
	if err == nil {
		err = p.applyConfig(cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("%w; the last good config cannot be used either: %w", rejected, err)
	}
	return cfg, nil
}

// checkLastGoodConfig refuses a --last-good-config that is relative (the
// plugin's working directory is no place for it) or is the config file.
func checkLastGoodConfig(path, configPath string) error {
	switch {
	case path == "":
		return nil
	case !filepath.IsAbs(path):
		return fmt.Errorf("bad --last-good-config %q: want an absolute path", path)
	case filepath.Clean(path) == filepath.Clean(configPath):
		return fmt.Errorf("bad --last-good-config %q: it is the --config file; want a file of its own, e.g. /var/lib/nri-sysctl/last-good-config.yaml", path)
	}
	return nil
}
