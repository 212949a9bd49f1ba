// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/converge"
	"github.com/nri-sysctl/nri-sysctl/pkg/cri"
	"github.com/nri-sysctl/nri-sysctl/pkg/outcome"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/nri-sysctl/nri-sysctl/test/fixture"
)

func TestAuditJudge(t *testing.T) {
	pol := policy.Compile(fixture.MustParse(t, fixture.Config+`  labels: {nri-sysctl: "off"}
`), nil)
	empty := policy.Compile(fixture.MustParse(t, ""), nil)
	own := policy.Owning(sysctl.Net, sysctl.IPC, sysctl.UTS)
	plain := policy.Input{Pod: policy.Pod{Namespace: "default", Name: "web", Own: own}}
	excluded := policy.Input{Pod: policy.Pod{Namespace: "kube-system", Name: "dns", Own: own}}
	hostBoth := policy.Input{Pod: policy.Pod{Namespace: "default", Name: "host", Own: policy.Owning(sysctl.UTS)}}
	setsAll := plain
	setsAll.PodOwn = map[string]string{"net.ipv4.tcp_keepalive_time": "1", "net.ipv4.tcp_keepalive_intvl": "2", "kernel.msgmax": "3"}
	setsOne := plain
	setsOne.PodOwn = map[string]string{"net.ipv4.tcp_keepalive_intvl": "33"}
	ann := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	defaults := map[string]podns.Value{
		"net.ipv4.tcp_keepalive_time": {Value: "600"}, "net.ipv4.tcp_keepalive_intvl": {Value: "60"}, "kernel.msgmax": {Value: "16384"},
	}
	kernel := map[string]podns.Value{
		"net.ipv4.tcp_keepalive_time": {Value: "7200"}, "net.ipv4.tcp_keepalive_intvl": {Value: "75"}, "kernel.msgmax": {Value: "8192"},
	}
	ownIntvl := map[string]podns.Value{
		"net.ipv4.tcp_keepalive_time": {Value: "600"}, "net.ipv4.tcp_keepalive_intvl": {Value: "33"}, "kernel.msgmax": {Value: "16384"},
	}
	tests := []struct {
		name    string
		in      auditInput
		wantOK  bool
		wantWhy string
	}{
		// From the annotations.
		{"applied", auditInput{annotations: ann(outcome.AnnotationOutcome, outcome.Applied.String()), decision: plain}, true, "outcome applied"},
		{"nothing to apply", auditInput{annotations: ann(outcome.AnnotationOutcome, outcome.NothingToApply.String()), decision: plain}, true, "outcome nothing_to_apply"},
		{"excluded", auditInput{annotations: ann(outcome.AnnotationOutcome, outcome.Excluded.String()), decision: plain}, true, "outcome excluded"},
		{"lookup failed", auditInput{annotations: ann(outcome.AnnotationOutcome, outcome.LookupFailed.String()), policy: pol, decision: plain}, false, "outcome lookup_failed"},
		{"write failed", auditInput{annotations: ann(outcome.AnnotationOutcome, outcome.WriteFailed.String()), policy: pol, decision: plain}, false, "outcome write_failed"},
		{"unknown outcome", auditInput{annotations: ann(outcome.AnnotationOutcome, "maybe"), decision: plain}, false, `unknown outcome "maybe"`},
		{"older plugin: injected only", auditInput{annotations: ann(outcome.AnnotationInjected, "kernel.msgmax=16384"), decision: plain}, true, "without outcomes"},
		{"no annotation, no config", auditInput{annotations: ann("io.kubernetes.cri.container-type", "container"), decision: plain}, false, "no nri-sysctl annotation"},
		{"no annotation, config: would get something", auditInput{policy: pol, decision: plain}, false, "no nri-sysctl annotation"},
		{"no annotation, config: excluded namespace", auditInput{policy: pol, decision: excluded}, true, "no annotation; excluded by namespace kube-system"},
		{"no annotation, config: hostNetwork and hostIPC", auditInput{policy: pol, decision: hostBoth}, true, "no annotation; nothing to apply"},
		{"no annotation, config: pod sets every key", auditInput{policy: pol, decision: setsAll}, true, "nothing to apply"},
		{"no annotation, empty config", auditInput{policy: empty, decision: plain}, true, "nothing to apply"},
		// Live values decide over annotations.
		{"live: defaults, though not annotated (healed)", auditInput{policy: pol, decision: plain, live: defaults}, true, "live values match (3 key(s))"},
		{"live: kernel values, though annotated applied", auditInput{annotations: ann(outcome.AnnotationOutcome, outcome.Applied.String()), policy: pol, decision: plain, live: kernel},
			false, "live values: kernel.msgmax=8192, want 16384; net.ipv4.tcp_keepalive_intvl=75, want 60; net.ipv4.tcp_keepalive_time=7200, want 600"},
		{"live: the pod's own value is not expected", auditInput{policy: pol, decision: setsOne, live: ownIntvl}, true, "live values match (2 key(s))"},
		{"live: a key that cannot be read", auditInput{policy: pol, decision: plain, live: map[string]podns.Value{
			"net.ipv4.tcp_keepalive_time": {Value: "600"}, "net.ipv4.tcp_keepalive_intvl": {Value: "60"}, "kernel.msgmax": {Err: errors.New("permission denied")},
		}}, false, "kernel.msgmax: cannot read: permission denied"},
		{"live: the pod's process exited: cannot tell, not lacking", auditInput{policy: pol, decision: plain, live: map[string]podns.Value{
			"net.ipv4.tcp_keepalive_time": {Value: "600"}, "net.ipv4.tcp_keepalive_intvl": {Err: fmt.Errorf("pid 7: %w", podns.ErrSandboxExited)}, "kernel.msgmax": {Err: fmt.Errorf("pid 7: %w", podns.ErrSandboxExited)},
		}}, false, "cannot tell: the pod's process exited while audit read it"},
		{"live: a key another writer set after the plugin is listed apart, not lacking", auditInput{policy: pol, decision: plain, live: withValue(defaults, "net.ipv4.tcp_keepalive_intvl", "41"),
			state: map[string]converge.Written{"net.ipv4.tcp_keepalive_intvl": {Set: "60", HasSet: true, Before: "75", HasBefore: true}}},
			true, "live values match (2 key(s)), but for 1 left to another writer: net.ipv4.tcp_keepalive_intvl=41 (the plugin set 60)"},
		{"live: the value before the plugin's first write is not another writer's", auditInput{policy: pol, decision: plain, live: withValue(defaults, "net.ipv4.tcp_keepalive_intvl", "75"),
			state: map[string]converge.Written{"net.ipv4.tcp_keepalive_intvl": {Set: "60", HasSet: true, Before: "75", HasBefore: true}}},
			false, "live values: net.ipv4.tcp_keepalive_intvl=75, want 60"},
		{"live: a fresh namespace's value where the value before is unknown is lacking: the plugin's never landed", auditInput{policy: pol, decision: plain, live: withValue(defaults, "net.ipv4.tcp_keepalive_intvl", "75"),
			state: map[string]converge.Written{"net.ipv4.tcp_keepalive_intvl": {Set: "60", HasSet: true}}, fresh: map[string]string{"net.ipv4.tcp_keepalive_intvl": "75"}},
			false, "live values: net.ipv4.tcp_keepalive_intvl=75, want 60 (a fresh namespace's value: the plugin's never landed"},
		{"live: another value where the value before is unknown is another writer's", auditInput{policy: pol, decision: plain, live: withValue(defaults, "net.ipv4.tcp_keepalive_intvl", "41"),
			state: map[string]converge.Written{"net.ipv4.tcp_keepalive_intvl": {Set: "60", HasSet: true}}, fresh: map[string]string{"net.ipv4.tcp_keepalive_intvl": "75"}},
			true, "left to another writer: net.ipv4.tcp_keepalive_intvl=41 (the plugin set 60)"},
		{"live: the value before unknown and no fresh value read: another writer's", auditInput{policy: pol, decision: plain, live: withValue(defaults, "net.ipv4.tcp_keepalive_intvl", "75"),
			state: map[string]converge.Written{"net.ipv4.tcp_keepalive_intvl": {Set: "60", HasSet: true}}},
			true, "left to another writer: net.ipv4.tcp_keepalive_intvl=75 (the plugin set 60)"},
		{"live: excluded pod is not read", auditInput{policy: pol, decision: excluded, live: map[string]podns.Value{}}, true, "excluded by namespace kube-system"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := judge(tc.in)
			if v.ok != tc.wantOK || !strings.Contains(v.why, tc.wantWhy) || v.cannotTell != strings.Contains(tc.wantWhy, "cannot tell") {
				t.Errorf("judge = %+v, want ok=%v and %q", v, tc.wantOK, tc.wantWhy)
			}
		})
	}
}

