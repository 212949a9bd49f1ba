// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"reflect"
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

func mustConfig(t testing.TB, text string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(text), nil)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// ownAll is a pod with every namespace of its own.
var ownAll = Owning(sysctl.Net, sysctl.IPC, sysctl.UTS, sysctl.User)

// ownNormal is an ordinary pod: no user namespace.
var ownNormal = Owning(sysctl.Net, sysctl.IPC, sysctl.UTS)

const baseConfig = `
sysctls:
  net.ipv4.tcp_keepalive_time: 600
  net.ipv4.tcp_keepalive_intvl: "60"
  kernel.msgmax: 16384
  kernel.domainname: example.org
  user.max_user_namespaces: 100
  net.ipv4.ip_unprivileged_port_start: 1024
`

func applied(d Decision) map[string]string {
	out := map[string]string{}
	for _, s := range d.Apply {
		out[s.Key()] = s.Value()
	}
	return out
}

func skipped(d Decision) map[string]string {
	out := map[string]string{}
	for _, s := range d.Skipped {
		out[s.Key] = s.Reason
	}
	return out
}

func TestDecideNamespaces(t *testing.T) {
	p := Compile(mustConfig(t, baseConfig), nil)
	hostNet := SkipHostNamespace.String() + " (network)"
	hostIPC := SkipHostNamespace.String() + " (ipc)"
	hostUTS := SkipHostNamespace.String() + " (uts)"
	hostUser := SkipHostNamespace.String() + " (user)"
	tests := []struct {
		name        string
		own         NamespaceSet
		wantApplied map[string]string
		wantSkipped map[string]string
	}{
		{
			name: "every namespace of its own gets everything",
			own:  ownAll,
			wantApplied: map[string]string{
				"net.ipv4.tcp_keepalive_time": "600", "net.ipv4.tcp_keepalive_intvl": "60",
				"kernel.msgmax": "16384", "kernel.domainname": "example.org",
				"user.max_user_namespaces": "100", "net.ipv4.ip_unprivileged_port_start": "1024",
			},
			wantSkipped: map[string]string{},
		},
		{
			name: "ordinary pod: no user.* without a user namespace",
			own:  ownNormal,
			wantApplied: map[string]string{
				"net.ipv4.tcp_keepalive_time": "600", "net.ipv4.tcp_keepalive_intvl": "60",
				"kernel.msgmax": "16384", "kernel.domainname": "example.org",
				"net.ipv4.ip_unprivileged_port_start": "1024",
			},
			wantSkipped: map[string]string{"user.max_user_namespaces": hostUser},
		},
		{
			name: "hostNetwork pod gets no net.*",
			own:  Owning(sysctl.IPC, sysctl.UTS),
			wantApplied: map[string]string{
				"kernel.msgmax": "16384", "kernel.domainname": "example.org",
			},
			wantSkipped: map[string]string{
				"net.ipv4.tcp_keepalive_time": hostNet, "net.ipv4.tcp_keepalive_intvl": hostNet,
				"net.ipv4.ip_unprivileged_port_start": hostNet, "user.max_user_namespaces": hostUser,
			},
		},
		{
			name: "hostIPC pod gets no IPC keys",
			own:  Owning(sysctl.Net, sysctl.UTS),
			wantApplied: map[string]string{
				"net.ipv4.tcp_keepalive_time": "600", "net.ipv4.tcp_keepalive_intvl": "60",
				"kernel.domainname": "example.org", "net.ipv4.ip_unprivileged_port_start": "1024",
			},
			wantSkipped: map[string]string{"kernel.msgmax": hostIPC, "user.max_user_namespaces": hostUser},
		},
		{
			name: "host UTS pod gets no kernel.domainname",
			own:  Owning(sysctl.Net, sysctl.IPC),
			wantApplied: map[string]string{
				"net.ipv4.tcp_keepalive_time": "600", "net.ipv4.tcp_keepalive_intvl": "60",
				"kernel.msgmax": "16384", "net.ipv4.ip_unprivileged_port_start": "1024",
			},
			wantSkipped: map[string]string{"kernel.domainname": hostUTS, "user.max_user_namespaces": hostUser},
		},
		{
			name:        "all host namespaces (no namespace list at all) get nothing",
			own:         Owning(),
			wantApplied: map[string]string{},
			wantSkipped: map[string]string{
				"net.ipv4.tcp_keepalive_time": hostNet, "net.ipv4.tcp_keepalive_intvl": hostNet,
				"net.ipv4.ip_unprivileged_port_start": hostNet, "kernel.msgmax": hostIPC,
				"kernel.domainname": hostUTS, "user.max_user_namespaces": hostUser,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(Input{Pod: Pod{Namespace: "default", Own: tc.own}})
			if got := applied(d); !reflect.DeepEqual(got, tc.wantApplied) {
				t.Errorf("applied = %v, want %v", got, tc.wantApplied)
			}
			if got := skipped(d); !reflect.DeepEqual(got, tc.wantSkipped) {
				t.Errorf("skipped = %v, want %v", got, tc.wantSkipped)
			}
		})
	}
}

