// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/probe"
	"github.com/nri-sysctl/nri-sysctl/plugin"
)

// validateFlags declares validate's flags.
func validateFlags(fs *flag.FlagSet) func([]string, io.Writer, io.Writer) int {
	var path string
	var skip bool
	declareConfig(fs, &path)
	declareSkipKernelCheck(fs, &skip)
	return func(_ []string, stdout, stderr io.Writer) int { return runValidate(path, skip, stdout, stderr) }
}

// checkedConfig is a config as validate checks it, and what the user
// namespace probe found for it.
type checkedConfig struct {
	cfg *config.Config
	// userNS is the probe's result; probed is false when it did not run
	// (--skip-kernel-check) or failed.
	userNS probe.UserNamespaceResult
	probed bool
}

// loadChecked loads a config with every check the plugin makes at start:
// the kernel probe unless skip, then the user namespace probe. A probe
// that cannot run is a warning on stderr, not a rejection.
func loadChecked(path string, skip bool, stderr io.Writer) (checkedConfig, error) {
	cfg, err := config.Load(path, probe.KernelCheck(skip))
	if err != nil {
		return checkedConfig{}, err
	}
	c := checkedConfig{cfg: cfg}
	switch {
	case skip:
	case len(cfg.AllKeys()) == 0:
		c.probed = true // nothing to probe
	default:
		// What the plugin checks at start, for user-namespace pods.
		res, uerr := plugin.CheckUserNamespace(cfg, probeUserNamespace)
		var problems config.Problems
		if errors.As(uerr, &problems) {
			return checkedConfig{}, problems
		} else if uerr != nil {
			fmt.Fprintf(stderr, "warning: cannot tell which values user-namespace pods may be given: %v\n", uerr)
		} else {
			c.userNS, c.probed = res, true
		}
	}
	return c, nil
}

func runValidate(path string, skip bool, stdout, stderr io.Writer) int {
	checked, err := loadChecked(path, skip, stderr)
	cfg := checked.cfg
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: valid (%d default(s), %d rule(s), %d profile(s))\n", path, len(cfg.Sysctls), len(cfg.Rules), len(cfg.Profiles))
	for _, e := range cfg.KeptInAnotherForm() {
		fmt.Fprintf(stdout, "%s:%d: %s: the kernel keeps %q as %q; pods get %s\n", path, e.Line, e.Key, e.Written, e.Value, e.Value)
	}
	printInheritance(stdout, cfg)
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(stderr, "warning: %v\n", w)
	}
	return 0
}

// printInheritance shows validate's reader what inheritFromHost expands to
// on this machine, one key a line.
func printInheritance(w io.Writer, cfg *config.Config) {
	if len(cfg.InheritFromHost) == 0 {
		return
	}
	if !cfg.InheritExpanded {
		fmt.Fprintf(w, "inheritFromHost: %d entry(ies) not expanded: without the kernel probe (--skip-kernel-check) there is no telling which of this machine's sysctls a pod can be given; the plugin expands them on the node when it loads the config\n", len(cfg.InheritFromHost))
		return
	}
	for _, e := range cfg.Inherited() {
		fmt.Fprintf(w, "%s %s (inherited from the host, entry %s)\n", e.Key, e.Value, e.Pattern)
	}
}
