// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/probe"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

const (
	known      = "known fields here: containerdAddress, containerdNamespace, exclude, inheritFromHost, metricsAddress, mode, onError, onLookupError, onMissedDeadline, profiles, rules, runningPods, sysctls, userNamespaceRefused"
	knownRule  = "known fields here: match, name, sysctls"
	knownMatch = "known fields here: annotations, labels, namespaces, runtimeHandlers"
	badName    = "want lower-case segments of [a-z0-9_-] separated by '.' (or '/'), with no empty segment"
	notNS      = "is not namespaced: setting it from a pod would change the whole node; set it on the host with /etc/sysctl.d instead"
)

// problems returns each problem of a failed Parse or Load as a string, and
// fails the test when the error is not Problems or a config came back too.
func problems(t *testing.T, cfg *Config, err error) []string {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted, want problems; got %+v", cfg)
	}
	if cfg != nil {
		t.Errorf("returned a config along with the error: %+v", cfg)
	}
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("error is %T, not Problems: %v", err, err)
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Error()
	}
	return out
}

func TestParseBroken(t *testing.T) {
	mib := strings.Repeat("1", 1<<20)
	tests := []struct {
		name string
		data string
		want []string
	}{
		{
			name: "YAML syntax: unclosed flow sequence",
			data: "sysctls:\n  net.core.somaxconn: [\n",
			want: []string{"f.yaml:2: not valid YAML: line 2: did not find expected node content"},
		},
		{
			name: "YAML syntax: bad indentation",
			data: "sysctls:\n  net.core.somaxconn: 1\n net.core.optmem_max: 2\n",
			// yaml.v3 names the line of the mapping it was reading.
			want: []string{"f.yaml:2: not valid YAML: line 2: did not find expected key"},
		},
		{
			name: "YAML syntax: tab",
			data: "sysctls:\n\tnet.core.somaxconn: 1\n",
			want: []string{"f.yaml:2: not valid YAML: line 2: found character that cannot start any token"},
		},
		{
			name: "YAML syntax: control character",
			data: "sysctls: {}\n\x01\n",
			want: []string{"f.yaml: not valid YAML: control characters are not allowed"},
		},
		{
			name: "top level is a list",
			data: "- sysctls: {}\n",
			want: []string{"f.yaml:1: must be a mapping, got a list"},
		},
		{
			name: "top level is a string",
			data: "net.core.somaxconn=1\n",
			want: []string{`f.yaml:1: must be a mapping, got "net.core.somaxconn=1"`},
		},
		{
			name: "sysctls as a list",
			data: "sysctls:\n  - net.core.somaxconn: 1\n",
			want: []string{"f.yaml:2: sysctls: must be a mapping of sysctl: value, got a list"},
		},
		{
			name: "sysctls as a string",
			data: "sysctls: net.core.somaxconn=1\n",
			want: []string{`f.yaml:1: sysctls: must be a mapping of sysctl: value, got "net.core.somaxconn=1"`},
		},
		{
			name: "rules as a map",
			data: "rules:\n  name: web\n  sysctls: {net.core.somaxconn: 1}\n",
			want: []string{"f.yaml:2: rules: must be a list of rules, got a mapping"},
		},
		{
			name: "rule is a string",
			data: "rules:\n  - web\n",
			want: []string{`f.yaml:2: rules[0]: must be a mapping, got "web"`},
		},
		{
			name: "rule is empty",
			data: "rules:\n  -\n  - name: web\n    sysctls: {net.core.somaxconn: 1}\n",
			want: []string{"f.yaml:2: rules[0]: empty rule"},
		},
		{
			name: "value is a map",
			data: "sysctls:\n  net.core.somaxconn:\n    value: 1\n",
			want: []string{"f.yaml:3: sysctls.net.core.somaxconn: value must be a number or a string, got a mapping"},
		},
		{
			name: "value is a list",
			data: "sysctls:\n  net.ipv4.ip_local_port_range: [1024, 65000]\n",
			want: []string{"f.yaml:2: sysctls.net.ipv4.ip_local_port_range: value must be a number or a string, got a list"},
		},
		{
			name: "boolean values",
			data: "sysctls:\n  net.ipv4.ip_forward: true\n  net.ipv4.tcp_sack: False\n",
			want: []string{
				`f.yaml:2: sysctls.net.ipv4.ip_forward: value "true" is a YAML boolean; write 0 or 1`,
				`f.yaml:3: sysctls.net.ipv4.tcp_sack: value "False" is a YAML boolean; write 0 or 1`,
			},
		},
		{
			name: "null values",
			data: "sysctls:\n  net.core.somaxconn:\n  net.core.optmem_max: ~\n  net.core.rmem_max: null\n",
			want: []string{
				"f.yaml:2: sysctls.net.core.somaxconn: empty value",
				"f.yaml:3: sysctls.net.core.optmem_max: empty value",
				"f.yaml:4: sysctls.net.core.rmem_max: empty value",
			},
		},
		{
			name: "empty and blank string values",
			data: "sysctls:\n  net.core.somaxconn: \"\"\n  net.core.optmem_max: \" \\t\"\n",
			want: []string{
				"f.yaml:2: sysctls.net.core.somaxconn: empty value",
				"f.yaml:3: sysctls.net.core.optmem_max: empty value",
			},
		},
		{
			name: "binary value",
			data: "sysctls:\n  net.core.somaxconn: !!binary MTAyNA==\n",
			want: []string{"f.yaml:2: sysctls.net.core.somaxconn: value must be a number or a string, got MTAyNA== (!!binary)"},
		},
		{
			name: "alias value",
			data: "sysctls:\n  net.core.somaxconn: &n 1024\n  net.core.optmem_max: *n\n",
			want: []string{"f.yaml:3: sysctls.net.core.optmem_max: value must be a number or a string, got an alias"},
		},
		{
			name: "sysctl name is a list",
			data: "sysctls:\n  ? [net.core.somaxconn]\n  : 1\n",
			want: []string{"f.yaml:2: sysctls: sysctl name must be a plain string, got a list"},
		},
		{
			name: "unknown top-level field",
			data: "sysctl:\n  net.core.somaxconn: 1\n",
			want: []string{"f.yaml:1: sysctl: unknown field; " + known},
		},
		{
			name: "unknown field in a rule",
			data: "rules:\n  - name: web\n    sysctl: {net.core.somaxconn: 1}\n",
			want: []string{
				"f.yaml:2: rules[0]: rule has no sysctls",
				"f.yaml:3: rules[0].sysctl: unknown field; " + knownRule,
			},
		},
		{
			name: "unknown field in match",
			data: "rules:\n  - match:\n      namespace: [web]\n    sysctls: {net.core.somaxconn: 1}\n",
			want: []string{"f.yaml:3: rules[0].match.namespace: unknown field; " + knownMatch},
		},
		{
			name: "unknown field in exclude",
			data: "exclude:\n  namespaces: [kube-system]\n  pods: [x]\n",
			want: []string{"f.yaml:3: exclude.pods: unknown field; " + knownMatch},
		},
		{
			name: "duplicate key",
			data: "sysctls:\n  net.core.somaxconn: 1\n  net.core.somaxconn: 2\n",
			want: []string{"f.yaml:3: sysctls.net.core.somaxconn: duplicate key (first at line 2)"},
		},
		{
			name: "same key in dot and slash form",
			data: "sysctls:\n  net.ipv4.conf.eth0/100.rp_filter: 1\n  net/ipv4/conf/eth0.100/rp_filter: 2\n",
			want: []string{`f.yaml:3: sysctls.net/ipv4/conf/eth0.100/rp_filter: same sysctl as "net.ipv4.conf.eth0/100.rp_filter" at line 2, written in another form`},
		},
		{
			name: "duplicate key in a rule",
			data: "rules:\n  - sysctls:\n      net.core.somaxconn: 1\n      net/core/somaxconn: 2\n",
			want: []string{`f.yaml:4: rules[0].sysctls.net/core/somaxconn: same sysctl as "net.core.somaxconn" at line 3, written in another form`},
		},
		{
			name: "duplicate top-level field",
			data: "sysctls:\n  net.core.somaxconn: 1\nmode: spec\nsysctls:\n  net.core.optmem_max: 2\n",
			want: []string{"f.yaml:4: sysctls: duplicate field (first at line 1)"},
		},
		{
			name: "duplicate field in a rule",
			data: "rules:\n  - name: a\n    name: b\n    sysctls: {net.core.somaxconn: 1}\n",
			want: []string{"f.yaml:3: rules[0].name: duplicate field (first at line 2)"},
		},
		{
			name: "path escapes",
			data: "sysctls:\n" +
				"  net/../../kernel/core_pattern: \"|/bin/sh\"\n" +
				"  net.ipv4/../..: 1\n" +
				"  /proc/sys/net/ipv4/ip_forward: 1\n" +
				"  /net/ipv4/ip_forward: 1\n" +
				"  ../kernel/core_pattern: x\n",
			want: []string{
				`f.yaml:2: sysctls.net/../../kernel/core_pattern: invalid sysctl name "net.//.//.kernel.core_pattern": ` + badName,
				`f.yaml:3: sysctls.net.ipv4/../..: invalid sysctl name "net.ipv4/../..": ` + badName,
				`f.yaml:4: sysctls./proc/sys/net/ipv4/ip_forward: invalid sysctl name ".proc.sys.net.ipv4.ip_forward": ` + badName,
				`f.yaml:5: sysctls./net/ipv4/ip_forward: invalid sysctl name ".net.ipv4.ip_forward": ` + badName,
				`f.yaml:6: sysctls.../kernel/core_pattern: invalid sysctl name "../kernel/core_pattern": ` + badName,
			},
		},
		{
			name: "bad names",
			data: "sysctls:\n  Net.IPv4.ip_forward: 1\n  net.ipv4.: 1\n  \"net.ipv4 .x\": 1\n  \"\": 1\n  \"net\\0.x\": 1\n",
			want: []string{
				`f.yaml:2: sysctls.Net.IPv4.ip_forward: invalid sysctl name "Net.IPv4.ip_forward": ` + badName,
				`f.yaml:3: sysctls.net.ipv4.: invalid sysctl name "net.ipv4.": ` + badName,
				`f.yaml:4: sysctls.net.ipv4 .x: invalid sysctl name "net.ipv4 .x": ` + badName,
				`f.yaml:5: sysctls.: empty sysctl name`,
				"f.yaml:6: sysctls.net\x00.x: invalid sysctl name \"net\\x00.x\": " + badName,
			},
		},
		{
			name: "value with a newline",
			data: "sysctls:\n  net.core.somaxconn: \"1\\n2\"\n  net.core.optmem_max: |\n    2\n  net.core.rmem_max: \"1\\r\"\n",
			want: []string{
				"f.yaml:2: sysctls.net.core.somaxconn: value contains a newline",
				"f.yaml:3: sysctls.net.core.optmem_max: value contains a newline",
				"f.yaml:5: sysctls.net.core.rmem_max: value contains a newline",
			},
		},
		{
			name: "value with NUL",
			data: "sysctls:\n  net.core.somaxconn: \"1\\0\"\n  net.core.optmem_max: \"2\\x00\"\n",
			want: []string{
				"f.yaml:2: sysctls.net.core.somaxconn: value contains a NUL byte",
				"f.yaml:3: sysctls.net.core.optmem_max: value contains a NUL byte",
			},
		},
		{
			name: "value of 1 MiB",
			data: "sysctls:\n  net.core.somaxconn: " + mib + "\n",
			want: []string{"f.yaml:2: sysctls.net.core.somaxconn: value is 1048576 bytes long; the kernel takes at most 4096"},
		},
		{
			name: "non-namespaced keys",
			data: "sysctls:\n  kernel.core_pattern: core\n  vm/swappiness: 10\n  fs.file-max: 100000\n",
			want: []string{
				"f.yaml:2: sysctls.kernel.core_pattern: kernel.core_pattern " + notNS,
				"f.yaml:3: sysctls.vm/swappiness: vm.swappiness " + notNS,
				"f.yaml:4: sysctls.fs.file-max: fs.file-max " + notNS,
			},
		},
		{
			name: "non-namespaced key with a bad value",
			data: "sysctls:\n  vm.swappiness: \"\"\n",
			want: []string{
				"f.yaml:2: sysctls.vm.swappiness: vm.swappiness " + notNS,
				"f.yaml:2: sysctls.vm.swappiness: empty value",
			},
		},
		{
			name: "kernel.hostname",
			data: "sysctls:\n  kernel.hostname: node1\n",
			want: []string{"f.yaml:2: sysctls.kernel.hostname: kernel.hostname is set by the runtime from the pod's hostname; set the pod's hostname instead"},
		},
		{
			name: "duplicate rule names",
			data: "rules:\n" +
				"  - name: web\n    sysctls: {net.core.somaxconn: 1}\n" +
				"  - name: db\n    sysctls: {net.core.somaxconn: 2}\n" +
				"  - name: web\n    sysctls: {net.core.somaxconn: 3}\n",
			want: []string{`f.yaml:6: rules[2].name: rule name "web" already used at line 2`},
		},
		{
			name: "rule with no sysctls",
			data: "rules:\n  - name: web\n    match: {namespaces: [web]}\n",
			want: []string{"f.yaml:2: rules[0]: rule has no sysctls"},
		},
		{
			name: "rule with a non-namespaced sysctl",
			data: "rules:\n  - name: web\n    sysctls:\n      vm.swappiness: 1\n",
			want: []string{"f.yaml:4: rules[0].sysctls.vm.swappiness: vm.swappiness " + notNS},
		},
		{
			name: "bad globs",
			data: "rules:\n  - match:\n      namespaces: [\"[\"]\n      runtimeHandlers: [\"run[c\"]\n    sysctls: {net.core.somaxconn: 1}\nexclude:\n  namespaces: [\"kube-[\"]\n",
			want: []string{
				`f.yaml:3: rules[0].match.namespaces: bad glob "[": syntax error in pattern`,
				`f.yaml:4: rules[0].match.runtimeHandlers: bad glob "run[c": syntax error in pattern`,
				`f.yaml:7: exclude.namespaces: bad glob "kube-[": syntax error in pattern`,
			},
		},
		{
			name: "selector fields of the wrong type",
			data: "exclude:\n  namespaces: kube-system\n  labels: [a]\n  runtimeHandlers: [[kata]]\n",
			want: []string{
				`f.yaml:2: exclude.namespaces: must be a list of names or globs, got "kube-system"`,
				"f.yaml:3: exclude.labels: must be a mapping of label: value, got a list",
				"f.yaml:4: exclude.runtimeHandlers: must be a string, got a list",
			},
		},
		{
			name: "label problems",
			data: "exclude:\n  labels:\n    app: web\n    app: db\n    tier: {a: b}\n    zone: ~\n",
			want: []string{
				"f.yaml:4: exclude.labels.app: duplicate label",
				"f.yaml:5: exclude.labels.tier: must be a string, got a mapping",
				`f.yaml:6: exclude.labels.zone: must be a string, got "~"`,
			},
		},
		{
			name: "mode bogus",
			data: "mode: bogus\n",
			want: []string{`f.yaml:1: mode: "bogus" is not one of: auto, spec, namespace`},
		},
		{
			name: "onError bogus",
			data: "onError: bogus\n",
			want: []string{`f.yaml:1: onError: "bogus" is not one of: fail, warn`},
		},
		{
			name: "onLookupError bogus",
			data: "onLookupError: warn\n",
			want: []string{`f.yaml:1: onLookupError: "warn" is not one of: skip, fail`},
		},
		{
			name: "onMissedDeadline bogus",
			data: "onMissedDeadline: fail\n",
			want: []string{`f.yaml:1: onMissedDeadline: "fail" is not one of: proceed, refuse`},
		},
		{
			name: "runningPods bogus",
			data: "runningPods: always\n",
			want: []string{`f.yaml:1: runningPods: "always" is not one of: converge, keep`},
		},
		{
			name: "mode not a string",
			data: "mode: [spec]\nonError: {fail: true}\n",
			want: []string{
				"f.yaml:1: mode: must be a string, got a list",
				"f.yaml:2: onError: must be a string, got a mapping",
			},
		},
		{
			name: "multiple YAML documents",
			data: "sysctls:\n  net.core.somaxconn: 1\n---\nsysctls:\n  net.core.optmem_max: 2\n",
			want: []string{"f.yaml:3: more than one YAML document; put everything in one"},
		},
		{
			name: "invalid YAML after the first document",
			data: "sysctls:\n  net.core.somaxconn: 1\n---\n- [\n",
			want: []string{"f.yaml:4: not valid YAML: line 4: did not find expected node content"},
		},
		{
			name: "several problems, all in line order",
			data: "" +
				"mode: bogus\n" + // 1
				"sysctls:\n" + // 2
				"  vm.swappiness: 10\n" + // 3
				"  net.core.somaxconn: true\n" + // 4
				"  net.core.somaxconn: 2\n" + // 5
				"rules:\n" + // 6
				"  - name: a\n" + // 7
				"    match: {namespaces: [\"[\"], pods: [x]}\n" + // 8
				"    sysctls: {kernel.hostname: x}\n" + // 9
				"  - name: a\n" + // 10
				"unknown: 1\n" + // 11
				"onError: warn\n" + // 12
				"exclude: []\n", // 13
			want: []string{
				`f.yaml:1: mode: "bogus" is not one of: auto, spec, namespace`,
				"f.yaml:3: sysctls.vm.swappiness: vm.swappiness " + notNS,
				`f.yaml:4: sysctls.net.core.somaxconn: value "true" is a YAML boolean; write 0 or 1`,
				"f.yaml:5: sysctls.net.core.somaxconn: duplicate key (first at line 4)",
				`f.yaml:8: rules[0].match.namespaces: bad glob "[": syntax error in pattern`,
				"f.yaml:8: rules[0].match.pods: unknown field; " + knownMatch,
				"f.yaml:9: rules[0].sysctls.kernel.hostname: kernel.hostname is set by the runtime from the pod's hostname; set the pod's hostname instead",
				`f.yaml:10: rules[1].name: rule name "a" already used at line 7`,
				"f.yaml:10: rules[1]: rule has no sysctls",
				"f.yaml:11: unknown: unknown field; " + known,
				"f.yaml:13: exclude: must be a mapping, got a list",
			},
		},
	}
	if len(tests) < 30 {
		t.Fatalf("only %d cases", len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse("f.yaml", []byte(tt.data), nil)
			got := problems(t, cfg, err)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			// The full error lists them all, with a count.
			wantErr := fmt.Sprintf("invalid config (%d problem(s)):\n  %s", len(tt.want), strings.Join(tt.want, "\n  "))
			if err.Error() != wantErr {
				t.Errorf("Error() = %q, want %q", err, wantErr)
			}
		})
	}
}

