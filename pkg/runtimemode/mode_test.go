// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package runtimemode

import (
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

func TestDecide(t *testing.T) {
	tests := []struct {
		rt   Runtime
		want Mode
	}{
		// The version table, for runtimes that do not report their NRI.
		{Runtime{Name: "containerd", Version: "2.4.2"}, Spec},
		{Runtime{Name: "containerd", Version: "v2.3.0"}, Spec},
		{Runtime{Name: "containerd", Version: "2.3.7"}, Spec},
		{Runtime{Name: "containerd", Version: "3.0"}, Spec},
		// Every 2.2 release vendors NRI v0.11.0 and panics on sysctl adjustments.
		{Runtime{Name: "containerd", Version: "2.2.1"}, Namespace},
		{Runtime{Name: "containerd", Version: "v2.2.9"}, Namespace},
		{Runtime{Name: "containerd", Version: "2.2.0"}, Namespace},
		{Runtime{Name: "containerd", Version: "2.1.9+unknown"}, Namespace},
		{Runtime{Name: "containerd", Version: "2.0.14"}, Namespace},
		{Runtime{Name: "containerd", Version: "v1.7.36"}, Namespace},
		{Runtime{Name: "containerd", Version: "1.7.25"}, Namespace},
		{Runtime{Name: "containerd", Version: "1.6.9"}, Namespace},
		{Runtime{Name: "containerd", Version: ""}, Namespace},
		{Runtime{Name: "containerd", Version: "main"}, Namespace},
		{Runtime{Name: "containerd", Version: "2.x.1"}, Namespace},
		// A reported NRI version decides first.
		{Runtime{Name: "containerd", Version: "main", NRIVersion: "v0.12.3"}, Spec},
		{Runtime{Name: "containerd", Version: "2.4.2", NRIVersion: "v0.11.0"}, Namespace},
		{Runtime{Name: "containerd", Version: "2.1.0", NRIVersion: "v0.13.0"}, Spec},
		{Runtime{Name: "containerd", Version: "2.4.2", NRIVersion: "garbage"}, Spec},
		// CRI-O is not known to apply sysctl adjustments: namespace mode.
		{Runtime{Name: "cri-o", Version: "1.35.0"}, Namespace},
		{Runtime{Name: "CRI-O", Version: "1.36.0", NRIVersion: "v0.12.0"}, Namespace},
		{Runtime{Name: "podman", Version: "9.9.9"}, Namespace},
		{Runtime{}, Namespace},
	}
	for _, tc := range tests {
		got, why := Decide(tc.rt)
		if got != tc.want {
			t.Errorf("Decide(%+v) = %s (%s), want %s", tc.rt, got, why, tc.want)
		}
		if why == "" {
			t.Errorf("Decide(%+v) gave no reason", tc.rt)
		}
	}
}

// The reason names the NRI the release vendors (1.7 has v0.8.0 from 1.7.26;
// its earlier patches, which the table spans with v0.3.0, vendored v0.3 to
// v0.6: the mode is the same).
func TestDecideNamesTheVendoredNRI(t *testing.T) {
	for version, nri := range map[string]string{"1.7.26": "v0.8.0", "v1.7.36": "v0.8.0", "2.1.9": "v0.8.0", "2.2.10": "v0.11.0", "2.3.7": "v0.12.0"} {
		if _, why := Decide(Runtime{Name: "containerd", Version: version}); !strings.Contains(why, "NRI "+nri+" ") {
			t.Errorf("containerd %s: reason %q, want it to name NRI %s", version, why, nri)
		}
	}
}

func TestDecideSaysWhy22IsNamespace(t *testing.T) {
	_, why := Decide(Runtime{Name: "containerd", Version: "2.2.1"})
	if !strings.Contains(why, "crashes") || !strings.Contains(why, "v0.11.0") {
		t.Errorf("reason %q does not say that NRI v0.11.0 crashes", why)
	}
}

func TestRefuseForced(t *testing.T) {
	tests := []struct {
		mode    Mode
		rt      Runtime
		refused bool
	}{
		{Spec, Runtime{Name: "containerd", Version: "2.2.9"}, true},
		{Spec, Runtime{Name: "containerd", Version: "2.2.1"}, true},
		{Spec, Runtime{Name: "containerd", Version: "2.4.2", NRIVersion: "v0.11.2"}, true},
		{Spec, Runtime{Name: "containerd", Version: "2.2.9", NRIVersion: "v0.12.0"}, false},
		{Namespace, Runtime{Name: "containerd", Version: "2.2.9"}, false},
		{Spec, Runtime{Name: "containerd", Version: "2.4.2"}, false},
		// Old NRI drops adjustments silently; forcing spec there harms
		// nothing but the pods' defaults (the modes e2e guard uses it).
		{Spec, Runtime{Name: "containerd", Version: "2.1.9"}, false},
		{Spec, Runtime{Name: "cri-o", Version: "1.34.0"}, false},
		{Spec, Runtime{Name: "cri-o", Version: "1.35.2"}, true},
		{Spec, Runtime{Name: "cri-o", Version: "1.36.3"}, true},
	}
	for _, tc := range tests {
		err := RefuseForced(tc.mode, tc.rt)
		if (err != nil) != tc.refused {
			t.Errorf("RefuseForced(%s, %+v) = %v, want refused=%v", tc.mode, tc.rt, err, tc.refused)
		}
		if err != nil && !strings.Contains(err.Error(), tc.rt.Version) {
			t.Errorf("refusal %q does not name the runtime version %s", err, tc.rt.Version)
		}
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string]Mode{"": Auto, "auto": Auto, "spec": Spec, "namespace": Namespace} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"bogus", "Spec", "ns"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

func TestModeWriter(t *testing.T) {
	if Spec.Writer() != sysctl.WriterInPod || Namespace.Writer() != sysctl.WriterHost {
		t.Fatal("spec mode is runc in the pod, namespace mode host root")
	}
}