func TestDecidePrecedence(t *testing.T) {
	p := Compile(mustConfig(t, baseConfig), nil)
	tests := []struct {
		name        string
		podOwn      map[string]string
		existing    map[string]string
		wantApplied map[string]string
		wantSkipped map[string]string
	}{
		{
			name:   "pod's own value wins, key by key",
			podOwn: map[string]string{"net.ipv4.tcp_keepalive_intvl": "33"},
			wantApplied: map[string]string{
				"net.ipv4.tcp_keepalive_time": "600", "kernel.msgmax": "16384",
				"kernel.domainname": "example.org", "net.ipv4.ip_unprivileged_port_start": "1024",
			},
			wantSkipped: map[string]string{"net.ipv4.tcp_keepalive_intvl": SkipPodOwn.String()},
		},
		{
			// The lookup leaves out containerd's implicit keys when it can
			// tell them apart, so a node default replaces containerd's 0.
			name: "containerd's implicit key is not the pod's: the node default wins",
			wantApplied: map[string]string{
				"net.ipv4.tcp_keepalive_time": "600", "net.ipv4.tcp_keepalive_intvl": "60",
				"kernel.msgmax": "16384", "kernel.domainname": "example.org",
				"net.ipv4.ip_unprivileged_port_start": "1024",
			},
			wantSkipped: map[string]string{},
		},
		{
			name:   "a pod that sets ip_unprivileged_port_start itself keeps it",
			podOwn: map[string]string{"net.ipv4.ip_unprivileged_port_start": "500"},
			wantApplied: map[string]string{
				"net.ipv4.tcp_keepalive_time": "600", "net.ipv4.tcp_keepalive_intvl": "60",
				"kernel.msgmax": "16384", "kernel.domainname": "example.org",
			},
			wantSkipped: map[string]string{"net.ipv4.ip_unprivileged_port_start": SkipPodOwn.String()},
		},
		{
			name:     "a key another plugin already set is kept",
			existing: map[string]string{"kernel.msgmax": "9999"},
			wantApplied: map[string]string{
				"net.ipv4.tcp_keepalive_time": "600", "net.ipv4.tcp_keepalive_intvl": "60",
				"kernel.domainname": "example.org", "net.ipv4.ip_unprivileged_port_start": "1024",
			},
			wantSkipped: map[string]string{"kernel.msgmax": SkipExisting.String()},
		},
		{
			name:     "the pod's own value is reported before an existing one",
			podOwn:   map[string]string{"kernel.msgmax": "1"},
			existing: map[string]string{"kernel.msgmax": "2"},
			wantApplied: map[string]string{
				"net.ipv4.tcp_keepalive_time": "600", "net.ipv4.tcp_keepalive_intvl": "60",
				"kernel.domainname": "example.org", "net.ipv4.ip_unprivileged_port_start": "1024",
			},
			wantSkipped: map[string]string{"kernel.msgmax": SkipPodOwn.String()},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(Input{Pod: Pod{Namespace: "default", Own: ownNormal}, PodOwn: tc.podOwn, Existing: tc.existing})
			if got := applied(d); !reflect.DeepEqual(got, tc.wantApplied) {
				t.Errorf("applied = %v, want %v", got, tc.wantApplied)
			}
			got := skipped(d)
			delete(got, "user.max_user_namespaces")
			if !reflect.DeepEqual(got, tc.wantSkipped) {
				t.Errorf("skipped = %v, want %v", got, tc.wantSkipped)
			}
		})
	}
}