func mustParse(t *testing.T, data string, check KernelChecker) *Config {
	t.Helper()
	cfg, err := Parse("f.yaml", []byte(data), check)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg
}

// An empty file, one of only blanks or comments, and an empty document are
// valid configs that set nothing: a node image may ship the plugin before
// anyone picks values.
func TestParseNoOp(t *testing.T) {
	for _, data := range []string{
		"",
		"\n\n  \t\n",
		"# nothing yet\n",
		"# a\n\n   # b\n",
		"---\n",
		"--- # nothing\n...\n",
		"~\n",
		"sysctls:\nrules:\nexclude:\n",
		"sysctls: {}\nrules: []\nexclude: {}\n",
	} {
		cfg, err := Parse("f.yaml", []byte(data), nil)
		if err != nil {
			t.Errorf("Parse(%q): %v", data, err)
			continue
		}
		want := &Config{Source: "f.yaml", Mode: runtimemode.Auto, OnError: OnErrorFail, OnLookupError: OnLookupErrorSkip, OnMissedDeadline: OnMissedDeadlineProceed, RunningPods: RunningPodsConverge, UserNamespaceRefused: RefusedSkip, TextSHA256: textDigest(data)}
		// Present-but-empty fields may give empty, non-nil values.
		if len(cfg.Sysctls) == 0 {
			cfg.Sysctls = nil
		}
		if len(cfg.Rules) == 0 {
			cfg.Rules = nil
		}
		if !reflect.DeepEqual(cfg, want) {
			t.Errorf("Parse(%q) = %+v, want %+v", data, cfg, want)
		}
		if keys := cfg.AllKeys(); len(keys) != 0 {
			t.Errorf("Parse(%q).AllKeys() = %q, want none", data, keys)
		}
	}
}

