// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
)

// resolveContainerd picks the containerd socket and namespace: a flag given
// on the command line, then the config's containerdAddress /
// containerdNamespace, then the flag's default. explicit is false when the
// address is only the default.
func resolveContainerd(f ContainerdFlags, cfg *config.Config) (t podsysctl.Target, explicit bool) {
	t = podsysctl.Target{Address: f.Address, Namespace: f.Namespace}
	explicit = f.AddressSet
	if !f.AddressSet && cfg.ContainerdAddress != "" {
		t.Address, explicit = cfg.ContainerdAddress, true
	}
	if !f.NamespaceSet && cfg.ContainerdNamespace != "" {
		t.Namespace = cfg.ContainerdNamespace
	}
	return t, explicit
}

// connectWith returns the function that finds a config's lookup in pool.
func connectWith(pool *podsysctl.Pool, flags ContainerdFlags) func(*config.Config) (podsysctl.Fetcher, error) {
	return func(cfg *config.Config) (podsysctl.Fetcher, error) {
		return pool.Lookup(resolveContainerd(flags, cfg))
	}
}
