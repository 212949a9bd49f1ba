// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
)

const profilesConfig = `
sysctls:
  net.core.somaxconn: 128
  net.ipv4.tcp_fin_timeout: 60
rules:
  - name: trading
    match: {namespaces: ["trading-*"]}
    sysctls: {net.core.somaxconn: 256, net.ipv4.tcp_keepalive_time: 900}
  - name: by-annotation
    match: {annotations: {team.example/tier: gold}}
    sysctls: {net.ipv4.tcp_keepalive_probes: 7}
profiles:
  low-latency:
    allowedNamespaces: ["trading-*"]
    sysctls: {net.ipv4.tcp_slow_start_after_idle: 0, net.core.somaxconn: 4096}
  many-conns:
    sysctls: {net.core.somaxconn: 8192, net.ipv4.tcp_fin_timeout: 15}
  kata-only:
    allowedNamespaces: ["trading-*"]
    allowedRuntimeHandlers: ["kata*"]
    sysctls: {net.ipv4.tcp_keepalive_intvl: 5}
exclude:
  annotations: {nri-sysctl.io/off: "true"}
`

func TestDecideProfiles(t *testing.T) {
	p := Compile(mustConfig(t, profilesConfig), nil)
	pod := func(ns, handler, profiles string, extra ...string) Pod {
		ann := map[string]string{}
		if profiles != "-" {
			ann[config.ProfilesAnnotation] = profiles
		}
		for i := 0; i+1 < len(extra); i += 2 {
			ann[extra[i]] = extra[i+1]
		}
		return Pod{Namespace: ns, Name: "p", RuntimeHandler: handler, Annotations: ann, Own: ownNormal}
	}
	tests := []struct {
		name         string
		pod          Pod
		own          map[string]string
		wantApplied  map[string]string
		wantSkipped  map[string]string
		wantProfiles []ProfileResult
		wantExcluded string
	}{
		{
			name:        "no annotation: defaults and rules only",
			pod:         pod("trading-a", "", "-"),
			wantApplied: map[string]string{"net.core.somaxconn": "256", "net.ipv4.tcp_fin_timeout": "60", "net.ipv4.tcp_keepalive_time": "900"},
			wantSkipped: map[string]string{},
		},
		{
			name:         "profile over rule over default",
			pod:          pod("trading-a", "", "low-latency"),
			wantApplied:  map[string]string{"net.core.somaxconn": "4096", "net.ipv4.tcp_fin_timeout": "60", "net.ipv4.tcp_keepalive_time": "900", "net.ipv4.tcp_slow_start_after_idle": "0"},
			wantSkipped:  map[string]string{},
			wantProfiles: []ProfileResult{{"low-latency", ProfileApplied, ""}},
		},
		{
			name:         "two profiles layer in annotation order: the later wins",
			pod:          pod("trading-a", "", "low-latency,many-conns"),
			wantApplied:  map[string]string{"net.core.somaxconn": "8192", "net.ipv4.tcp_fin_timeout": "15", "net.ipv4.tcp_keepalive_time": "900", "net.ipv4.tcp_slow_start_after_idle": "0"},
			wantSkipped:  map[string]string{},
			wantProfiles: []ProfileResult{{"low-latency", ProfileApplied, ""}, {"many-conns", ProfileApplied, ""}},
		},
		{
			name:         "the other order, spaces and a repeat",
			pod:          pod("trading-a", "", " many-conns , low-latency,,many-conns"),
			wantApplied:  map[string]string{"net.core.somaxconn": "4096", "net.ipv4.tcp_fin_timeout": "15", "net.ipv4.tcp_keepalive_time": "900", "net.ipv4.tcp_slow_start_after_idle": "0"},
			wantSkipped:  map[string]string{},
			wantProfiles: []ProfileResult{{"many-conns", ProfileApplied, ""}, {"low-latency", ProfileApplied, ""}},
		},
		{
			name:         "the pod's own value wins over a profile",
			pod:          pod("trading-a", "", "low-latency"),
			own:          map[string]string{"net.core.somaxconn": "1000"},
			wantApplied:  map[string]string{"net.ipv4.tcp_fin_timeout": "60", "net.ipv4.tcp_keepalive_time": "900", "net.ipv4.tcp_slow_start_after_idle": "0"},
			wantSkipped:  map[string]string{"net.core.somaxconn": SkipPodOwn.String()},
			wantProfiles: []ProfileResult{{"low-latency", ProfileApplied, ""}},
		},
		{
			name:         "not allowed in the namespace: skipped, the rest still applies",
			pod:          pod("default", "", "low-latency,many-conns"),
			wantApplied:  map[string]string{"net.core.somaxconn": "8192", "net.ipv4.tcp_fin_timeout": "15"},
			wantSkipped:  map[string]string{"profile/low-latency": "not allowed in namespace default"},
			wantProfiles: []ProfileResult{{"low-latency", ProfileNotAllowed, ""}, {"many-conns", ProfileApplied, ""}},
		},
		{
			name:         "unknown profile: skipped, defaults still apply",
			pod:          pod("default", "", "x"),
			wantApplied:  map[string]string{"net.core.somaxconn": "128", "net.ipv4.tcp_fin_timeout": "60"},
			wantSkipped:  map[string]string{"profile/x": "no such profile"},
			wantProfiles: []ProfileResult{{"x", ProfileUnknown, ""}},
		},
		{
			name:         "both allow lists must match: namespace yes, handler no",
			pod:          pod("trading-a", "runc", "kata-only"),
			wantApplied:  map[string]string{"net.core.somaxconn": "256", "net.ipv4.tcp_fin_timeout": "60", "net.ipv4.tcp_keepalive_time": "900"},
			wantSkipped:  map[string]string{"profile/kata-only": "not allowed for runtime handler runc"},
			wantProfiles: []ProfileResult{{"kata-only", ProfileNotAllowed, ""}},
		},
		{
			name:         "both allow lists must match: handler yes, namespace no",
			pod:          pod("default", "kata-qemu", "kata-only"),
			wantApplied:  map[string]string{"net.core.somaxconn": "128", "net.ipv4.tcp_fin_timeout": "60"},
			wantSkipped:  map[string]string{"profile/kata-only": "not allowed in namespace default"},
			wantProfiles: []ProfileResult{{"kata-only", ProfileNotAllowed, ""}},
		},
		{
			name:         "both allow lists match",
			pod:          pod("trading-a", "kata-qemu", "kata-only"),
			wantApplied:  map[string]string{"net.core.somaxconn": "256", "net.ipv4.tcp_fin_timeout": "60", "net.ipv4.tcp_keepalive_time": "900", "net.ipv4.tcp_keepalive_intvl": "5"},
			wantSkipped:  map[string]string{},
			wantProfiles: []ProfileResult{{"kata-only", ProfileApplied, ""}},
		},
		{
			name:         "the default runtime handler is named",
			pod:          pod("trading-a", "", "kata-only"),
			wantApplied:  map[string]string{"net.core.somaxconn": "256", "net.ipv4.tcp_fin_timeout": "60", "net.ipv4.tcp_keepalive_time": "900"},
			wantSkipped:  map[string]string{"profile/kata-only": `not allowed for runtime handler ""`},
			wantProfiles: []ProfileResult{{"kata-only", ProfileNotAllowed, ""}},
		},
		{
			name:         "a rule matches an annotation",
			pod:          pod("default", "", "-", "team.example/tier", "gold"),
			wantApplied:  map[string]string{"net.core.somaxconn": "128", "net.ipv4.tcp_fin_timeout": "60", "net.ipv4.tcp_keepalive_probes": "7"},
			wantSkipped:  map[string]string{},
			wantProfiles: nil,
		},
		{
			name:        "an annotation with another value matches no rule",
			pod:         pod("default", "", "-", "team.example/tier", "silver"),
			wantApplied: map[string]string{"net.core.somaxconn": "128", "net.ipv4.tcp_fin_timeout": "60"},
			wantSkipped: map[string]string{},
		},
		{
			name:         "exclusion by annotation wins over profiles",
			pod:          pod("trading-a", "", "low-latency", "nri-sysctl.io/off", "true"),
			wantApplied:  map[string]string{},
			wantSkipped:  map[string]string{},
			wantExcluded: "annotation nri-sysctl.io/off=true",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := p.Decide(Input{Pod: tt.pod, PodOwn: tt.own})
			if d.Excluded != tt.wantExcluded {
				t.Errorf("excluded = %q, want %q", d.Excluded, tt.wantExcluded)
			}
			if got := applied(d); !reflect.DeepEqual(got, tt.wantApplied) {
				t.Errorf("applied = %v, want %v", got, tt.wantApplied)
			}
			if got := skipped(d); !reflect.DeepEqual(got, tt.wantSkipped) {
				t.Errorf("skipped = %v, want %v", got, tt.wantSkipped)
			}
			// A profile's result carries the reason of its skip.
			var profiles []ProfileResult
			for _, r := range d.Profiles() {
				if want := tt.wantSkipped[ProfileKeyPrefix+r.Name]; r.Reason != want {
					t.Errorf("profile %s: reason %q, want its skip's %q", r.Name, r.Reason, want)
				}
				r.Reason = ""
				profiles = append(profiles, r)
			}
			if !reflect.DeepEqual(profiles, tt.wantProfiles) {
				t.Errorf("profiles = %v, want %v", profiles, tt.wantProfiles)
			}
		})
	}
}