func TestParseValid(t *testing.T) {
	data := "" +
		"mode: namespace\n" + // 1
		"onError: warn\n" + // 2
		"sysctls:\n" + // 3
		"  net.ipv4.tcp_keepalive_time: 600\n" + // 4
		"  net/ipv4/conf/eth0.100/rp_filter: \"2\"\n" + // 5
		"  net.ipv4.ip_local_port_range: \"1024 65000\"\n" + // 6
		"  net.ipv4.tcp_rmem: \"4096\\t87380\\t6291456\"\n" + // 7
		"  kernel.sem: 250 32000 100 128\n" + // 8
		"  net.core.somaxconn: 4096.0\n" + // 9
		"  fs/mqueue/msg_max: 0x40\n" + // 10
		"  kernel.domainname: example.com\n" + // 11
		"rules:\n" + // 12
		"  - name: web\n" + // 13
		"    match:\n" + // 14
		"      namespaces: [\"web-*\", shop]\n" + // 15
		"      labels: {tier: frontend, \"app.kubernetes.io/name\": shop}\n" + // 16
		"      runtimeHandlers: [runc]\n" + // 17
		"    sysctls:\n" + // 18
		"      net.core.somaxconn: 8192\n" + // 19
		"      net.ipv4.tcp_keepalive_time: 300\n" + // 20
		"  - sysctls: {kernel/shm_rmid_forced: 1}\n" + // 21
		"  - name: last\n" + // 22
		"    match: {labels: {n: 1}}\n" + // 23
		"    sysctls:\n" + // 24
		"      net.core.somaxconn: 1024\n" + // 25
		"exclude:\n" + // 26
		"  namespaces: [kube-system, \"istio-*\"]\n" + // 27
		"  labels: {nri-sysctl.io/skip: \"true\"}\n" + // 28
		"  runtimeHandlers: [\"kata*\"]\n" // 29
	cfg := mustParse(t, data, nil)
	want := &Config{
		Source: "f.yaml",
		Sysctls: []Entry{
			{Key: "net.ipv4.tcp_keepalive_time", Value: "600", Line: 4},
			{Key: "net.ipv4.conf.eth0/100.rp_filter", Value: "2", Line: 5},
			{Key: "net.ipv4.ip_local_port_range", Value: "1024 65000", Line: 6},
			{Key: "net.ipv4.tcp_rmem", Value: "4096\t87380\t6291456", Line: 7},
			{Key: "kernel.sem", Value: "250 32000 100 128", Line: 8},
			{Key: "net.core.somaxconn", Value: "4096.0", Line: 9},
			{Key: "fs.mqueue.msg_max", Value: "0x40", Line: 10},
			{Key: "kernel.domainname", Value: "example.com", Line: 11},
		},
		Rules: []Rule{
			{
				Name: "web",
				Match: Selector{
					Namespaces:      []string{"web-*", "shop"},
					Labels:          map[string]string{"tier": "frontend", "app.kubernetes.io/name": "shop"},
					RuntimeHandlers: []string{"runc"},
				},
				Sysctls: []Entry{
					{Key: "net.core.somaxconn", Value: "8192", Line: 19},
					{Key: "net.ipv4.tcp_keepalive_time", Value: "300", Line: 20},
				},
				Line: 13,
			},
			{
				Name:    "rules[1]",
				Sysctls: []Entry{{Key: "kernel.shm_rmid_forced", Value: "1", Line: 21}},
				Line:    21,
			},
			{
				Name:    "last",
				Match:   Selector{Labels: map[string]string{"n": "1"}},
				Sysctls: []Entry{{Key: "net.core.somaxconn", Value: "1024", Line: 25}},
				Line:    22,
			},
		},
		Exclude: Selector{
			Namespaces:      []string{"kube-system", "istio-*"},
			Labels:          map[string]string{"nri-sysctl.io/skip": "true"},
			RuntimeHandlers: []string{"kata*"},
		},
		Mode:                 runtimemode.Namespace,
		OnError:              OnErrorWarn,
		OnLookupError:        OnLookupErrorSkip,
		OnMissedDeadline:     OnMissedDeadlineProceed,
		RunningPods:          RunningPodsConverge,
		UserNamespaceRefused: RefusedSkip,
		TextSHA256:           textDigest(data),
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("Parse =\n%+v\nwant\n%+v", cfg, want)
	}
	wantKeys := []string{
		"fs.mqueue.msg_max",
		"kernel.domainname",
		"kernel.sem",
		"kernel.shm_rmid_forced",
		"net.core.somaxconn",
		"net.ipv4.conf.eth0/100.rp_filter",
		"net.ipv4.ip_local_port_range",
		"net.ipv4.tcp_keepalive_time",
		"net.ipv4.tcp_rmem",
	}
	if got := cfg.AllKeys(); !reflect.DeepEqual(got, wantKeys) {
		t.Errorf("AllKeys() = %q, want %q", got, wantKeys)
	}
}

