// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package podsysctl

import (
	"testing"
)

// Benchmark of decoding containerd's metadata. The real Fetch is a gRPC
// round trip to containerd, timed against a live containerd by the
// end-to-end benchmark (test/e2e/bench_test.go); the per-pod record that
// keeps its result is benchmarked with the handlers (plugin/bench_test.go).

// benchMetadata is shaped like the "metadata" extension containerd 2.x
// stores for a CRI sandbox (trimmed of nothing that matters for size: the
// decoder must skip all of it).
const benchMetadata = `{"Version":"v1","Metadata":{"ID":"5d6f0c6b0f5e4f1c9a0b8f0d9c2e7a1b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f","Name":"web-0_shop_0e1f2a3b-4c5d-6e7f-8091-a2b3c4d5e6f7_0","Config":{"metadata":{"name":"web-0","uid":"0e1f2a3b-4c5d-6e7f-8091-a2b3c4d5e6f7","namespace":"shop"},"hostname":"web-0","log_directory":"/var/log/pods/shop_web-0_0e1f2a3b-4c5d-6e7f-8091-a2b3c4d5e6f7","dns_config":{"servers":["10.96.0.10"],"searches":["shop.svc.cluster.local","svc.cluster.local","cluster.local"],"options":["ndots:5"]},"port_mappings":[{"container_port":8080}],"labels":{"app":"web","io.kubernetes.pod.name":"web-0","io.kubernetes.pod.namespace":"shop","io.kubernetes.pod.uid":"0e1f2a3b-4c5d-6e7f-8091-a2b3c4d5e6f7","pod-template-hash":"7c9d8f6b5"},"annotations":{"kubernetes.io/config.seen":"2026-01-01T00:00:00.000000000Z","kubernetes.io/config.source":"api"},"linux":{"cgroup_parent":"/kubepods/burstable/pod0e1f2a3b-4c5d-6e7f-8091-a2b3c4d5e6f7","security_context":{"namespace_options":{"pid":1},"seccomp":{"profile_type":1}},"sysctls":{"net.ipv4.tcp_keepalive_intvl":"33","net.core.somaxconn":"4096"},"overhead":{},"resources":{"cpu_period":100000,"cpu_quota":50000,"cpu_shares":512,"memory_limit_in_bytes":268435456}}},"NetNSPath":"/var/run/netns/cni-8d2e4f1a-3b5c-7d9e-0f1a-2b3c4d5e6f70","IP":"10.244.1.17","AdditionalIPs":null,"RuntimeHandler":"runc","CNIResult":{"Interfaces":{"eth0":{"IPConfigs":[{"IP":"10.244.1.17","Gateway":"10.244.1.1"}],"Mac":"aa:bb:cc:dd:ee:ff","Sandbox":"/var/run/netns/cni-8d2e4f1a-3b5c-7d9e-0f1a-2b3c4d5e6f70"}},"DNS":[{}],"Routes":[{"dst":"0.0.0.0/0","gw":"10.244.1.1"}]},"ProcessLabel":""}}`

// BenchmarkDecodeCRIMetadata: the JSON decoding alone.
func BenchmarkDecodeCRIMetadata(b *testing.B) {
	data := []byte(benchMetadata)
	own, _, err := sysctlsFromCRIMetadata(data)
	if err != nil || own["net.ipv4.tcp_keepalive_intvl"] != "33" {
		b.Fatalf("decoded %v, %v", own, err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := sysctlsFromCRIMetadata(data); err != nil {
			b.Fatal(err)
		}
	}
}