func TestProfileSkipCodes(t *testing.T) {
	p := Compile(mustConfig(t, profilesConfig), nil)
	d := p.Decide(Input{Pod: Pod{Namespace: "default", Own: ownNormal,
		Annotations: map[string]string{config.ProfilesAnnotation: "x,low-latency"}}})
	var codes []SkipCode
	for _, s := range d.Skipped {
		codes = append(codes, s.Code)
		if !s.Code.Profile() {
			t.Errorf("%s: code %v is not a profile code", s.Key, s.Code)
		}
	}
	if want := []SkipCode{SkipProfileUnknown, SkipProfileNotAllowed}; !reflect.DeepEqual(codes, want) {
		t.Errorf("codes = %v, want %v", codes, want)
	}
	if SkipPodOwn.Profile() {
		t.Error("pod_own counts as a profile code")
	}
}

// A profile's keys are the policy's keys: a key only a profile sets is
// applied, sorted among the rest.
func TestProfileOnlyKeyIsSorted(t *testing.T) {
	p := Compile(mustConfig(t, profilesConfig), nil)
	d := p.Decide(Input{Pod: Pod{Namespace: "trading-x", Own: ownNormal,
		Annotations: map[string]string{config.ProfilesAnnotation: "low-latency"}}})
	var keys []string
	for _, s := range d.Apply {
		keys = append(keys, s.Key())
	}
	want := []string{"net.core.somaxconn", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_slow_start_after_idle"}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("keys = %v, want %v", keys, want)
	}
}

