// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"slices"
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// FuzzDecide checks the decision's safety invariants on arbitrary configs
// and pods: never a key for a namespace the pod does not own, never a
// non-namespaced key, never a key the pod set itself, never a key another
// plugin already set; profiles are each reported once, and only an allowed
// one is applied. The labels double as the pod's annotations.
func FuzzDecide(f *testing.F) {
	f.Add([]byte(rulesConfig), "web-a", "tier=frontend", "runc", uint8(0b0111), "net.core.somaxconn=1", "net.ipv4.tcp_keepalive_time=5", "")
	f.Add([]byte(baseConfig), "default", "", "", uint8(0b0010), "kernel.msgmax=1", "", "")
	f.Add([]byte(baseConfig), "kube-system", "a=b", "runsc", uint8(0b1111), "", "kernel.domainname=x", "")
	f.Add([]byte("sysctls: {net/ipv4/conf/eth0.1/rp_filter: 2, user.max_user_namespaces: 3}\n"), "x", "", "", uint8(0b1000), "net.ipv4.conf.eth0/1.rp_filter=1", "", "")
	f.Add([]byte(profilesConfig), "trading-a", "team.example/tier=gold", "kata-x", uint8(0b0111), "net.core.somaxconn=1", "", "low-latency, x,kata-only,low-latency")
	f.Add([]byte(profilesConfig), "default", "nri-sysctl.io/off=true", "", uint8(0b0111), "", "", "many-conns")
	f.Fuzz(func(t *testing.T, cfgText []byte, namespace, labels, handler string, own uint8, podOwn, existing, profiles string) {
		cfg, err := config.Parse("fuzz.yaml", cfgText, nil)
		if err != nil {
			return
		}
		p := Compile(cfg, nil)
		in := Input{
			Pod: Pod{
				Namespace: namespace, Labels: pairs(labels), Annotations: pairs(labels), RuntimeHandler: handler,
				Own: ownFromBits(own),
			},
			PodOwn:   pairs(podOwn),
			Existing: pairs(existing),
		}
		if profiles != "" {
			in.Pod.Annotations[config.ProfilesAnnotation] = profiles
		}
		d := p.Decide(in)
		if d.Excluded != "" && (len(d.Apply) != 0 || len(d.Skipped) != 0 || len(d.ProfilesAsked) != 0) {
			t.Fatalf("excluded pod got %v", d)
		}
		seen := map[string]bool{}
		for _, r := range d.Profiles() {
			if seen[r.Name] {
				t.Fatalf("profile %s reported twice: %v", r.Name, d.Profiles())
			}
			seen[r.Name] = true
			i := slices.IndexFunc(cfg.Profiles, func(pr config.Profile) bool { return pr.Name == r.Name })
			switch {
			case i < 0 && r.Result != ProfileUnknown:
				t.Fatalf("profile %s is not in the config but %s", r.Name, r.Result)
			case i >= 0 && r.Result == ProfileApplied && !allowed(cfg.Profiles[i], in.Pod):
				t.Fatalf("profile %s applied outside its allow lists", r.Name)
			}
		}
		for _, s := range d.Apply {
			ns := sysctl.NamespaceOf(s.Key())
			if ns == sysctl.NotNamespaced {
				t.Fatalf("non-namespaced key %s applied", s.Key())
			}
			if !in.Pod.Own.Has(ns) {
				t.Fatalf("%s applied to a pod without its own %s namespace", s.Key(), ns)
			}
			if _, ok := in.PodOwn[s.Key()]; ok {
				t.Fatalf("%s applied over the pod's own value", s.Key())
			}
			if _, ok := in.Existing[s.Key()]; ok {
				t.Fatalf("%s applied over another plugin's value", s.Key())
			}
			if err := sysctl.ValidateValue(s.Value()); err != nil {
				t.Fatalf("%s applied with bad value: %v", s.Key(), err)
			}
		}
	})
}

func allowed(pr config.Profile, pod Pod) bool {
	return (len(pr.AllowedNamespaces) == 0 || anyGlob(pr.AllowedNamespaces, pod.Namespace)) &&
		(len(pr.AllowedRuntimeHandlers) == 0 || anyGlob(pr.AllowedRuntimeHandlers, pod.RuntimeHandler))
}

// ownFromBits reads bits 0-3 as Net, IPC, UTS and User.
func ownFromBits(bits uint8) NamespaceSet {
	var s NamespaceSet
	for i, ns := range []sysctl.Namespace{sysctl.Net, sysctl.IPC, sysctl.UTS, sysctl.User} {
		if bits&(1<<i) != 0 {
			s = s.With(ns)
		}
	}
	return s
}

// pairs reads "k=v,k=v".
func pairs(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	return out
}
