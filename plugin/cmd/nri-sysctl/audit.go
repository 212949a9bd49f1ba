// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/audit"
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/podstate"
	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
	"github.com/nri-sysctl/nri-sysctl/plugin"
)

// auditFlags declares audit's flags; it asks containerd (through CRI, on
// its socket) for the running containers and tells, for each, whether it
// has the node's defaults.
func auditFlags(fs *flag.FlagSet) func([]string, io.Writer, io.Writer) int {
	var containerd plugin.ContainerdFlags
	declareContainerdFlags(fs, &containerd)
	cfgPath := fs.String("config", "", "the plugin's config: without it a container with no nri-sysctl annotation counts as lacking even in an excluded pod")
	read := fs.Bool("read", false, "also read the live values in each pod's namespaces (needs --config and root)")
	stateDir := fs.String("pod-state-dir", podstate.DefaultDir, "with --read: what the plugin set in each pod (its --pod-state-dir); a key another writer changed after it is listed apart, not as lacking")
	timeout := fs.Duration("timeout", time.Minute, "give up after this long")
	return func(_ []string, stdout, stderr io.Writer) int {
		return runAudit(auditArgs{containerd.Address, containerd.Namespace, *cfgPath, *stateDir, *read, *timeout}, stdout, stderr)
	}
}

// auditArgs are audit's flags.
type auditArgs struct {
	address, namespace, cfgPath, stateDir string
	read                                  bool
	timeout                               time.Duration
}

// runAudit tells, for each running container, whether it has the node's
// defaults.
func runAudit(a auditArgs, stdout, stderr io.Writer) int {
	address, namespace, cfgPath, read := a.address, a.namespace, a.cfgPath, a.read
	if read && cfgPath == "" {
		fmt.Fprintln(stderr, "--read needs --config: the values to expect come from the config")
		return audit.Failed
	}
	var cfg *config.Config
	if cfgPath != "" {
		var err error
		if cfg, err = config.Load(cfgPath, nil); err != nil {
			fmt.Fprintln(stderr, err)
			return audit.Failed
		}
	}
	var state *podstate.Store
	if _, err := os.Stat(a.stateDir); read && a.stateDir != "" && err == nil {
		if state, err = podstate.Open(a.stateDir); err != nil {
			fmt.Fprintln(stderr, err)
			return audit.Failed
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	lines, err := audit.Run(ctx, audit.Request{
		Address: address, Namespace: namespace, Config: cfg, Read: read, Warnings: stderr, PodState: state,
		UserNamespaceRefusals: func(cfg *config.Config) policy.UserNamespaceRefusals { return probeUserNamespaceRefusals(cfg, stderr) },
	})
	if err != nil {
		fmt.Fprintf(stderr, "audit: %v\n", err)
		return audit.Failed
	}
	return audit.Print(stdout, lines)
}
