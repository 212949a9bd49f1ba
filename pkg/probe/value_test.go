// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package probe

import (
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// Values the kernel refuses, and odd ones it takes, written for real in fresh namespaces and judged
// as config.Parse judges them: the kernel's own answers, not a model.
func TestKernelValues(t *testing.T) {
	needRoot(t)
	tests := []struct {
		key, value string
		want       string // the form pods get, or the start of the refusal
		refused    bool
	}{
		{"net.ipv4.tcp_keepalive_time", "600", "600", false},
		{"net.ipv4.tcp_keepalive_time", "abc", `the kernel refuses "abc" (invalid argument)`, true},
		{"net.ipv4.tcp_keepalive_time", "600abc", `the kernel refuses "600abc" (invalid argument)`, true},
		{"net.ipv4.tcp_keepalive_time", "010", `the kernel stores "010" as "8"; write 8`, true},
		{"net.ipv4.tcp_keepalive_time", "0x10", `the kernel stores "0x10" as "16"; write 16`, true},
		{"net.ipv4.tcp_keepalive_time", "-5", "-5", false},
		{"net.ipv4.tcp_keepalive_time", " 600 ", "600", false},
		{"net.ipv4.ip_local_port_range", "60000 1000", `the kernel refuses "60000 1000" (invalid argument)`, true},
		{"net.ipv4.ip_local_port_range", "10000\t60999", "10000 60999", false},
		{"net.ipv4.ip_local_port_range", "10000   60999", "10000 60999", false},
		{"net.core.somaxconn", "-5", `the kernel refuses "-5" (invalid argument)`, true},
		{"net.core.somaxconn", "100000000", "100000000", false},
		{"net.ipv4.ping_group_range", "1 2 3", `the kernel stores "1 2 3" as "1 2": it keeps 2 of its 3 fields`, true},
		{"net.ipv4.ping_group_range", "0 2147483647", "0 2147483647", false},
		// A per-interface key is written to its stand-in entry.
		{"net.ipv4.conf.eth0.rp_filter", "2", "2", false},
		{"net.ipv4.conf.eth0.rp_filter", "abc", `the kernel refuses "abc" (invalid argument)`, true},
		{"net.ipv4.tcp_fastopen_key", "1-2-3-4", "00000001-00000002-00000003-00000004", false},
		{"kernel.sem", "1 2 abc", `the kernel refuses "1 2 abc" (invalid argument)`, true},
		{"kernel.sem", "250 32000 32 128", "250 32000 32 128", false},
		{"kernel.domainname", strings.Repeat("a", 70), "the kernel keeps only the first 64 of its 70 bytes", true},
	}
	values := map[string][]string{}
	for _, tt := range tests {
		values[tt.key] = append(values[tt.key], tt.value)
	}
	refused, stored, err := Kernel(values)
	if err != nil {
		t.Fatal(err)
	}
	if len(refused) != 0 {
		t.Fatalf("keys refused: %v", refused)
	}
	for _, tt := range tests {
		s, ok := stored[tt.key][tt.value]
		if !ok {
			t.Errorf("%s %q: no result", tt.key, tt.value)
			continue
		}
		got, err := sysctl.Judge(tt.value, s)
		switch {
		case tt.refused && (err == nil || !strings.HasPrefix(err.Error(), tt.want)):
			t.Errorf("%s %q: stored %+v, judged %q, %v; want the refusal %q", tt.key, tt.value, s, got, err, tt.want)
		case !tt.refused && (err != nil || got != tt.want):
			t.Errorf("%s %q: stored %+v, judged %q, %v; want %q", tt.key, tt.value, s, got, err, tt.want)
		}
	}
}

// The jiffies rounding depends on the kernel's HZ: a value in milliseconds
// comes back within a jiffy, and the kernel's form is what pods get.
func TestKernelValueRounding(t *testing.T) {
	needRoot(t)
	_, stored, err := Kernel(map[string][]string{"net.ipv4.icmp_ratelimit": {"1001"}})
	if err != nil {
		t.Fatal(err)
	}
	s := stored["net.ipv4.icmp_ratelimit"]["1001"]
	got, err := sysctl.Judge("1001", s)
	if err != nil || got != s.Text || (s.Text != "1001" && s.Again != s.Text) {
		t.Fatalf("icmp_ratelimit 1001: stored %+v, judged %q, %v; want the kernel's form, stable", s, got, err)
	}
	t.Logf("icmp_ratelimit 1001 is stored as %s on this kernel", s.Text)
}

// A refused vector can store its first fields; each value must meet the
// file as a pod would, so the probe puts the first text back.
func TestKernelValuesStartFromTheFreshValue(t *testing.T) {
	needRoot(t)
	_, alone, err := Kernel(map[string][]string{"kernel.sem": {"7"}})
	if err != nil {
		t.Fatal(err)
	}
	// "1 2 abc" stores 1 and 2 before it fails: "7" written after it
	// must still read back with the fresh namespace's other fields.
	_, after, err := Kernel(map[string][]string{"kernel.sem": {"1 2 abc", "7"}})
	if err != nil {
		t.Fatal(err)
	}
	want := alone["kernel.sem"]["7"].Text
	if got := after["kernel.sem"]["7"].Text; got != want || !strings.HasPrefix(got, "7\t") || strings.HasPrefix(got, "7\t2\t") {
		t.Fatalf(`kernel.sem "7" after "1 2 abc" reads %q, alone %q`, got, want)
	}
}
