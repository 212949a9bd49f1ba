// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"flag"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/plugin"
)

// The flags several commands share, declared once each so that their
// names, defaults and help agree.

// declareConfig declares --config: the plugin's config file.
func declareConfig(fs *flag.FlagSet, path *string) {
	fs.StringVar(path, "config", config.DefaultPath, "the plugin's config file")
}

// declareSkipKernelCheck declares --skip-kernel-check.
func declareSkipKernelCheck(fs *flag.FlagSet, skip *bool) {
	fs.BoolVar(skip, "skip-kernel-check", false, "do not probe this kernel for the config's keys and values (for a config meant for another kernel, such as an image build's; inheritFromHost then cannot be expanded)")
}

// declareContainerdFlags declares --containerd-address and
// --containerd-namespace, and notes in f which were given once fs is
// parsed (markContainerdFlagsGiven).
func declareContainerdFlags(fs *flag.FlagSet, f *plugin.ContainerdFlags) {
	fs.StringVar(&f.Address, "containerd-address", plugin.DefaultContainerdAddress, "containerd's socket, where pods' own sysctls are looked up (it serves CRI too)")
	fs.StringVar(&f.Namespace, "containerd-namespace", plugin.DefaultContainerdNamespace, "containerd namespace of the CRI pods")
}

// markContainerdFlagsGiven notes which containerd flags were given: a
// given one wins over the config (plugin.ContainerdFlags).
func markContainerdFlagsGiven(fs *flag.FlagSet, f *plugin.ContainerdFlags) {
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "containerd-address":
			f.AddressSet = true
		case "containerd-namespace":
			f.NamespaceSet = true
		}
	})
}