// Live values are compared as the kernel prints them (tabs between fields),
// and ping_group_range in a user-namespace pod in host GIDs.
func TestAuditJudgeLiveValueForms(t *testing.T) {
	pol := policy.Compile(fixture.MustParse(t, "sysctls:\n  net.ipv4.ping_group_range: \"0 2147483647\"\n"), nil)
	pod := policy.Input{Pod: policy.Pod{Namespace: "default", Own: policy.Owning(sysctl.Net, sysctl.IPC, sysctl.UTS)}}
	if v := judge(auditInput{policy: pol, decision: pod, live: map[string]podns.Value{"net.ipv4.ping_group_range": {Value: "0\t2147483647"}}}); !v.ok {
		t.Errorf("tab-separated value: %+v", v)
	}
	userns := pod
	userns.Pod.Own = userns.Pod.Own.With(sysctl.User)
	userns.GIDMappings = []policy.IDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}
	if v := judge(auditInput{policy: pol, decision: userns, live: map[string]podns.Value{"net.ipv4.ping_group_range": {Value: "100000\t165535"}}}); !v.ok {
		t.Errorf("user-namespace pod, host GIDs: %+v", v)
	}
	if v := judge(auditInput{policy: pol, decision: userns, live: map[string]podns.Value{"net.ipv4.ping_group_range": {Value: "0\t65535"}}}); v.ok {
		t.Errorf("user-namespace pod, container GIDs read from the host: %+v, want lacking", v)
	}
}

