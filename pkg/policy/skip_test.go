// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// Each skip carries the code of its reason, so that metrics need not read
// the reason's text: a GID range that cannot be clamped is a user
// namespace skip whatever its detail says.
func TestSkipCodes(t *testing.T) {
	cfg := mustConfig(t, "sysctls:\n  net.core.somaxconn: 1024\n  kernel.msgmax: 16384\n  kernel.domainname: example.org\n  net.ipv4.ping_group_range: 0 10\n")
	refused := UserNamespaceRefusals{sysctl.WriterInPod: {"net.core.somaxconn": true}}
	d := Compile(cfg, refused).Decide(Input{
		Pod:      Pod{Own: Owning(sysctl.Net, sysctl.IPC, sysctl.User)},
		PodOwn:   map[string]string{"kernel.msgmax": "1"},
		Existing: map[string]string{},
		// Container GIDs from 100: nothing of 0-10 is mapped.
		GIDMappings: []IDMapping{{ContainerID: 100, HostID: 100000, Size: 10}},
		Writer:      sysctl.WriterInPod,
	})
	want := map[string]SkipCode{
		"kernel.domainname":         SkipHostNamespace,
		"kernel.msgmax":             SkipPodOwn,
		"net.core.somaxconn":        SkipUserNamespace,
		"net.ipv4.ping_group_range": SkipUserNamespace,
	}
	got := map[string]SkipCode{}
	for _, s := range d.Skipped {
		got[s.Key] = s.Code
	}
	for k, c := range want {
		if got[k] != c {
			t.Errorf("%s: code %s, want %s (skipped: %+v)", k, got[k].Label(), c.Label(), d.Skipped)
		}
	}
	if len(got) != len(want) {
		t.Errorf("skipped %+v, want %d keys", d.Skipped, len(want))
	}
	existing := Compile(cfg, nil).Decide(Input{Pod: Pod{Own: Owning(sysctl.Net, sysctl.IPC, sysctl.UTS)}, Existing: map[string]string{"net.core.somaxconn": "1"}})
	for _, s := range existing.Skipped {
		if s.Key == "net.core.somaxconn" && s.Code != SkipExisting {
			t.Errorf("a key already on the container: code %s, want existing", s.Code.Label())
		}
	}
}
