// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
)

// The flags' default (not set), the config's values, flags given (set,
// even to the default's value): each wins over what follows it.
func TestResolveContainerd(t *testing.T) {
	defaults := ContainerdFlags{Address: DefaultContainerdAddress, Namespace: DefaultContainerdNamespace}
	fromConfig := &config.Config{ContainerdAddress: "/run/k3s/containerd/containerd.sock", ContainerdNamespace: "other"}
	for _, tc := range []struct {
		name     string
		flags    ContainerdFlags
		cfg      *config.Config
		want     podsysctl.Target
		explicit bool
	}{
		{"defaults", defaults, &config.Config{}, podsysctl.Target{Address: "/run/containerd/containerd.sock", Namespace: "k8s.io"}, false},
		{"config over defaults", defaults, fromConfig, podsysctl.Target{Address: "/run/k3s/containerd/containerd.sock", Namespace: "other"}, true},
		{"flags over config", ContainerdFlags{Address: "/a.sock", Namespace: "ns", AddressSet: true, NamespaceSet: true}, fromConfig, podsysctl.Target{Address: "/a.sock", Namespace: "ns"}, true},
		{"flag given with its default value still wins", ContainerdFlags{Address: DefaultContainerdAddress, Namespace: DefaultContainerdNamespace, AddressSet: true}, fromConfig, podsysctl.Target{Address: "/run/containerd/containerd.sock", Namespace: "other"}, true},
	} {
		if got, explicit := resolveContainerd(tc.flags, tc.cfg); got != tc.want || explicit != tc.explicit {
			t.Errorf("%s: got %+v explicit=%v, want %+v explicit=%v", tc.name, got, explicit, tc.want, tc.explicit)
		}
	}
}
