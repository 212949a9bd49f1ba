// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/probe"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// Benchmarks of what start-up and every reload cost: reading and
// validating the config file, with and without the kernel probe.

const benchSmallConfig = `# as config/config.yaml
sysctls:
  net.ipv4.tcp_keepalive_time: 600
  net.ipv4.tcp_keepalive_intvl: 60
  net.ipv4.tcp_keepalive_probes: 5
exclude:
  namespaces: ["kube-system"]
`

// ifaceKeys exist below net.ipv4.conf.{all,default,lo} in a fresh network
// namespace on every kernel this project supports, so that the large config
// also passes the kernel probe.
var ifaceKeys = []string{
	"accept_local", "accept_redirects", "accept_source_route", "arp_accept",
	"arp_announce", "arp_filter", "arp_ignore", "arp_notify", "bootp_relay",
	"disable_policy", "disable_xfrm", "forwarding", "log_martians",
	"promote_secondaries", "proxy_arp", "route_localnet", "rp_filter",
	"secure_redirects", "send_redirects", "shared_media", "src_valid_mark",
}

// benchLargeConfig has 64 defaults, 32 rules and 3 exclusions, the size
// of the decision benchmark in pkg/policy.
func benchLargeConfig() string {
	var b strings.Builder
	b.WriteString("sysctls:\n  net.core.somaxconn: 1024\n")
	n := 1
	for _, iface := range []string{"all", "default", "lo"} {
		for _, k := range ifaceKeys {
			fmt.Fprintf(&b, "  net.ipv4.conf.%s.%s: %d\n", iface, k, n%2)
			n++
		}
	}
	b.WriteString("rules:\n")
	for i := 0; i < 32; i++ {
		fmt.Fprintf(&b, "  - name: r%d\n    match: {namespaces: [\"team-%d-*\"], labels: {tier: t%d}}\n    sysctls: {net.ipv4.tcp_keepalive_time: %d, net.core.somaxconn: %d}\n", i, i%4, i%3, 300+i, 1000+i)
	}
	b.WriteString("exclude:\n  namespaces: [kube-system]\n  runtimeHandlers: [runsc]\n  labels: {nri-sysctl: \"off\"}\n")
	return b.String()
}

func writeBenchConfig(b *testing.B, text string) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}

func benchLoad(b *testing.B, text string, check config.KernelChecker, defaults, rules int) {
	path := writeBenchConfig(b, text)
	cfg, err := config.Load(path, check)
	if err != nil {
		b.Fatal(err)
	}
	if len(cfg.Sysctls) != defaults || len(cfg.Rules) != rules {
		b.Fatalf("config has %d default(s) and %d rule(s), want %d and %d", len(cfg.Sysctls), len(cfg.Rules), defaults, rules)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := config.Load(path, check); err != nil {
			b.Fatal(err)
		}
	}
}

// probeOrSkip returns the real kernel probe if it can run here (root).
func probeOrSkip(b *testing.B) config.KernelChecker {
	b.Helper()
	if _, _, err := probe.Kernel(map[string][]string{"net.core.somaxconn": nil}); err != nil {
		b.Skipf("kernel probe cannot run here: %v", err)
	}
	return probe.Kernel
}

func BenchmarkLoadSmall(b *testing.B) { benchLoad(b, benchSmallConfig, nil, 3, 0) }

func BenchmarkLoadLarge(b *testing.B) { benchLoad(b, benchLargeConfig(), nil, 64, 32) }

// The kernel probe creates throw-away network, IPC and UTS namespaces on a
// locked thread: its cost is mostly namespace creation, not the keys.
func BenchmarkLoadSmallKernelProbe(b *testing.B) {
	benchLoad(b, benchSmallConfig, probeOrSkip(b), 3, 0)
}

func BenchmarkLoadLargeKernelProbe(b *testing.B) {
	benchLoad(b, benchLargeConfig(), probeOrSkip(b), 64, 32)
}

// bench32Config has 32 defaults, as the start-up measurement takes:
// the 21 interface keys on the default entry and 11 more.
func bench32Config() string {
	var b strings.Builder
	b.WriteString("sysctls:\n")
	for i, k := range ifaceKeys {
		fmt.Fprintf(&b, "  net.ipv4.conf.default.%s: %d\n", k, i%2)
	}
	for _, kv := range []string{
		"net.core.somaxconn: 1024", "net.ipv4.tcp_keepalive_time: 600", "net.ipv4.tcp_keepalive_intvl: 60",
		"net.ipv4.tcp_keepalive_probes: 5", "net.ipv4.ip_local_port_range: 10000 60999", "net.ipv4.tcp_fin_timeout: 30",
		"net.ipv4.tcp_syncookies: 1", "net.ipv4.icmp_ratelimit: 1000", "kernel.msgmax: 16384", "kernel.msgmnb: 32768",
		"kernel.sem: 250 32000 32 128",
	} {
		b.WriteString("  " + kv + "\n")
	}
	return b.String()
}

// namesOnly is the kernel probe as it was before it wrote values: it opens
// each key for writing and writes nothing.
func namesOnly(check config.KernelChecker) config.KernelChecker {
	return func(values map[string][]string) (map[string]error, map[string]map[string]sysctl.Stored, error) {
		names := make(map[string][]string, len(values))
		for n := range values {
			names[n] = nil
		}
		return check(names)
	}
}

// In one run: the probe that writes and reads
// back every value, against the one that only opened each key.
func BenchmarkLoad32KernelValues(b *testing.B) {
	benchLoad(b, bench32Config(), probeOrSkip(b), 32, 0)
}

func BenchmarkLoad32KernelNamesOnly(b *testing.B) {
	benchLoad(b, bench32Config(), namesOnly(probeOrSkip(b)), 32, 0)
}