const rulesConfig = `
sysctls:
  net.core.somaxconn: 1000
  net.ipv4.tcp_keepalive_time: 600
rules:
  - name: web
    match: {namespaces: ["web-*"]}
    sysctls: {net.core.somaxconn: 2000, net.ipv4.tcp_fin_timeout: 20}
  - name: frontends
    match: {labels: {tier: frontend}}
    sysctls: {net.core.somaxconn: 3000}
  - name: web-frontends-on-runc
    match: {namespaces: ["web-*"], labels: {tier: frontend}, runtimeHandlers: ["runc"]}
    sysctls: {net.ipv4.tcp_keepalive_time: 30}
exclude:
  namespaces: ["kube-*"]
  runtimeHandlers: ["runsc"]
  labels: {nri-sysctl: "off"}
`

func TestDecideRulesAndExclusions(t *testing.T) {
	p := Compile(mustConfig(t, rulesConfig), nil)
	tests := []struct {
		name         string
		pod          Pod
		wantApplied  map[string]string
		wantExcluded string
	}{
		{
			name:        "no rule matches: node defaults",
			pod:         Pod{Namespace: "default"},
			wantApplied: map[string]string{"net.core.somaxconn": "1000", "net.ipv4.tcp_keepalive_time": "600"},
		},
		{
			name:        "namespace glob rule adds and overrides",
			pod:         Pod{Namespace: "web-shop"},
			wantApplied: map[string]string{"net.core.somaxconn": "2000", "net.ipv4.tcp_keepalive_time": "600", "net.ipv4.tcp_fin_timeout": "20"},
		},
		{
			name:        "label rule",
			pod:         Pod{Namespace: "default", Labels: map[string]string{"tier": "frontend"}},
			wantApplied: map[string]string{"net.core.somaxconn": "3000", "net.ipv4.tcp_keepalive_time": "600"},
		},
		{
			name:        "label value must match exactly",
			pod:         Pod{Namespace: "default", Labels: map[string]string{"tier": "backend"}},
			wantApplied: map[string]string{"net.core.somaxconn": "1000", "net.ipv4.tcp_keepalive_time": "600"},
		},
		{
			name:        "later rule wins key by key; earlier rule's other keys stay",
			pod:         Pod{Namespace: "web-shop", Labels: map[string]string{"tier": "frontend"}},
			wantApplied: map[string]string{"net.core.somaxconn": "3000", "net.ipv4.tcp_keepalive_time": "600", "net.ipv4.tcp_fin_timeout": "20"},
		},
		{
			name:        "every field of a match must hold (runtime handler too)",
			pod:         Pod{Namespace: "web-shop", Labels: map[string]string{"tier": "frontend"}, RuntimeHandler: "runc"},
			wantApplied: map[string]string{"net.core.somaxconn": "3000", "net.ipv4.tcp_keepalive_time": "30", "net.ipv4.tcp_fin_timeout": "20"},
		},
		{
			name:         "excluded namespace glob",
			pod:          Pod{Namespace: "kube-system"},
			wantApplied:  map[string]string{},
			wantExcluded: "namespace kube-*",
		},
		{
			name:         "excluded runtime handler",
			pod:          Pod{Namespace: "web-shop", RuntimeHandler: "runsc"},
			wantApplied:  map[string]string{},
			wantExcluded: "runtime handler runsc",
		},
		{
			name:         "excluded label",
			pod:          Pod{Namespace: "default", Labels: map[string]string{"nri-sysctl": "off"}},
			wantApplied:  map[string]string{},
			wantExcluded: "label nri-sysctl=off",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.pod.Own = ownNormal
			d := p.Decide(Input{Pod: tc.pod})
			if got := applied(d); !reflect.DeepEqual(got, tc.wantApplied) {
				t.Errorf("applied = %v, want %v", got, tc.wantApplied)
			}
			if d.Excluded != tc.wantExcluded {
				t.Errorf("excluded = %q, want %q", d.Excluded, tc.wantExcluded)
			}
			if got := p.Excluded(tc.pod); got != tc.wantExcluded {
				t.Errorf("Excluded() = %q, want %q", got, tc.wantExcluded)
			}
		})
	}
}

