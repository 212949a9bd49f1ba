// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package cri

import (
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestOwnNamespaces(t *testing.T) {
	tests := []struct {
		name string
		opts *runtimeapi.NamespaceOption
		want policy.NamespaceSet
	}{
		{"ordinary pod", &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}, policy.Owning(sysctl.Net, sysctl.IPC, sysctl.UTS)},
		{"hostNetwork: the host's UTS too", &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}, policy.Owning(sysctl.IPC)},
		{"hostIPC", &runtimeapi.NamespaceOption{Ipc: runtimeapi.NamespaceMode_NODE}, policy.Owning(sysctl.Net, sysctl.UTS)},
		{"hostUsers: false", &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD}}, policy.Owning(sysctl.Net, sysctl.IPC, sysctl.UTS, sysctl.User)},
		{"user namespace options saying NODE", &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}}, policy.Owning(sysctl.Net, sysctl.IPC, sysctl.UTS)},
	}
	for _, tc := range tests {
		if got := ownNamespaces(tc.opts); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