func TestParseModes(t *testing.T) {
	for _, tt := range []struct {
		data          string
		mode          runtimemode.Mode
		onError       string
		onLookupError string
	}{
		{"mode: auto\n", runtimemode.Auto, OnErrorFail, OnLookupErrorSkip},
		{"mode: spec\n", runtimemode.Spec, OnErrorFail, OnLookupErrorSkip},
		{"mode: namespace\nonError: fail\n", runtimemode.Namespace, OnErrorFail, OnLookupErrorSkip},
		{"onError: warn\n", runtimemode.Auto, OnErrorWarn, OnLookupErrorSkip},
		{"onLookupError: fail\n", runtimemode.Auto, OnErrorFail, OnLookupErrorFail},
		{"onLookupError: skip\n", runtimemode.Auto, OnErrorFail, OnLookupErrorSkip},
	} {
		cfg := mustParse(t, tt.data, nil)
		if cfg.Mode != tt.mode || cfg.OnError != tt.onError || cfg.OnLookupError != tt.onLookupError {
			t.Errorf("Parse(%q): mode %q, onError %q, onLookupError %q; want %q, %q, %q", tt.data, cfg.Mode, cfg.OnError, cfg.OnLookupError, tt.mode, tt.onError, tt.onLookupError)
		}
	}
}

