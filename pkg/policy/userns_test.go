// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

func TestClampPingGroupRange(t *testing.T) {
	pod65536 := []IDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}
	tests := []struct {
		name     string
		value    string
		mappings []IDMapping
		want     string
		wantOK   bool
	}{
		{"full range clamped to the mapping", "0 2147483647", pod65536, "0 65535", true},
		{"range inside the mapping kept", "100 200", pod65536, "100 200", true},
		{"low end raised to the first mapped gid", "0 50", []IDMapping{{ContainerID: 10, HostID: 5000, Size: 100}}, "10 50", true},
		{"several mappings: their span", "0 4294967295", []IDMapping{{0, 1000, 1}, {1, 100000, 65535}}, "0 65535", true},
		{"nothing mapped in range", "70000 80000", pod65536, "", false},
		{"unknown mapping", "0 10", nil, "", false},
		{"not two numbers", "0", pod65536, "", false},
		{"not numeric", "a b", pod65536, "", false},
		{"tabs are fields too", "1\t2", pod65536, "1 2", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, reason := clampPingGroupRange(tc.value, tc.mappings)
			if got != tc.want || ok != tc.wantOK {
				t.Fatalf("clamp(%q) = %q, %v (%s); want %q, %v", tc.value, got, ok, reason, tc.want, tc.wantOK)
			}
			if !ok && reason == "" {
				t.Fatal("no reason given")
			}
		})
	}
}

func TestDecideClampsPingGroupRangeOnlyUnderUserNamespaces(t *testing.T) {
	p := Compile(mustConfig(t, "sysctls:\n  net.ipv4.ping_group_range: \"0 2147483647\"\n"), nil)
	mappings := []IDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}

	d := p.Decide(Input{Pod: Pod{Own: ownAll}, GIDMappings: mappings})
	if got := applied(d); !reflect.DeepEqual(got, map[string]string{"net.ipv4.ping_group_range": "0 65535"}) {
		t.Fatalf("user-namespace pod: %v", got)
	}
	d = p.Decide(Input{Pod: Pod{Own: ownNormal}})
	if got := applied(d); !reflect.DeepEqual(got, map[string]string{"net.ipv4.ping_group_range": "0 2147483647"}) {
		t.Fatalf("pod in the host user namespace keeps the full range: %v", got)
	}
	d = p.Decide(Input{Pod: Pod{Own: ownAll}})
	if len(d.Apply) != 0 || len(d.Skipped) != 1 {
		t.Fatalf("user-namespace pod with unknown mapping must skip: %+v", d)
	}
}

