// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package converge

import (
	"reflect"
	"testing"
)

const keepalive = "net.ipv4.tcp_keepalive_time"

func set(v string) Written { return Written{Set: v, HasSet: true} }
func setOver(v, before string) Written {
	return Written{Set: v, HasSet: true, Before: before, HasBefore: true}
}
func wanted(want, live string, w Written) Key {
	return Key{Name: keepalive, Want: want, Wanted: true, Live: live, Written: w, Writable: true}
}
func unwanted(live string, w Written) Key {
	return Key{Name: keepalive, Live: live, Written: w, Writable: true, Fresh: "7200", HasFresh: true}
}

func withRuntime(k Key, v string) Key {
	k.Runtime, k.HasRuntime = v, true
	return k
}

func landing(k Key, values ...string) Key {
	k.Landing, k.StillLanding = values, true
	return k
}

// planCases are the decisions TestPlan checks, one key each.
var planCases = []struct {
	name string
	key  Key
	want Step
}{
	{
		name: "a pod running before the plugin: written, its value kept to go back to",
		key:  withFresh(wanted("600", "7200", Written{}), "7200"),
		want: Step{Action: Write, Value: "600", Reason: `"7200" -> "600"`, Remember: setOver("600", "7200")},
	},
	{
		name: "a first write over another writer's value (an init container's): left, nothing remembered",
		key:  withFresh(wanted("600", "900", Written{}), "7200"),
		want: Step{Action: LeaveToOther, Reason: `set to "900" by another writer before the plugin's first write (a fresh namespace's is "7200")`},
	},
	{
		name: "a first write over the runtime's own value: written, that value kept to go back to",
		key:  withRuntime(withFresh(Key{Name: "net.ipv4.ip_unprivileged_port_start", Want: "1024", Wanted: true, Live: "0", Writable: true}, "1024"), "0"),
		want: Step{Key: "net.ipv4.ip_unprivileged_port_start", Action: Write, Value: "1024", Reason: `"0" -> "1024"`, Remember: setOver("1024", "0")},
	},
	{
		name: "a first write over a value other than the runtime's: left",
		key:  withRuntime(withFresh(Key{Name: "net.ipv4.ip_unprivileged_port_start", Want: "1024", Wanted: true, Live: "80", Writable: true}, "1024"), "0"),
		want: Step{Key: "net.ipv4.ip_unprivileged_port_start", Action: LeaveToOther, Reason: `set to "80" by another writer before the plugin's first write (a fresh namespace's is "1024")`},
	},
	{
		name: "a first write on a key copied from the host, the host's value changed since: left, both causes named",
		key:  withFresh(Key{Name: "net.ipv4.tcp_congestion_control", Want: "bbr", Wanted: true, Live: "reno", Writable: true}, "cubic"),
		want: Step{Key: "net.ipv4.tcp_congestion_control", Action: LeaveToOther, Reason: `at "reno", not a fresh namespace's "cubic": set by another writer, or the host's value when the pod was made`},
	},
	{
		name: "a first write, a fresh namespace's value unknown: reported, nothing written",
		key:  wanted("600", "900", Written{}),
		want: Step{Action: CannotConverge, Reason: `cannot tell whether another writer set "900": a fresh namespace's value is unknown`},
	},
	{
		name: "a first write over the plugin's own landed value: written, the value before still unknown",
		key:  landing(withFresh(wanted("650", "600", Written{}), "7200"), "600"),
		want: Step{Action: Write, Value: "650", Reason: `"600" -> "650"`, Remember: set("650")},
	},
	{
		name: "a reload: the plugin's own value is replaced, the value before kept",
		key:  wanted("650", "600", setOver("600", "7200")),
		want: Step{Action: Write, Value: "650", Reason: `"600" -> "650"`, Remember: setOver("650", "7200")},
	},
	{
		name: "a spec-mode value the runtime wrote: replaced, the value before still unknown",
		key:  wanted("650", "600", set("600")),
		want: Step{Action: Write, Value: "650", Reason: `"600" -> "650"`, Remember: set("650")},
	},
	{
		name: "converged already: nothing written, the plugin holds the value from now on",
		key:  wanted("600", "600", Written{}),
		want: Step{Action: Keep, Reason: "converged", Remember: set("600")},
	},
	{
		name: "converged, the kernel printing tabs",
		key:  Key{Name: "net.ipv4.tcp_rmem", Want: "4096 131072 6291456", Wanted: true, Live: "4096\t131072\t6291456", Written: set("4096 131072 6291456"), Writable: true},
		want: Step{Key: "net.ipv4.tcp_rmem", Action: Keep, Reason: "converged", Remember: set("4096 131072 6291456")},
	},
	{
		name: "another writer changed the plugin's value: left",
		key:  wanted("650", "900", setOver("600", "7200")),
		want: Step{Action: LeaveToOther, Reason: `set to "900" by another writer since the plugin set "600"`, Remember: setOver("600", "7200")},
	},
	{
		name: "a spec-mode value that never landed (the container's creation failed): written, not left to another writer",
		key:  withFresh(wanted("600", "7200", set("600")), "7200"),
		want: Step{Action: Write, Value: "600", Reason: `"7200" -> "600"`, Remember: set("600")},
	},
	{
		name: "a fresh namespace's value stands for an unknown value before only: known, it decides",
		key:  withFresh(wanted("650", "7200", setOver("600", "100")), "7200"),
		want: Step{Action: LeaveToOther, Reason: `set to "7200" by another writer since the plugin set "600"`, Remember: setOver("600", "100")},
	},
	{
		name: "a spec-mode key that left the config, at a fresh namespace's value: nothing to put back, forgotten",
		key:  unwanted("7200", set("600")),
		want: Step{Action: Keep, Reason: `already back to "7200", a fresh namespace's value`, Forget: true},
	},
	{
		name: "another writer changed a spec-mode value: left",
		key:  wanted("650", "900", set("600")),
		want: Step{Action: LeaveToOther, Reason: `set to "900" by another writer since the plugin set "600"`, Remember: set("600")},
	},
	{
		name: "back at the value before the plugin's write: written again",
		key:  wanted("650", "7200", setOver("600", "7200")),
		want: Step{Action: Write, Value: "650", Reason: `"7200" -> "650"`, Remember: setOver("650", "7200")},
	},
	{
		name: "the pod's own value: never touched, even where the plugin would write",
		key:  Key{Name: keepalive, Want: "600", Wanted: true, Live: "30", PodOwn: true, Writable: true},
		want: Step{Action: Keep, Reason: "the pod sets it itself"},
	},
	{
		name: "a user-namespace pod's key the writer cannot reach",
		key:  Key{Name: "kernel.msgmax", Want: "65536", Wanted: true, Live: "8192"},
		want: Step{Key: "kernel.msgmax", Action: CannotConverge, Reason: "the writer cannot set it in this pod's namespace"},
	},
	{
		name: "a key that left the config goes back to its value before",
		key:  unwanted("600", setOver("600", "7000")),
		want: Step{Action: Restore, Value: "7000", Reason: `no longer managed: back to "7000", its value before the plugin's first write`, Forget: true},
	},
	{
		name: "a spec-mode key that left the config goes back to a fresh namespace's value",
		key:  unwanted("600", set("600")),
		want: Step{Action: Restore, Value: "7200", Reason: `no longer managed: back to "7200", a fresh namespace's value (the value before the plugin's is unknown)`, Forget: true},
	},
	{
		name: "a key that left the config, no value before and none fresh: reported, kept in memory",
		key:  Key{Name: "net.ipv4.conf.eth0.rp_filter", Live: "2", Written: set("2"), Writable: true},
		want: Step{Key: "net.ipv4.conf.eth0.rp_filter", Action: CannotConverge, Reason: "no longer managed, and neither its value before the plugin's nor a fresh namespace's is known", Remember: set("2")},
	},
	{
		name: "a key that left the config, changed by another writer: left, forgotten",
		key:  unwanted("900", setOver("600", "7200")),
		want: Step{Action: LeaveToOther, Reason: `set to "900" by another writer since the plugin set "600"`, Forget: true},
	},
	{
		name: "a key that left the config, already back",
		key:  unwanted("7200", setOver("600", "7200")),
		want: Step{Action: Keep, Reason: `already back to "7200"`, Forget: true},
	},
	{
		name: "a key the plugin never set, no longer wanted: not the plugin's",
		key:  unwanted("600", Written{}),
		want: Step{Action: Keep, Reason: "not the plugin's"},
	},
	{
		name: "a key that left the config where the writer cannot reach",
		key:  Key{Name: "kernel.msgmax", Live: "65536", Written: setOver("65536", "8192")},
		want: Step{Key: "kernel.msgmax", Action: CannotConverge, Reason: "no longer managed, and the writer cannot put it back in this pod's namespace", Remember: setOver("65536", "8192")},
	},
	{
		name: "a container decided before the last write landed the plugin's older value: the plugin's own, written again",
		key:  landing(wanted("650", "600", setOver("650", "7200")), "600"),
		want: Step{Action: Write, Value: "650", Reason: `"600" -> "650"`, Remember: setOver("650", "7200")},
	},
	{
		name: "another writer's value is not made the plugin's by a landing one",
		key:  landing(wanted("650", "900", setOver("650", "7200")), "600"),
		want: Step{Action: LeaveToOther, Reason: `set to "900" by another writer since the plugin set "650"`, Remember: setOver("650", "7200")},
	},
	{
		name: "a key that left the config, put back while the plugin's value may still land: kept in memory",
		key:  landing(unwanted("600", setOver("600", "7000")), "600"),
		want: Step{Action: Restore, Value: "7000", Reason: `no longer managed: back to "7000", its value before the plugin's first write`, Remember: setOver("600", "7000")},
	},
	{
		name: "a key put back to a fresh value while the plugin's may still land: that value kept as the one before",
		key:  landing(unwanted("600", set("600")), "600"),
		want: Step{Action: Restore, Value: "7200", Reason: `no longer managed: back to "7200", a fresh namespace's value (the value before the plugin's is unknown)`, Remember: setOver("600", "7200")},
	},
	{
		name: "a key already back while the plugin's value may still land: kept in memory",
		key:  landing(unwanted("7000", setOver("600", "7000")), "600"),
		want: Step{Action: Keep, Reason: `already back to "7000"`, Remember: setOver("600", "7000")},
	},
	{
		name: "the plugin's value landed late on a key put back, nothing to land after: put back, forgotten",
		key:  Key{Name: keepalive, Live: "600", Written: setOver("600", "7000"), Writable: true, Landing: []string{"600"}},
		want: Step{Action: Restore, Value: "7000", Reason: `no longer managed: back to "7000", its value before the plugin's first write`, Forget: true},
	},
}