// onMissedDeadline is its own key: onError's and onLookupError's fail do
// not set it.
func TestParseOnMissedDeadline(t *testing.T) {
	for data, want := range map[string]string{
		"":                                     OnMissedDeadlineProceed,
		"onMissedDeadline: refuse\n":           OnMissedDeadlineRefuse,
		"onMissedDeadline: proceed\n":          OnMissedDeadlineProceed,
		"onError: fail\nonLookupError: fail\n": OnMissedDeadlineProceed,
	} {
		if got := mustParse(t, data, nil).OnMissedDeadline; got != want {
			t.Errorf("Parse(%q): onMissedDeadline %q, want %q", data, got, want)
		}
	}
}

func TestLoadExample(t *testing.T) {
	cfg, err := Load("../../config/config.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Source: "../../config/config.yaml",
		Sysctls: []Entry{
			{Key: "net.ipv4.tcp_keepalive_time", Value: "600", Line: 6},
			{Key: "net.ipv4.tcp_keepalive_intvl", Value: "60", Line: 7},
			{Key: "net.ipv4.tcp_keepalive_probes", Value: "5", Line: 8},
		},
		Exclude:              Selector{Namespaces: []string{"kube-system"}},
		Mode:                 runtimemode.Auto,
		OnError:              OnErrorFail,
		OnLookupError:        OnLookupErrorSkip,
		OnMissedDeadline:     OnMissedDeadlineProceed,
		RunningPods:          RunningPodsConverge,
		UserNamespaceRefused: RefusedSkip,
		TextSHA256:           textDigest(string(readTestFile(t, "../../config/config.yaml"))),
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("Load =\n%+v\nwant\n%+v", cfg, want)
	}
}

func TestLoadExampleKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the kernel probe needs root")
	}
	if _, err := Load("../../config/config.yaml", probe.Kernel); err != nil {
		t.Fatal(err)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.yaml")
	tests := []struct {
		file string
		want string
	}{
		{dir, dir + ": cannot read config: it is a directory, not a regular file; point --config at the config file"},
		{missing, missing + ": cannot read config: open " + missing + ": no such file or directory"},
		{filepath.Join(missing, "x"), filepath.Join(missing, "x") + ": cannot read config: open " + filepath.Join(missing, "x") + ": no such file or directory"},
	}
	for _, tt := range tests {
		cfg, err := Load(tt.file, nil)
		got := problems(t, cfg, err)
		if len(got) != 1 || got[0] != tt.want {
			t.Errorf("Load(%q) = %q, want %q", tt.file, got, tt.want)
		}
	}
}

func TestLoadUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		// Root reads a mode-000 file anyway; TestLoadErrors covers a
		// directory and a missing file.
		t.Skip("root can read a mode-000 file")
	}
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte("sysctls: {}\n"), 0o000); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(file, nil)
	got := problems(t, cfg, err)
	want := []string{file + ": cannot read config: open " + file + ": permission denied"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Load = %q, want %q", got, want)
	}
}

func TestLoadParsesFileContents(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte("sysctls:\n  vm.swappiness: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(file, nil)
	got := problems(t, cfg, err)
	want := []string{file + ":2: sysctls.vm.swappiness: vm.swappiness " + notNS}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Load = %q, want %q", got, want)
	}
}

func TestManyKeys(t *testing.T) {
	const n = 10000
	var b strings.Builder
	b.WriteString("sysctls:\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  net.ipv4.conf.if%d.rp_filter: %d\n", i, i%3)
	}
	cfg := mustParse(t, b.String(), nil)
	if len(cfg.Sysctls) != n {
		t.Fatalf("got %d sysctls, want %d", len(cfg.Sysctls), n)
	}
	for _, i := range []int{0, 1, n / 2, n - 1} {
		want := Entry{Key: fmt.Sprintf("net.ipv4.conf.if%d.rp_filter", i), Value: fmt.Sprint(i % 3), Line: i + 2}
		if cfg.Sysctls[i] != want {
			t.Errorf("Sysctls[%d] = %+v, want %+v", i, cfg.Sysctls[i], want)
		}
	}
	keys := cfg.AllKeys()
	if len(keys) != n || keys[0] != "net.ipv4.conf.if0.rp_filter" || keys[1] != "net.ipv4.conf.if1.rp_filter" || keys[2] != "net.ipv4.conf.if10.rp_filter" {
		t.Errorf("AllKeys() has %d keys starting %q", len(keys), keys[:3])
	}
}

// fakeKernel is a KernelChecker that records the names it was asked about
// (sorted) and the values.
type fakeKernel struct {
	missing map[string]error
	stored  map[string]map[string]sysctl.Stored
	err     error
	calls   [][]string
	values  []map[string][]string
}

func (f *fakeKernel) check(values map[string][]string) (map[string]error, map[string]map[string]sysctl.Stored, error) {
	f.calls = append(f.calls, slices.Sorted(maps.Keys(values)))
	f.values = append(f.values, values)
	return f.missing, f.stored, f.err
}

