// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package config

import (
	"reflect"
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

const knownProfile = "known fields here: allowedNamespaces, allowedRuntimeHandlers, sysctls"

func TestParseProfiles(t *testing.T) {
	data := "" +
		"sysctls: {net.core.somaxconn: 128}\n" + // 1
		"rules:\n" + // 2
		"  - match: {annotations: {team.example/tier: gold}}\n" + // 3
		"    sysctls: {net.core.somaxconn: 256}\n" + // 4
		"profiles:\n" + // 5
		"  low-latency:\n" + // 6
		"    allowedNamespaces: [\"trading-*\"]\n" + // 7
		"    allowedRuntimeHandlers: [runc]\n" + // 8
		"    sysctls: {net.ipv4.tcp_slow_start_after_idle: 0, net/core/somaxconn: 4096}\n" + // 9
		"  many.conns_2:\n" + // 10
		"    sysctls: {net.ipv4.tcp_fin_timeout: 15}\n" + // 11
		"exclude: {annotations: {nri-sysctl.io/off: \"true\"}}\n" // 12
	cfg := mustParse(t, data, nil)
	want := []Profile{
		{Name: "low-latency", AllowedNamespaces: []string{"trading-*"}, AllowedRuntimeHandlers: []string{"runc"}, Line: 6,
			Sysctls: []Entry{{Key: "net.ipv4.tcp_slow_start_after_idle", Value: "0", Line: 9}, {Key: "net.core.somaxconn", Value: "4096", Line: 9}}},
		{Name: "many.conns_2", Line: 10, Sysctls: []Entry{{Key: "net.ipv4.tcp_fin_timeout", Value: "15", Line: 11}}},
	}
	if !reflect.DeepEqual(cfg.Profiles, want) {
		t.Errorf("profiles = %+v\nwant %+v", cfg.Profiles, want)
	}
	if got := cfg.Rules[0].Match.Annotations; !reflect.DeepEqual(got, map[string]string{"team.example/tier": "gold"}) {
		t.Errorf("rule annotations = %v", got)
	}
	if got := cfg.Exclude.Annotations; !reflect.DeepEqual(got, map[string]string{"nri-sysctl.io/off": "true"}) {
		t.Errorf("exclude annotations = %v", got)
	}
	wantKeys := []string{"net.core.somaxconn", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_slow_start_after_idle"}
	if got := cfg.AllKeys(); !reflect.DeepEqual(got, wantKeys) {
		t.Errorf("AllKeys() = %v, want %v", got, wantKeys)
	}
}

func TestParseProfileErrors(t *testing.T) {
	tests := []struct {
		name string
		data string
		want []string
	}{
		{"not a mapping", "profiles: [a]\n", []string{`f.yaml:1: profiles: must be a mapping of name: profile, got a list`}},
		{"empty profile", "profiles:\n  a:\n", []string{`f.yaml:2: profiles.a: empty profile`}},
		{"no sysctls", "profiles:\n  a: {allowedNamespaces: [x]}\n", []string{`f.yaml:2: profiles.a: profile has no sysctls`}},
		{"unknown field", "profiles:\n  a:\n    sysctls: {net.core.somaxconn: 1}\n    namespaces: [x]\n",
			[]string{`f.yaml:4: profiles.a.namespaces: unknown field; ` + knownProfile}},
		{"duplicate profile", "profiles:\n  a: {sysctls: {net.core.somaxconn: 1}}\n  a: {sysctls: {net.core.somaxconn: 2}}\n",
			[]string{`f.yaml:3: profiles.a: duplicate profile (first at line 2)`}},
		{"name with a comma", "profiles:\n  \"a,b\": {sysctls: {net.core.somaxconn: 1}}\n",
			[]string{`f.yaml:2: profiles.a,b: profile name "a,b" must be letters, digits, '.', '_' or '-', start and end with a letter or digit, at most 63 characters`}},
		{"name with a space", "profiles:\n  \"a b\": {sysctls: {net.core.somaxconn: 1}}\n",
			[]string{`f.yaml:2: profiles.a b: profile name "a b" must be letters, digits, '.', '_' or '-', start and end with a letter or digit, at most 63 characters`}},
		{"bad glob", "profiles:\n  a:\n    allowedNamespaces: [\"[x\"]\n    sysctls: {net.core.somaxconn: 1}\n",
			[]string{`f.yaml:3: profiles.a.allowedNamespaces: bad glob "[x": syntax error in pattern`}},
		{"bad handler glob", "profiles:\n  a:\n    allowedRuntimeHandlers: [\"[x\"]\n    sysctls: {net.core.somaxconn: 1}\n",
			[]string{`f.yaml:3: profiles.a.allowedRuntimeHandlers: bad glob "[x": syntax error in pattern`}},
		{"every key and value", "profiles:\n  a:\n    sysctls:\n      vm.swappiness: 1\n      net.core.somaxconn: true\n      Net.Bad: 1\n      net.core.somaxconn: 2\n",
			[]string{
				`f.yaml:4: profiles.a.sysctls.vm.swappiness: vm.swappiness ` + notNS,
				`f.yaml:5: profiles.a.sysctls.net.core.somaxconn: value "true" is a YAML boolean; write 0 or 1`,
				`f.yaml:6: profiles.a.sysctls.Net.Bad: invalid sysctl name "Net.Bad": ` + badName,
				`f.yaml:7: profiles.a.sysctls.net.core.somaxconn: duplicate key (first at line 5)`,
			}},
		{"annotations in a rule", "rules:\n  - match: {annotations: [a]}\n    sysctls: {net.core.somaxconn: 1}\n",
			[]string{`f.yaml:2: rules[0].match.annotations: must be a mapping of annotation: value, got a list`}},
		{"duplicate annotation in exclude", "exclude:\n  annotations: {a: x, a: y}\n",
			[]string{`f.yaml:2: exclude.annotations.a: duplicate annotation`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse("f.yaml", []byte(tt.data), nil)
			got := problems(t, cfg, err)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// Profile values go through the same kernel probe as the rest: a refused
// key or value rejects the config at its line, and a value the kernel keeps
// in another form is given in that form.
func TestProfileKernelCheck(t *testing.T) {
	data := "" +
		"sysctls: {net.ipv4.icmp_ratelimit: 1000}\n" + // 1
		"profiles:\n" + // 2
		"  a:\n" + // 3
		"    sysctls:\n" + // 4
		"      net.ipv4.tcp_keepalive_tme: 1\n" + // 5
		"      net.ipv4.tcp_keepalive_time: abc\n" + // 6
		"      net.ipv4.icmp_ratelimit: 1001\n" // 7
	fake := &fakeKernel{
		missing: map[string]error{"net.ipv4.tcp_keepalive_tme": sysctl.ErrMissing},
		stored: map[string]map[string]sysctl.Stored{
			"net.ipv4.tcp_keepalive_time": {"abc": {Err: unix.EINVAL}},
			"net.ipv4.icmp_ratelimit":     {"1000": {Text: "1000"}, "1001": {Text: "1004", Again: "1004"}},
		},
	}
	cfg, err := Parse("f.yaml", []byte(data), fake.check)
	got := problems(t, cfg, err)
	want := []string{
		"f.yaml:5: profiles.a.sysctls.net.ipv4.tcp_keepalive_tme: does not exist in a fresh pod namespace on this kernel (kernel probe; is the name misspelt?)",
		`f.yaml:6: profiles.a.sysctls.net.ipv4.tcp_keepalive_time: the kernel refuses "abc" (invalid argument)`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if asked := fake.values[0]["net.ipv4.icmp_ratelimit"]; !reflect.DeepEqual(asked, []string{"1000", "1001"}) {
		t.Errorf("icmp_ratelimit probed with %q, want the default's and the profile's values", asked)
	}
	cfg = mustParse(t, "profiles:\n  a:\n    sysctls: {net.ipv4.icmp_ratelimit: 1001}\n", fake.check)
	if e := cfg.Profiles[0].Sysctls[0]; e.Value != "1004" || e.Written != "1001" {
		t.Errorf("profile entry = %+v, want the kernel's 1004, written 1001", e)
	}
	if kept := cfg.KeptInAnotherForm(); len(kept) != 1 || kept[0].Line != 3 {
		t.Errorf("KeptInAnotherForm() = %+v, want the profile's entry", kept)
	}
}

func TestProfileWarnings(t *testing.T) {
	data := "" +
		"profiles:\n" + // 1
		"  open:\n" + // 2
		"    sysctls:\n" + // 3
		"      net.ipv4.tcp_keepalive_time: 600\n" + // 4 safe
		"      net.core.somaxconn: 4096\n" + // 5 unsafe, unbounded
		"  bounded:\n" + // 6
		"    allowedNamespaces: [trading]\n" + // 7
		"    sysctls: {net.core.somaxconn: 4096}\n" + // 8
		"  by-handler-only:\n" + // 9
		"    allowedRuntimeHandlers: [kata]\n" + // 10
		"    sysctls: {kernel.msgmax: 65536, net.ipv4.tcp_rmem: 4096 131072 6291456}\n" // 11
	cfg := mustParse(t, data, nil)
	var got []string
	for _, w := range cfg.Warnings() {
		got = append(got, w.Error())
	}
	why := ": not in Kubernetes' safe set, and the profile has no allowedNamespaces: a pod in any namespace can ask for it"
	want := []string{
		"f.yaml:5: profiles.open.sysctls.net.core.somaxconn" + why,
		"f.yaml:11: profiles.by-handler-only.sysctls.kernel.msgmax" + why,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