func TestPlan(t *testing.T) {
	for _, tc := range planCases {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.want
			if want.Key == "" {
				want.Key = keepalive
			}
			got := Plan([]Key{tc.key})
			if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
				t.Errorf("Plan(%+v)\n got %+v\nwant %+v", tc.key, got, want)
			}
		})
	}
}

// A plan written and then planned again with what it remembered is
// converged: nothing more to write, so convergence never loops.
func TestPlanAfterItsOwnStepsKeepsEverything(t *testing.T) {
	keys := []Key{
		withFresh(wanted("600", "7200", Written{}), "7200"),
		{Name: "net.core.somaxconn", Want: "4096", Wanted: true, Live: "4096", Writable: true},
		{Name: "kernel.shmmni", Live: "8192", Written: setOver("8192", "4096"), Writable: true},
	}
	first := Plan(keys)
	byName := map[string]Step{}
	for _, s := range first {
		byName[s.Key] = s
	}
	for i, k := range keys {
		s := byName[k.Name]
		switch s.Action {
		case Write, Restore:
			keys[i].Live = s.Value
		}
		keys[i].Written = s.Remember
	}
	for _, s := range Plan(keys) {
		if s.Action != Keep {
			t.Errorf("after its own steps, %s: %v (%s); want keep", s.Key, s.Action, s.Reason)
		}
	}
}