func TestKernelCheck(t *testing.T) {
	data := "" +
		"sysctls:\n" + // 1
		"  net.ipv4.tcp_keepalive_time: 600\n" + // 2
		"  net/core/netdev_max_backlog: 1000\n" + // 3
		"  net.ipv4.tcp_keepalive_tme: 60\n" + // 4
		"rules:\n" + // 5
		"  - name: a\n" + // 6
		"    sysctls:\n" + // 7
		"      net.core.netdev_max_backlog: 2000\n" + // 8
		"      kernel.msgmax: 65536\n" + // 9
		"  - sysctls: {net.ipv4.tcp_keepalive_tme: 1}\n" // 10
	fake := &fakeKernel{missing: map[string]error{
		"net.core.netdev_max_backlog": sysctl.ErrMissing,
		"net.ipv4.tcp_keepalive_tme":  sysctl.ErrMissing,
		"not.asked.about":             sysctl.ErrMissing,
	}}
	cfg, err := Parse("f.yaml", []byte(data), fake.check)
	got := problems(t, cfg, err)
	probe := ": does not exist in a fresh pod namespace on this kernel (kernel probe; is the name misspelt?)"
	want := []string{
		"f.yaml:3: sysctls.net.core.netdev_max_backlog" + probe,
		"f.yaml:4: sysctls.net.ipv4.tcp_keepalive_tme" + probe,
		"f.yaml:8: rules[0].sysctls.net.core.netdev_max_backlog" + probe,
		"f.yaml:10: rules[1].sysctls.net.ipv4.tcp_keepalive_tme" + probe,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	wantCalls := [][]string{{
		"kernel.msgmax",
		"net.core.netdev_max_backlog",
		"net.ipv4.tcp_keepalive_time",
		"net.ipv4.tcp_keepalive_tme",
	}}
	if !reflect.DeepEqual(fake.calls, wantCalls) {
		t.Errorf("checker called with %q, want %q", fake.calls, wantCalls)
	}
}

// The probe runs even when other problems were found, so that one run
// lists everything, in line order.
func TestKernelCheckWithOtherProblems(t *testing.T) {
	data := "" +
		"sysctls:\n" + // 1
		"  net.core.netdev_max_backlog: 1000\n" + // 2
		"  vm.swappiness: 1\n" + // 3
		"  net.core.somaxconn: 1\n" + // 4
		"mode: bogus\n" // 5
	fake := &fakeKernel{missing: map[string]error{
		"net.core.netdev_max_backlog": sysctl.ErrMissing,
	}}
	cfg, err := Parse("f.yaml", []byte(data), fake.check)
	got := problems(t, cfg, err)
	want := []string{
		"f.yaml:2: sysctls.net.core.netdev_max_backlog: does not exist in a fresh pod namespace on this kernel (kernel probe; is the name misspelt?)",
		"f.yaml:3: sysctls.vm.swappiness: vm.swappiness " + notNS,
		`f.yaml:5: mode: "bogus" is not one of: auto, spec, namespace`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Only the keys that passed the other checks are probed.
	wantCalls := [][]string{{"net.core.netdev_max_backlog", "net.core.somaxconn"}}
	if !reflect.DeepEqual(fake.calls, wantCalls) {
		t.Errorf("checker called with %q, want %q", fake.calls, wantCalls)
	}
}

func TestKernelCheckNotRunOnBadYAML(t *testing.T) {
	fake := &fakeKernel{}
	cfg, err := Parse("f.yaml", []byte("sysctls: [\n"), fake.check)
	got := problems(t, cfg, err)
	want := []string{"f.yaml:1: not valid YAML: line 1: did not find expected node content"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems = %q, want %q", got, want)
	}
	if len(fake.calls) != 0 {
		t.Errorf("checker called with %q on text that is not YAML", fake.calls)
	}
}

func TestKernelCheckError(t *testing.T) {
	fake := &fakeKernel{
		missing: map[string]error{"net.core.somaxconn": sysctl.ErrMissing},
		err:     errors.New("kernel probe: cannot create throw-away namespaces (needs root): operation not permitted"),
	}
	data := "sysctls:\n  net.core.somaxconn: 1\n  vm.swappiness: 1\n"
	cfg, err := Parse("f.yaml", []byte(data), fake.check)
	got := problems(t, cfg, err)
	want := []string{
		"f.yaml: kernel probe: cannot create throw-away namespaces (needs root): operation not permitted",
		"f.yaml:3: sysctls.vm.swappiness: vm.swappiness " + notNS,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestKernelCheckPasses(t *testing.T) {
	fake := &fakeKernel{missing: map[string]error{}}
	cfg := mustParse(t, "sysctls:\n  net.core.somaxconn: 1\n", fake.check)
	if len(cfg.Sysctls) != 1 || len(fake.calls) != 1 {
		t.Errorf("config %+v, checker calls %q", cfg, fake.calls)
	}
}

func TestProblemError(t *testing.T) {
	tests := []struct {
		p    Problem
		want string
	}{
		{Problem{File: "f", Line: 3, Key: "k", Reason: "r"}, "f:3: k: r"},
		{Problem{File: "f", Key: "k", Reason: "r"}, "f: k: r"},
		{Problem{File: "f", Line: 3, Reason: "r"}, "f:3: r"},
		{Problem{File: "f", Reason: "r"}, "f: r"},
	}
	for _, tt := range tests {
		if got := tt.p.Error(); got != tt.want {
			t.Errorf("%+v.Error() = %q, want %q", tt.p, got, tt.want)
		}
	}
}

func FuzzLoad(f *testing.F) {
	for _, seed := range []string{
		"",
		"# only a comment\n",
		"sysctls:\n  net.ipv4.tcp_keepalive_time: 600\n  net/ipv4/conf/eth0.100/rp_filter: \"2\"\n",
		"rules:\n  - name: web\n    match: {namespaces: [\"web-*\"], labels: {tier: frontend}}\n    sysctls: {net.core.somaxconn: 4096}\nexclude:\n  namespaces: [kube-system]\nmode: spec\nonError: warn\n",
		"sysctls:\n  net/../../kernel/core_pattern: \"|/bin/sh\"\n  kernel.core_pattern: x\n",
		"sysctls: [\n",
		"a: 1\n---\nb: 2\n",
		"inheritFromHost: [\"net.ipv4.tcp_keepalive_*\", kernel.sem]\nsysctls: {net.core.somaxconn: 1}\n",
	} {
		f.Add([]byte(seed))
	}
	// A fixed host: what the fuzzer finds must not depend on this machine.
	useFakeHost(f, fakeHost)
	f.Fuzz(func(t *testing.T, data []byte) {
		// A checker that finds every key missing: any config that comes
		// back must then have no keys at all.
		var asked []string
		calls := 0
		check := func(values map[string][]string) (map[string]error, map[string]map[string]sysctl.Stored, error) {
			calls++
			asked = slices.Sorted(maps.Keys(values))
			m := map[string]error{}
			for n := range values {
				m[n] = sysctl.ErrMissing
			}
			return m, nil, nil
		}
		cfg, err := Parse("fuzz.yaml", data, nil)
		cfg2, err2 := Parse("fuzz.yaml", data, check)
		if calls > 1 {
			t.Fatalf("checker called %d times", calls)
		}
		if err != nil {
			if cfg != nil {
				t.Fatalf("config and error both returned: %v", err)
			}
			var ps Problems
			if !errors.As(err, &ps) || len(ps) == 0 {
				t.Fatalf("error %T %v is not a non-empty Problems", err, err)
			}
			for i, p := range ps {
				if p.File != "fuzz.yaml" || p.Reason == "" || p.Line < 0 {
					t.Fatalf("bad problem %+v", p)
				}
				if i > 0 && p.Line < ps[i-1].Line {
					t.Fatalf("problems out of line order: %v", err)
				}
			}
			if err2 == nil {
				t.Fatalf("rejected without a checker but accepted with one: %v", err)
			}
			return
		}
		if cfg == nil {
			t.Fatal("nil config and nil error")
		}
		checkConfig(t, cfg)
		if keys := cfg.AllKeys(); len(keys) > 0 || len(cfg.InheritFromHost) > 0 {
			// An inheritFromHost entry must bring a key too.
			if err2 == nil {
				t.Fatalf("keys %q and inheritFromHost %+v all missing in the kernel, yet accepted", keys, cfg.InheritFromHost)
			}
			// With inheritFromHost, the probe is also asked about
			// the host's keys.
			if len(cfg.InheritFromHost) == 0 && !reflect.DeepEqual(asked, keys) {
				t.Fatalf("checker asked about %q, want %q", asked, keys)
			}
			for _, k := range keys {
				if _, found := slices.BinarySearch(asked, k); !found {
					t.Fatalf("checker asked about %q, not about %s", asked, k)
				}
			}
		} else if err2 != nil || cfg2 == nil {
			t.Fatalf("config without keys rejected by the checker: %v", err2)
		}
	})
}

// checkConfig asserts what Parse promises about a config it returns.
func checkConfig(t *testing.T, cfg *Config) {
	t.Helper()
	entries := append([]Entry(nil), cfg.Sysctls...)
	for _, r := range cfg.Rules {
		if r.Name == "" || r.Line <= 0 {
			t.Fatalf("bad rule %+v", r)
		}
		entries = append(entries, r.Sysctls...)
		checkSelector(t, r.Match)
	}
	checkSelector(t, cfg.Exclude)
	for _, e := range entries {
		if err := sysctl.ValidateName(e.Key); err != nil {
			t.Fatalf("accepted %+v: %v", e, err)
		}
		if err := sysctl.ValidateNamespaced(e.Key); err != nil {
			t.Fatalf("accepted %+v: %v", e, err)
		}
		if err := sysctl.ValidateValue(e.Value); err != nil {
			t.Fatalf("accepted %+v: %v", e, err)
		}
		if sysctl.Normalize(e.Key) != e.Key || e.Line <= 0 {
			t.Fatalf("accepted %+v", e)
		}
		if !strings.HasPrefix(sysctl.Path(e.Key), "/proc/sys/") || strings.Contains(sysctl.Path(e.Key), "/../") {
			t.Fatalf("accepted %+v with path %s", e, sysctl.Path(e.Key))
		}
	}
	switch cfg.Mode {
	case runtimemode.Auto, runtimemode.Spec, runtimemode.Namespace:
	default:
		t.Fatalf("mode %q", cfg.Mode)
	}
	switch cfg.OnError {
	case OnErrorFail, OnErrorWarn:
	default:
		t.Fatalf("onError %q", cfg.OnError)
	}
	keys := cfg.AllKeys()
	for i := 1; i < len(keys); i++ {
		if keys[i-1] >= keys[i] {
			t.Fatalf("AllKeys not sorted and unique: %q", keys)
		}
	}
}

func checkSelector(t *testing.T, s Selector) {
	t.Helper()
	for _, g := range append(append([]string(nil), s.Namespaces...), s.RuntimeHandlers...) {
		if _, err := path.Match(g, ""); err != nil || g == "" {
			t.Fatalf("accepted glob %q: %v", g, err)
		}
	}
}

func TestParseContainerdTarget(t *testing.T) {
	cfg, err := Parse("f.yaml", []byte("containerdAddress: /run/k3s/containerd/containerd.sock\ncontainerdNamespace: k8s.io\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ContainerdAddress != "/run/k3s/containerd/containerd.sock" || cfg.ContainerdNamespace != "k8s.io" {
		t.Fatalf("got address %q namespace %q", cfg.ContainerdAddress, cfg.ContainerdNamespace)
	}
	cfg, err = Parse("f.yaml", []byte("sysctls: {net.core.somaxconn: 1024}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ContainerdAddress != "" || cfg.ContainerdNamespace != "" {
		t.Fatalf("not given, got address %q namespace %q", cfg.ContainerdAddress, cfg.ContainerdNamespace)
	}

	for _, tc := range []struct {
		text string
		want string
	}{
		{`containerdAddress: ""`, `f.yaml:1: containerdAddress: must not be empty`},
		{`containerdAddress: run/containerd.sock`, `f.yaml:1: containerdAddress: "run/containerd.sock" is not an absolute path to containerd's socket`},
		{`containerdAddress: "/run/a\nb.sock"`, `f.yaml:1: containerdAddress: must not contain NUL or a newline`},
		{`containerdAddress: [/run/containerd.sock]`, `f.yaml:1: containerdAddress: must be a string, got a list`},
		{`containerdAddress:`, `f.yaml:1: containerdAddress: must be a string, got ""`},
		{`containerdNamespace: ""`, `f.yaml:1: containerdNamespace: must not be empty`},
		{`containerdNamespace: "k8s io"`, `f.yaml:1: containerdNamespace: "k8s io" is not a containerd namespace name`},
		{`containerdNamespace: {a: b}`, `f.yaml:1: containerdNamespace: must be a string, got a mapping`},
	} {
		cfg, err := Parse("f.yaml", []byte(tc.text+"\n"), nil)
		got := problems(t, cfg, err)
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.text, got, tc.want)
		}
	}
}

func TestParseMetricsAddress(t *testing.T) {
	text := "metricsAddress: 127.0.0.1:9465\n"
	cfg, err := Parse("f.yaml", []byte(text), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MetricsAddress != "127.0.0.1:9465" {
		t.Fatalf("got %q", cfg.MetricsAddress)
	}
	// The digest of the text, as sha256sum prints it.
	if want := "854889d2bafc247fe6e471d6ffd91506dffbb85272083f95b2a5738925da96e3"; cfg.TextSHA256 != want {
		t.Fatalf("TextSHA256 = %q, want %q", cfg.TextSHA256, want)
	}
	for _, tc := range []struct {
		text string
		want string
	}{
		{`metricsAddress: ""`, `f.yaml:1: metricsAddress: must not be empty`},
		{`metricsAddress: 9465`, `f.yaml:1: metricsAddress: "9465" is not host:port (e.g. 127.0.0.1:9465)`},
		{`metricsAddress: "127.0.0.1:"`, `f.yaml:1: metricsAddress: "127.0.0.1:" is not host:port (e.g. 127.0.0.1:9465)`},
		{`metricsAddress: [":9465"]`, `f.yaml:1: metricsAddress: must be a string, got a list`},
	} {
		cfg, err := Parse("f.yaml", []byte(tc.text+"\n"), nil)
		got := problems(t, cfg, err)
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.text, got, tc.want)
		}
	}
}

// textDigest is what TextSHA256 holds for text.
func textDigest(text string) string {
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:])
}

func readTestFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParseRunningPods(t *testing.T) {
	for data, want := range map[string]string{
		"":                        RunningPodsConverge,
		"runningPods: converge\n": RunningPodsConverge,
		"runningPods: keep\n":     RunningPodsKeep,
	} {
		cfg, err := Parse("f.yaml", []byte(data), nil)
		if err != nil {
			t.Fatalf("Parse(%q): %v", data, err)
		}
		if cfg.RunningPods != want {
			t.Errorf("Parse(%q): runningPods %q, want %q", data, cfg.RunningPods, want)
		}
	}
}
