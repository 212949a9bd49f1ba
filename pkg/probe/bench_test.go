// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package probe

import (
	"fmt"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// bench32 is 32 keys with a value each, as the start-up
// measurement takes (the config package's benchmark uses the same keys).
func bench32() map[string][]string {
	values := map[string][]string{}
	for i, k := range []string{
		"accept_local", "accept_redirects", "accept_source_route", "arp_accept",
		"arp_announce", "arp_filter", "arp_ignore", "arp_notify", "bootp_relay",
		"disable_policy", "disable_xfrm", "forwarding", "log_martians",
		"promote_secondaries", "proxy_arp", "route_localnet", "rp_filter",
		"secure_redirects", "send_redirects", "shared_media", "src_valid_mark",
	} {
		values["net.ipv4.conf.default."+k] = []string{fmt.Sprint(i % 2)}
	}
	for k, v := range map[string]string{
		"net.core.somaxconn": "1024", "net.ipv4.tcp_keepalive_time": "600", "net.ipv4.tcp_keepalive_intvl": "60",
		"net.ipv4.tcp_keepalive_probes": "5", "net.ipv4.ip_local_port_range": "10000 60999", "net.ipv4.tcp_fin_timeout": "30",
		"net.ipv4.tcp_syncookies": "1", "net.ipv4.icmp_ratelimit": "1000", "kernel.msgmax": "16384", "kernel.msgmnb": "32768",
		"kernel.sem": "250 32000 32 128",
	} {
		values[k] = []string{v}
	}
	return values
}

func benchUserNamespace(b *testing.B, values map[string][]string) {
	if _, err := UserNamespace(namesForBoth("net.core.somaxconn")); err != nil {
		b.Skipf("user namespace probe cannot run here: %v", err)
	}
	both := map[sysctl.Writer]map[string][]string{sysctl.WriterInPod: values, sysctl.WriterHost: values}
	for b.Loop() {
		if _, err := UserNamespace(both); err != nil {
			b.Fatal(err)
		}
	}
}

// Side by side: the user namespace probe that
// writes each value as both writers, against the one that only opened each
// key (values left out).
func BenchmarkUserNamespace32Values(b *testing.B) { benchUserNamespace(b, bench32()) }

func BenchmarkUserNamespace32NamesOnly(b *testing.B) {
	names := map[string][]string{}
	for k := range bench32() {
		names[k] = nil
	}
	benchUserNamespace(b, names)
}
