package policy

import (
	"reflect"
	"testing"
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
	p := Compile(mustConfig(t, "sysctls:\n  net.ipv4.ping_group_range: \"0 2147483647\"\n"))
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
	text := "sysctls:\n  net.core.rmem_max: 8388608\n  net.ipv4.tcp_keepalive_time: 600\n"
	cfg := mustConfig(t, text)
	cfg.RefusedInUserNamespace = map[string]bool{"net.core.rmem_max": true}
	p := Compile(cfg)

	d := p.Decide(Input{Pod: Pod{Own: ownAll}})
	if got := applied(d); !reflect.DeepEqual(got, map[string]string{"net.ipv4.tcp_keepalive_time": "600"}) {
		t.Fatalf("user-namespace pod: applied %v", got)
	}
	if got := skipped(d); got["net.core.rmem_max"] != ReasonUserNamespace {
		t.Fatalf("user-namespace pod: skipped %v", got)
	}
	d = p.Decide(Input{Pod: Pod{Own: ownNormal}})
	if got := applied(d); len(got) != 2 {
		t.Fatalf("pod without a user namespace gets both: %v", got)
	}

	cfg = mustConfig(t, text+"userNamespaceRefused: fail\n")
	cfg.RefusedInUserNamespace = map[string]bool{"net.core.rmem_max": true}
	if got := applied(Compile(cfg).Decide(Input{Pod: Pod{Own: ownAll}})); len(got) != 2 {
		t.Fatalf("userNamespaceRefused: fail keeps the key (the pod fails loudly): %v", got)
	}
}