func TestDecideIsSortedAndStable(t *testing.T) {
	p := Compile(mustConfig(t, rulesConfig), nil)
	in := Input{Pod: Pod{Namespace: "web-a", Own: ownNormal}}
	first := p.Decide(in)
	var keys []string
	for _, s := range first.Apply {
		keys = append(keys, s.Key())
	}
	if want := "net.core.somaxconn,net.ipv4.tcp_fin_timeout,net.ipv4.tcp_keepalive_time"; strings.Join(keys, ",") != want {
		t.Fatalf("keys = %v, want %s", keys, want)
	}
	for i := 0; i < 20; i++ {
		if again := p.Decide(in); !reflect.DeepEqual(again, first) {
			t.Fatalf("decision changed between calls: %v vs %v", again, first)
		}
	}
}

func TestEmptyPolicy(t *testing.T) {
	p := Compile(mustConfig(t, ""), nil)
	if !p.Empty() {
		t.Fatal("empty config should give an empty policy")
	}
	if d := p.Decide(Input{Pod: Pod{Own: ownAll}}); len(d.Apply) != 0 || len(d.Skipped) != 0 {
		t.Fatalf("empty policy decided %+v", d)
	}
}

func TestSlashKeysAreNormalized(t *testing.T) {
	p := Compile(mustConfig(t, "sysctls:\n  net/ipv4/conf/eth0.100/rp_filter: 2\n"), nil)
	d := p.Decide(Input{Pod: Pod{Own: ownNormal}, PodOwn: map[string]string{}})
	if got := applied(d); !reflect.DeepEqual(got, map[string]string{"net.ipv4.conf.eth0/100.rp_filter": "2"}) {
		t.Fatalf("applied = %v", got)
	}
	d = p.Decide(Input{Pod: Pod{Own: ownNormal}, PodOwn: map[string]string{"net.ipv4.conf.eth0/100.rp_filter": "1"}})
	if len(d.Apply) != 0 {
		t.Fatalf("pod's own (normalized) value should win, applied %v", applied(d))
	}
}

func TestNamespaceSet(t *testing.T) {
	s := Owning(sysctl.Net, sysctl.User, sysctl.NotNamespaced)
	for ns, want := range map[sysctl.Namespace]bool{sysctl.Net: true, sysctl.User: true, sysctl.IPC: false, sysctl.UTS: false, sysctl.NotNamespaced: false} {
		if got := s.Has(ns); got != want {
			t.Errorf("Owning(net, user).Has(%v) = %v, want %v", ns, got, want)
		}
	}
	if Owning().Has(sysctl.NotNamespaced) || Owning().With(sysctl.NotNamespaced) != Owning() {
		t.Error("NotNamespaced must never be owned")
	}
}

func TestMatchedRules(t *testing.T) {
	p := Compile(mustConfig(t, `
sysctls: {net.core.somaxconn: 1000}
rules:
  - name: web
    match: {namespaces: ["web-*"]}
    sysctls: {net.core.somaxconn: 2000}
  - name: big
    match: {labels: {backlog: big}}
    sysctls: {net.core.somaxconn: 3000}
  - sysctls: {net.ipv4.tcp_keepalive_time: 600}
exclude:
  namespaces: [kube-system]
`), nil)
	tests := []struct {
		pod  Pod
		want []string
	}{
		{Pod{Namespace: "batch"}, []string{"rules[2]"}},
		{Pod{Namespace: "web-a"}, []string{"web", "rules[2]"}},
		{Pod{Namespace: "web-a", Labels: map[string]string{"backlog": "big"}}, []string{"web", "big", "rules[2]"}},
		// Exclusion is Decide's business: the rules still match.
		{Pod{Namespace: "kube-system", Labels: map[string]string{"backlog": "big"}}, []string{"big", "rules[2]"}},
	}
	for _, tc := range tests {
		if got := p.MatchedRules(tc.pod); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%+v: matched %q, want %q", tc.pod, got, tc.want)
		}
	}
}