// TestProfilesAnnotationBounds: whatever a pod author writes in the
// annotation, the decision reads at most MaxProfilesAnnotationBytes and
// MaxProfilesAsked names, and a pod over a bound keeps its defaults and
// rules, with a skip that says why.
func TestProfilesAnnotationBounds(t *testing.T) {
	p := Compile(mustConfig(t, profilesConfig), nil)
	sixteen := make([]string, MaxProfilesAsked)
	for i := range sixteen {
		sixteen[i] = fmt.Sprintf("p%d", i)
	}
	tests := []struct {
		name         string
		asked        string
		wantRefused  string // a part of the reason; "" for none
		wantProfiles int
	}{
		{"at the byte bound", strings.Repeat("many-conns,", MaxProfilesAnnotationBytes/11) + strings.Repeat(" ", MaxProfilesAnnotationBytes%11), "", 1},
		{"one byte over", strings.Repeat("many-conns,", MaxProfilesAnnotationBytes/11) + strings.Repeat(" ", MaxProfilesAnnotationBytes%11+1), "1025 bytes long, over the 1024 allowed", 0},
		{"the Kubernetes limit of repeats", strings.Repeat("a,", 128*1024), "262144 bytes long", 0},
		{"the Kubernetes limit of distinct names", worstProfiles("names", 256<<10), "262144 bytes long", 0},
		{"as many names as allowed", strings.Join(sixteen, ","), "", MaxProfilesAsked},
		{"one name too many", strings.Join(sixteen, ",") + ",p16", "more than 16 profiles", 0},
		{"repeats count once", strings.Join(sixteen, ",") + "," + strings.Join(sixteen, ","), "", MaxProfilesAsked},
		{"no profile name", "many-conns,a b", `names "a b", which is no profile name`, 0},
		{"a name longer than any profile's", strings.Repeat("x", 100), `which is no profile name`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := p.Decide(Input{Pod: Pod{Namespace: "trading-a", Own: ownNormal, Annotations: map[string]string{config.ProfilesAnnotation: tt.asked}}})
			if len(d.Profiles()) != tt.wantProfiles {
				t.Errorf("%d profile results, want %d", len(d.Profiles()), tt.wantProfiles)
			}
			got := applied(d)
			if tt.wantRefused == "" {
				if d.ProfilesRefused() != "" {
					t.Fatalf("refused: %s", d.ProfilesRefused())
				}
				return
			}
			if !strings.Contains(d.ProfilesRefused(), tt.wantRefused) {
				t.Errorf("refusal %q does not say %q", d.ProfilesRefused(), tt.wantRefused)
			}
			// The defaults and the rule, no profile.
			if want := map[string]string{"net.core.somaxconn": "256", "net.ipv4.tcp_fin_timeout": "60", "net.ipv4.tcp_keepalive_time": "900"}; !reflect.DeepEqual(got, want) {
				t.Errorf("applied = %v, want %v", got, want)
			}
			if len(d.Skipped) != 1 || d.Skipped[0].Key != config.ProfilesAnnotation || d.Skipped[0].Code != SkipProfilesRefused || d.Skipped[0].Reason != d.ProfilesRefused() {
				t.Errorf("skipped = %+v, want one %s skip for the annotation", d.Skipped, SkipProfilesRefused.Label())
			}
			if len(d.ProfilesRefused()) > 200 {
				t.Errorf("the reason is %d bytes: it must not carry the pod's text", len(d.ProfilesRefused()))
			}
		})
	}
}