func TestHostPingGroupRange(t *testing.T) {
	m := []IDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}
	tests := []struct {
		value, want string
		mappings    []IDMapping
		wantErr     bool
	}{
		{"0 65535", "100000 165535", m, false},
		{"10 20", "100010 100020", m, false},
		{"0 99999", "100000 165535", m, false},
		{"0 10", "5000 5000", []IDMapping{{0, 5000, 1}, {1, 200000, 100}}, false},
		{"1 10", "200000 200009", []IDMapping{{0, 5000, 1}, {1, 200000, 100}}, false},
		{"70000 70001", "", m, true},
		{"5 1", "", m, true},
		{"x", "", m, true},
	}
	for _, tc := range tests {
		got, err := HostPingGroupRange(tc.value, tc.mappings)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("HostPingGroupRange(%q) = %q, %v; want %q, err %v", tc.value, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestDecideSkipsKeysRefusedInUserNamespaces(t *testing.T) {
	text := "sysctls:\n  kernel.domainname: pods\n  kernel.msgmax: 65536\n  net.ipv4.tcp_keepalive_time: 600\n"
	// As probed on 6.18: the UTS table is host root's, IPC keys belong
	// to the root of the namespace's owner.
	refused := map[sysctl.Writer]map[string]bool{
		sysctl.WriterInPod: {"kernel.domainname": true},
		sysctl.WriterHost:  {"kernel.msgmax": true},
	}
	cfg := mustConfig(t, text)
	p := Compile(cfg, refused)

	tests := []struct {
		writer  sysctl.Writer
		own     NamespaceSet
		apply   []string
		skipped string
	}{
		{sysctl.WriterInPod, ownAll, []string{"kernel.msgmax", "net.ipv4.tcp_keepalive_time"}, "kernel.domainname"},
		{sysctl.WriterHost, ownAll, []string{"kernel.domainname", "net.ipv4.tcp_keepalive_time"}, "kernel.msgmax"},
		{sysctl.WriterInPod, ownNormal, []string{"kernel.domainname", "kernel.msgmax", "net.ipv4.tcp_keepalive_time"}, ""},
		{sysctl.WriterHost, ownNormal, []string{"kernel.domainname", "kernel.msgmax", "net.ipv4.tcp_keepalive_time"}, ""},
	}
	for _, tc := range tests {
		d := p.Decide(Input{Pod: Pod{Own: tc.own}, Writer: tc.writer})
		if got := slices.Sorted(maps.Keys(applied(d))); !reflect.DeepEqual(got, tc.apply) {
			t.Errorf("%v, user namespace %v: applied %v, want %v", tc.writer, tc.own.Has(sysctl.User), got, tc.apply)
		}
		want := map[string]string{}
		if tc.skipped != "" {
			want[tc.skipped] = SkipUserNamespace.String() + ": the kernel refuses it when " + tc.writer.String() + " writes it"
		}
		if got := skipped(d); !reflect.DeepEqual(got, want) {
			t.Errorf("%v, user namespace %v: skipped %v, want %v", tc.writer, tc.own.Has(sysctl.User), got, want)
		}
	}

	cfg = mustConfig(t, text+"userNamespaceRefused: fail\n")
	for _, w := range []sysctl.Writer{sysctl.WriterInPod, sysctl.WriterHost} {
		if got := applied(Compile(cfg, refused).Decide(Input{Pod: Pod{Own: ownAll}, Writer: w})); len(got) != 3 {
			t.Errorf("%v: userNamespaceRefused: fail keeps every key (the pod fails loudly): %v", w, got)
		}
	}
	// No probe result (the probe was skipped): nothing is left out.
	if got := applied(Compile(mustConfig(t, text), nil).Decide(Input{Pod: Pod{Own: ownAll}, Writer: sysctl.WriterHost})); len(got) != 3 {
		t.Errorf("without a probe result every key applies: %v", got)
	}
}

// The user namespace probe is given each writer's values as Decide and the
// namespace-mode writer make them, and a value a writer is refused rejects
// the config at its line; a key the writer cannot set at all is left to
// userNamespaceRefused.
func TestUserNamespaceValuesAndProblems(t *testing.T) {
	cfg := mustConfig(t, "sysctls:\n  net.ipv4.ping_group_range: 0 2147483647\n  net.ipv4.tcp_keepalive_time: 600\n  kernel.domainname: pods\n"+
		"rules:\n  - sysctls: {net.ipv4.tcp_keepalive_time: 700}\n")
	gids := []IDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}
	got := UserNamespaceValues(cfg, gids)
	want := map[sysctl.Writer]map[string][]string{
		sysctl.WriterInPod: {"net.ipv4.ping_group_range": {"0 65535"}, "net.ipv4.tcp_keepalive_time": {"600", "700"}, "kernel.domainname": {"pods"}},
		sysctl.WriterHost:  {"net.ipv4.ping_group_range": {"100000 165535"}, "net.ipv4.tcp_keepalive_time": {"600", "700"}, "kernel.domainname": {"pods"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("UserNamespaceValues = %v, want %v", got, want)
	}
	refused := map[sysctl.Writer]map[string]error{sysctl.WriterInPod: {"kernel.domainname": unix.EACCES}}
	stored := map[sysctl.Writer]map[string]map[string]sysctl.Stored{
		sysctl.WriterInPod: {
			"net.ipv4.ping_group_range":   {"0 65535": {Text: "0\t65535"}},
			"net.ipv4.tcp_keepalive_time": {"600": {Text: "600"}, "700": {Err: unix.EACCES}},
		},
		sysctl.WriterHost: {
			"net.ipv4.ping_group_range":   {"100000 165535": {Text: "1\t2"}},
			"net.ipv4.tcp_keepalive_time": {"600": {Text: "600"}, "700": {Text: "700"}},
			"kernel.domainname":           {"pods": {Text: "pods"}},
		},
	}
	var lines []string
	for _, p := range UserNamespaceProblems(cfg, gids, refused, stored) {
		lines = append(lines, p.Error())
	}
	wantLines := []string{
		`test.yaml:2: sysctls.net.ipv4.ping_group_range: in a pod with its own user namespace, the kernel stores "100000 165535" as "1 2" (field 1); write "1 2" (when host root writes it)`,
		`test.yaml:6: rules[0].sysctls.net.ipv4.tcp_keepalive_time: in a pod with its own user namespace, the kernel refuses "700" (permission denied) (when runc in the pod writes it)`,
	}
	if !reflect.DeepEqual(lines, wantLines) {
		t.Fatalf("problems:\n%q\nwant\n%q", lines, wantLines)
	}
}

// Profile values are probed and judged for user-namespace pods like the
// rest, at the profile's line.
func TestUserNamespaceValuesIncludeProfiles(t *testing.T) {
	cfg := mustConfig(t, "sysctls:\n  net.ipv4.tcp_keepalive_time: 600\n"+
		"profiles:\n  fast:\n    sysctls: {net.ipv4.tcp_keepalive_time: 800, net.ipv4.ping_group_range: 0 2147483647}\n")
	gids := []IDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}
	got := UserNamespaceValues(cfg, gids)
	want := map[sysctl.Writer]map[string][]string{
		sysctl.WriterInPod: {"net.ipv4.tcp_keepalive_time": {"600", "800"}, "net.ipv4.ping_group_range": {"0 65535"}},
		sysctl.WriterHost:  {"net.ipv4.tcp_keepalive_time": {"600", "800"}, "net.ipv4.ping_group_range": {"100000 165535"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("UserNamespaceValues = %v, want %v", got, want)
	}
	stored := map[sysctl.Writer]map[string]map[string]sysctl.Stored{
		sysctl.WriterInPod: {"net.ipv4.tcp_keepalive_time": {"600": {Text: "600"}, "800": {Err: unix.EACCES}}},
	}
	var lines []string
	for _, p := range UserNamespaceProblems(cfg, gids, nil, stored) {
		lines = append(lines, p.Error())
	}
	wantLines := []string{`test.yaml:5: profiles.fast.sysctls.net.ipv4.tcp_keepalive_time: in a pod with its own user namespace, the kernel refuses "800" (permission denied) (when runc in the pod writes it)`}
	if !reflect.DeepEqual(lines, wantLines) {
		t.Fatalf("problems:\n%q\nwant\n%q", lines, wantLines)
	}
}