func TestAuditReport(t *testing.T) {
	pod := &auditPod{namespace: "e2e", name: "down"}
	lines := []Line{
		{c: auditContainer{pod: pod, name: "app", id: "aaa"}, verdict: verdict{ok: true, why: "outcome applied"}},
		{c: auditContainer{pod: pod, name: "late", id: "bbb"}, verdict: verdict{ok: false, why: "no nri-sysctl annotation: created while the plugin was not registered"}},
	}
	var out bytes.Buffer
	if code := Print(&out, lines); code != Lacking {
		t.Fatalf("exit %d, want %d", code, Lacking)
	}
	if !strings.Contains(out.String(), "1 of 2 running container(s) lack the node's defaults:\n  e2e/down container late (bbb)\n") {
		t.Errorf("report:\n%s", out.String())
	}
	out.Reset()
	if code := Print(&out, lines[:1]); code != AllFine || !strings.Contains(out.String(), "all 1 running container(s) have the node's defaults") {
		t.Errorf("exit %d, report:\n%s", code, out.String())
	}
	// A container whose pod's process exited is "cannot
	// tell" (exit 2, and a line that says so), never LACKING; a lacking
	// one still decides the exit code.
	gone := Line{c: auditContainer{pod: pod, name: "gone", id: "ccc"}, verdict: verdict{cannotTell: true, why: "cannot tell: the pod's process exited while audit read it"}}
	out.Reset()
	if code := Print(&out, []Line{lines[0], gone}); code != Failed || strings.Contains(out.String(), "LACKING") ||
		!strings.Contains(out.String(), "UNKNOWN") || !strings.Contains(out.String(), "cannot tell for 1 of 2 running container(s)") {
		t.Errorf("exit %d, want %d; report:\n%s", code, Failed, out.String())
	}
	out.Reset()
	if code := Print(&out, []Line{lines[1], gone}); code != Lacking {
		t.Errorf("lacking and cannot tell: exit %d, want %d; report:\n%s", code, Lacking, out.String())
	}
}