func TestPlanIsSortedByKey(t *testing.T) {
	steps := Plan([]Key{
		{Name: "net.ipv4.tcp_keepalive_time", Want: "600", Wanted: true, Live: "600", Writable: true},
		{Name: "kernel.shmmni", Want: "8192", Wanted: true, Live: "4096", Writable: true},
		{Name: "net.core.somaxconn", Want: "4096", Wanted: true, Live: "4096", Writable: true},
	})
	var names []string
	for _, s := range steps {
		names = append(names, s.Key)
	}
	if want := []string{"kernel.shmmni", "net.core.somaxconn", "net.ipv4.tcp_keepalive_time"}; !reflect.DeepEqual(names, want) {
		t.Errorf("steps in the order %v, want %v", names, want)
	}
}

func TestActionNames(t *testing.T) {
	for a := Keep; a <= CannotConverge; a++ {
		if a.String() == "" {
			t.Errorf("action %d has no name", a)
		}
	}
}

// Every result has a label of its own (a metric label) and words for the
// log; every action but Keep has a result, and no two the same.
func TestKeyResults(t *testing.T) {
	labels := map[string]bool{}
	for r := range KeyResult(KeyResultCount) {
		if r.String() == "" || r.Says() == "" || labels[r.String()] {
			t.Errorf("result %d: label %q, says %q (a label empty or repeated)", r, r.String(), r.Says())
		}
		labels[r.String()] = true
	}
	seen := map[KeyResult]Action{}
	for a := Keep; a <= CannotConverge; a++ {
		r, ok := a.Result()
		if ok == (a == Keep) {
			t.Errorf("%s: has a result %v, want one for every action but keep", a, ok)
		}
		if prev, dup := seen[r]; ok && dup {
			t.Errorf("%s and %s both give %s", prev, a, r)
		}
		if ok {
			seen[r] = a
		}
	}
}

