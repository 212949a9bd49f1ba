// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package podsysctl

import (
	"reflect"
	"testing"
)

// Shapes of containerd's stored CRI metadata, trimmed to what matters.
const (
	metadataWithSysctls = `{"Version":"v1","Metadata":{"ID":"abc","Name":"p","Config":{"metadata":{"name":"p"},"linux":{"sysctls":{"net.ipv4.tcp_keepalive_intvl":"33","net/ipv4/conf/eth0.100/rp_filter":"1"}}}}}`
	metadataNoLinux     = `{"Version":"v1","Metadata":{"ID":"abc","Config":{"metadata":{"name":"p"}}}}`
	metadataNoConfig    = `{"Version":"v1","Metadata":{"ID":"abc"}}`
	metadataOldVersion  = `{"Version":"v0","Metadata":{"Config":{}}}`
)

func TestSysctlsFromCRIMetadata(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    map[string]string
		wantErr bool
	}{
		{"sysctls, normalized", metadataWithSysctls, map[string]string{"net.ipv4.tcp_keepalive_intvl": "33", "net.ipv4.conf.eth0/100.rp_filter": "1"}, false},
		{"no linux section", metadataNoLinux, map[string]string{}, false},
		{"no config", metadataNoConfig, nil, true},
		{"unknown version", metadataOldVersion, nil, true},
		{"not JSON", `{`, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := sysctlsFromCRIMetadata([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSysctlsFromSpec(t *testing.T) {
	got, _, err := readSpec([]byte(`{"ociVersion":"1.2.0","linux":{"sysctl":{"net.ipv4.ip_unprivileged_port_start":"0"}}}`))
	if err != nil || !reflect.DeepEqual(got, map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"}) {
		t.Fatalf("got %v, %v", got, err)
	}
	if got, _, err := readSpec([]byte(`{"ociVersion":"1.2.0"}`)); err != nil || len(got) != 0 {
		t.Fatalf("no linux: got %v, %v", got, err)
	}
}

func TestGIDMappingsFromSpec(t *testing.T) {
	_, got, _ := readSpec([]byte(`{"linux":{"gidMappings":[{"containerID":0,"hostID":100000,"size":65536}]}}`))
	if len(got) != 1 || got[0].ContainerID != 0 || got[0].HostID != 100000 || got[0].Size != 65536 {
		t.Fatalf("got %+v", got)
	}
	if _, got, _ := readSpec([]byte(`{"linux":{}}`)); got != nil {
		t.Fatalf("no mappings: %+v", got)
	}
	if _, got, _ := readSpec(nil); got != nil {
		t.Fatalf("no spec: %+v", got)
	}
}

func TestGIDMappingsFromCRIMetadata(t *testing.T) {
	const in = `{"Version":"v1","Metadata":{"Config":{"linux":{"security_context":{"namespace_options":{"userns_options":{"mode":0,"uids":[{"host_id":100000,"container_id":0,"length":65536}],"gids":[{"host_id":200000,"container_id":0,"length":1000}]}}}}}}}`
	_, gids, err := sysctlsFromCRIMetadata([]byte(in))
	if err != nil || len(gids) != 1 || gids[0].HostID != 200000 || gids[0].ContainerID != 0 || gids[0].Size != 1000 {
		t.Fatalf("gids = %+v, err %v", gids, err)
	}
	if _, gids, _ := sysctlsFromCRIMetadata([]byte(metadataWithSysctls)); gids != nil {
		t.Fatalf("pod without user namespace: gids %+v", gids)
	}
}

// What the runtime added to the sandbox's spec is told apart from the
// pod's own keys: the plugin may write over the one (never another
// writer's), never over the other.
func TestRuntimeAddedKeys(t *testing.T) {
	const meta = `{"Version":"v1","Metadata":{"Config":{"linux":{"sysctls":{"net.core.somaxconn":"4096"}}}}}`
	const spec = `{"linux":{"sysctl":{"net.core.somaxconn":"4096","net.ipv4.ip_unprivileged_port_start":"0","net.ipv4.ping_group_range":"0 2147483647"}}}`
	got, err := fromCRIMetadata([]byte(meta), []byte(spec), SourceSandboxConfig)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"net.core.somaxconn": "4096"}; !reflect.DeepEqual(got.Own, want) {
		t.Errorf("own = %v, want %v", got.Own, want)
	}
	if want := map[string]string{"net.ipv4.ip_unprivileged_port_start": "0", "net.ipv4.ping_group_range": "0 2147483647"}; !reflect.DeepEqual(got.Runtime, want) {
		t.Errorf("runtime = %v, want %v", got.Runtime, want)
	}
	if got, _ := fromCRIMetadata([]byte(meta), nil, SourceSandboxConfig); got.Runtime != nil {
		t.Errorf("no spec: runtime = %v, want none", got.Runtime)
	}
}
