// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package config

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/probe"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

// Every value the config can give a pod goes to the checker, and what the
// kernel stored decides: a refused value is a problem at its line, and a
// value the kernel keeps in its own form is given in that form.
func TestKernelValueCheck(t *testing.T) {
	data := "" +
		"sysctls:\n" + // 1
		"  net.ipv4.tcp_keepalive_time: abc\n" + // 2
		"  net.ipv4.icmp_ratelimit: 1001\n" + // 3
		"  net.ipv4.ping_group_range: 1 2 3\n" + // 4
		"rules:\n" + // 5
		"  - name: r\n" + // 6
		"    sysctls:\n" + // 7
		"      net.ipv4.tcp_keepalive_time: \"010\"\n" + // 8
		"      net.ipv4.icmp_ratelimit: 2000\n" // 9
	fake := &fakeKernel{stored: map[string]map[string]sysctl.Stored{
		"net.ipv4.tcp_keepalive_time": {"abc": {Err: unix.EINVAL}, "010": {Text: "8"}},
		"net.ipv4.icmp_ratelimit":     {"1001": {Text: "1004", Again: "1004"}, "2000": {Text: "2000"}},
		"net.ipv4.ping_group_range":   {"1 2 3": {Text: "1\t2"}},
	}}
	cfg, err := Parse("f.yaml", []byte(data), fake.check)
	got := problems(t, cfg, err)
	want := []string{
		`f.yaml:2: sysctls.net.ipv4.tcp_keepalive_time: the kernel refuses "abc" (invalid argument)`,
		`f.yaml:4: sysctls.net.ipv4.ping_group_range: the kernel stores "1 2 3" as "1 2": it keeps 2 of its 3 fields`,
		`f.yaml:8: rules[0].sysctls.net.ipv4.tcp_keepalive_time: the kernel stores "010" as "8"; write 8 (a leading 0 makes the kernel read octal)`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	wantAsked := map[string][]string{
		"net.ipv4.tcp_keepalive_time": {"abc", "010"},
		"net.ipv4.icmp_ratelimit":     {"1001", "2000"},
		"net.ipv4.ping_group_range":   {"1 2 3"},
	}
	if len(fake.values) != 1 || !reflect.DeepEqual(fake.values[0], wantAsked) {
		t.Fatalf("checker asked %v, want %v", fake.values, wantAsked)
	}

	// Without the refused ones, the kernel's form is what the config gives.
	good := "sysctls:\n  net.ipv4.icmp_ratelimit: 1001\nrules:\n  - sysctls: {net.ipv4.icmp_ratelimit: 2000}\n"
	cfg = mustParse(t, good, fake.check)
	if e := cfg.Sysctls[0]; e.Value != "1004" || e.Written != "1001" {
		t.Errorf("default icmp_ratelimit = %+v, want the kernel's 1004, written 1001", e)
	}
	if kept := cfg.KeptInAnotherForm(); len(kept) != 1 || kept[0].Key != "net.ipv4.icmp_ratelimit" {
		t.Errorf("KeptInAnotherForm() = %+v, want the default icmp_ratelimit alone", kept)
	}
	if v := cfg.Rules[0].Sysctls[0].Value; v != "2000" {
		t.Errorf("rule icmp_ratelimit = %q, want 2000", v)
	}
}

// A host value the kernel refuses in a fresh pod namespace is left out of a
// glob like any key a pod cannot be given, and named exactly it is a
// problem.
func TestInheritedValueRefused(t *testing.T) {
	useFakeHost(t, map[string]string{
		"net/ipv4/tcp_keepalive_time":  "7200\n",
		"net/ipv4/tcp_keepalive_intvl": "75\n",
	})
	fake := &fakeKernel{stored: map[string]map[string]sysctl.Stored{
		"net.ipv4.tcp_keepalive_time":  {"7200": {Err: unix.EINVAL}},
		"net.ipv4.tcp_keepalive_intvl": {"75": {Text: "75"}},
	}}
	cfg := mustParse(t, "inheritFromHost: [\"net.ipv4.tcp_keepalive_*\"]\n", fake.check)
	if got := cfg.Inherited(); len(got) != 1 || got[0].Key != "net.ipv4.tcp_keepalive_intvl" || got[0].Value != "75" {
		t.Fatalf("inherited %+v, want tcp_keepalive_intvl 75 alone", got)
	}
	if in := cfg.InheritFromHost[0]; in.LeftOut != 1 {
		t.Errorf("left out %d, want 1", in.LeftOut)
	}
	_, err := Parse("f.yaml", []byte("inheritFromHost: [net.ipv4.tcp_keepalive_time]\n"), fake.check)
	want := `f.yaml:1: inheritFromHost[0]: net.ipv4.tcp_keepalive_time matches no sysctl a pod can be given: net.ipv4.tcp_keepalive_time (the kernel refuses "7200" (invalid argument))`
	if got := problems(t, nil, err); len(got) != 1 || got[0] != want {
		t.Fatalf("problems %q, want %q", got, want)
	}
}

// The real kernel, in fresh namespaces: values the kernel refuses are refused
// with the key and the reason, every one in one run, and values that look
// odd but are valid pass in the form a pod reads.
func TestKernelValuesOnThisKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the kernel probe needs root")
	}
	bad := "" +
		"sysctls:\n" + // 1
		"  net.ipv4.tcp_keepalive_time: \"abc\"\n" + // 2
		"  net.ipv4.ip_local_port_range: \"60000 1000\"\n" + // 3
		"  net.core.somaxconn: -5\n" + // 4
		"  net.ipv4.tcp_keepalive_intvl: \"010\"\n" + // 5
		"rules:\n" + // 6
		"  - name: web\n" + // 7
		"    match: {namespaces: [web]}\n" + // 8
		"    sysctls: {net.ipv4.tcp_keepalive_probes: 1x}\n" // 9
	_, err := Parse("bad.yaml", []byte(bad), probe.Kernel)
	want := []string{
		`bad.yaml:2: sysctls.net.ipv4.tcp_keepalive_time: the kernel refuses "abc" (invalid argument)`,
		`bad.yaml:3: sysctls.net.ipv4.ip_local_port_range: the kernel refuses "60000 1000" (invalid argument)`,
		`bad.yaml:4: sysctls.net.core.somaxconn: the kernel refuses "-5" (invalid argument)`,
		`bad.yaml:5: sysctls.net.ipv4.tcp_keepalive_intvl: the kernel stores "010" as "8"; write 8 (a leading 0 makes the kernel read octal)`,
		`bad.yaml:9: rules[0].sysctls.net.ipv4.tcp_keepalive_probes: the kernel refuses "1x" (invalid argument)`,
	}
	if got := problems(t, nil, err); !reflect.DeepEqual(got, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	odd := "" +
		"sysctls:\n" +
		"  net.ipv4.ping_group_range: \"0 2147483647\"\n" +
		"  net.ipv4.ip_local_port_range: \"10000\\t60999\"\n" +
		"  net.ipv4.conf.eth0.rp_filter: 2\n" +
		"rules:\n" +
		"  - sysctls: {net.ipv4.ip_local_port_range: \"10000   60999\"}\n"
	cfg := mustParse(t, odd, probe.Kernel)
	got := map[string]string{}
	for _, e := range cfg.Sysctls {
		got[e.Key] = e.Value
	}
	wantValues := map[string]string{
		"net.ipv4.ping_group_range":    "0 2147483647",
		"net.ipv4.ip_local_port_range": "10000 60999",
		"net.ipv4.conf.eth0.rp_filter": "2",
	}
	if !reflect.DeepEqual(got, wantValues) {
		t.Errorf("defaults %v, want %v", got, wantValues)
	}
	if v := cfg.Rules[0].Sysctls[0].Value; v != "10000 60999" {
		t.Errorf("rule value %q, want 10000 60999", v)
	}
}