func withFresh(k Key, fresh string) Key {
	k.Fresh, k.HasFresh = fresh, true
	return k
}

// The caller reads a fresh namespace's values only for the keys NeedsFresh
// names: every other key must decide the same without them. A spec-mode
// key whose value never landed is one that needs it (make soak found such
// a pod left bare when it was not read).
func TestNeedsFresh(t *testing.T) {
	for _, tc := range planCases {
		if NeedsFresh(tc.key) {
			continue
		}
		stripped := tc.key
		stripped.Fresh, stripped.HasFresh = "", false
		if got, want := Plan([]Key{stripped}), Plan([]Key{tc.key}); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: NeedsFresh is false, but the fresh value decides it:\n without %+v\n    with %+v", tc.name, got, want)
		}
	}
	for _, tc := range []struct {
		name string
		key  Key
		want bool
	}{
		{"a spec-mode value that never landed", wanted("600", "7200", set("600")), true},
		{"a spec-mode value another writer changed", wanted("600", "900", set("600")), true},
		{"a spec-mode value in force", wanted("600", "600", set("600")), false},
		{"a spec-mode value a reload replaces", wanted("650", "600", set("600")), false},
		{"a spec-mode key that left the config", unwanted("600", set("600")), true},
		{"the value before is known", wanted("650", "7200", setOver("600", "7200")), false},
		{"never set by the plugin: its first write", wanted("600", "7200", Written{}), true},
		{"never set by the plugin, in force", wanted("600", "600", Written{}), false},
		{"never set by the plugin, no longer wanted", unwanted("600", Written{}), false},
		{"the pod's own", Key{Name: keepalive, Want: "600", Wanted: true, Live: "30", Written: set("600"), PodOwn: true}, false},
	} {
		if got := NeedsFresh(tc.key); got != tc.want {
			t.Errorf("%s: NeedsFresh = %v, want %v", tc.name, got, tc.want)
		}
	}
}