// audit expects a profile's values where the pod's annotation asked for
// one, and the defaults where it did not.
func TestAuditJudgesProfiles(t *testing.T) {
	pol := policy.Compile(fixture.MustParse(t, fixture.ProfilesConfig), nil)
	own := policy.Owning(sysctl.Net, sysctl.IPC, sysctl.UTS)
	asked := policy.Input{Pod: policy.Pod{Namespace: "trading-eu", Own: own, Annotations: map[string]string{config.ProfilesAnnotation: "low-latency"}}}
	notAsked := policy.Input{Pod: policy.Pod{Namespace: "trading-eu", Own: own}}
	withProfile := map[string]podns.Value{
		"net.core.somaxconn": {Value: "4096"}, "net.ipv4.tcp_keepalive_time": {Value: "600"}, "net.ipv4.tcp_slow_start_after_idle": {Value: "0"},
	}
	if v := judge(auditInput{policy: pol, decision: asked, live: withProfile}); !v.ok {
		t.Errorf("pod that asked, with the profile's values: %+v, want ok", v)
	}
	if v := judge(auditInput{policy: pol, decision: notAsked, live: withProfile}); v.ok || !strings.Contains(v.why, "net.core.somaxconn=4096, want 1024") {
		t.Errorf("pod that did not ask, with the profile's values: %+v, want lacking somaxconn 1024", v)
	}
}

// audit decides with the pod's annotations as CRI lists them.
func TestAuditContainersCarryPodAnnotations(t *testing.T) {
	pod := &cri.Pod{ID: "p1", Namespace: "trading-eu", Name: "web", Annotations: map[string]string{config.ProfilesAnnotation: "low-latency"}}
	got, err := auditContainers(context.Background(), []cri.Container{{Pod: pod, ID: "c1", Name: "app"}}, false, "", "", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].pod.decision.Pod.Annotations[config.ProfilesAnnotation] != "low-latency" {
		t.Fatalf("audit pods = %+v, want the pod's annotations in its decision", got)
	}
}

// withValue is live with key's value replaced.
func withValue(live map[string]podns.Value, key, value string) map[string]podns.Value {
	out := make(map[string]podns.Value, len(live))
	for k, v := range live {
		out[k] = v
	}
	out[key] = podns.Value{Value: value}
	return out
}

// Fresh values are read only for keys whose value before is unknown, once
// per key in an audit; a failed read is warned of once.
func TestAuditFreshValuesReadOncePerKey(t *testing.T) {
	var asked [][]string
	var warnings strings.Builder
	fail := true
	f := freshValues{warnings: &warnings, read: func(names []string) (map[string]string, error) {
		asked = append(asked, names)
		if fail {
			return nil, errors.New("fresh namespaces: operation not permitted")
		}
		out := map[string]string{}
		for _, n := range names {
			out[n] = "fresh-" + n
		}
		return out, nil
	}}
	unknownBefore := converge.Written{Set: "60", HasSet: true}
	knownBefore := converge.Written{Set: "60", HasSet: true, Before: "75", HasBefore: true}
	if got := f.of(map[string]converge.Written{"a": unknownBefore, "b": knownBefore}); len(got) != 0 {
		t.Errorf("a failed read gave %v", got)
	}
	fail = false
	f.of(map[string]converge.Written{"a": unknownBefore})
	got := f.of(map[string]converge.Written{"a": unknownBefore, "c": unknownBefore, "d": knownBefore})
	f.of(map[string]converge.Written{"c": unknownBefore, "d": knownBefore})
	if want := [][]string{{"a"}, {"c"}}; fmt.Sprint(asked) != fmt.Sprint(want) {
		t.Errorf("read %v, want %v (each key once, only where the value before is unknown)", asked, want)
	}
	if got["c"] != "fresh-c" || len(got) != 1 {
		t.Errorf("values %v, want c's only (a's read failed)", got)
	}
	if n := strings.Count(warnings.String(), "warning:"); n != 1 {
		t.Errorf("%d warnings, want 1: %q", n, warnings.String())
	}
}
