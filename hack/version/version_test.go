// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	tests := []struct {
		in                          string
		semver, deb, rpm, oci, helm string
	}{
		{in: "0.2.0", semver: "0.2.0", deb: "0.2.0", rpm: "0.2.0", oci: "0.2.0", helm: "0.2.0"},
		{in: "1.10.3-rc.1", semver: "1.10.3-rc.1", deb: "1.10.3~rc.1", rpm: "1.10.3~rc.1", oci: "1.10.3-rc.1", helm: "1.10.3-rc.1"},
		{in: "0.2.0-beta-2", semver: "0.2.0-beta-2", deb: "0.2.0~beta.2", rpm: "0.2.0~beta.2", oci: "0.2.0-beta-2", helm: "0.2.0-beta-2"},
		{in: "0.2.0+g7a21e82", semver: "0.2.0+g7a21e82", deb: "0.2.0+g7a21e82", rpm: "0.2.0+g7a21e82", oci: "0.2.0_g7a21e82", helm: "0.2.0+g7a21e82"},
		{in: "0.2.0-rc.1+build-5", semver: "0.2.0-rc.1+build-5", deb: "0.2.0~rc.1+build.5", rpm: "0.2.0~rc.1+build.5", oci: "0.2.0-rc.1_build-5", helm: "0.2.0-rc.1+build-5"},
	}
	for _, tc := range tests {
		for format, want := range map[string]string{"semver": tc.semver, "deb": tc.deb, "rpm": tc.rpm, "oci": tc.oci, "helm": tc.helm} {
			got, err := Format(tc.in, format)
			if err != nil || got != want {
				t.Errorf("Format(%q, %s) = %q, %v; want %q", tc.in, format, got, err, want)
			}
		}
	}
}

func TestFormatRefuses(t *testing.T) {
	for _, in := range []string{"", "v0.2.0", "0.2", "01.2.3", "0.2.0-", "0.2.0-rc..1", "0.2.0+", "0.2.0 rc1", "7a21e82"} {
		if got, err := Format(in, "deb"); err == nil {
			t.Errorf("Format(%q) = %q, want an error", in, got)
		}
	}
	if _, err := Format("0.2.0", "tarball"); err == nil || !strings.Contains(err.Error(), "unknown format") {
		t.Errorf("unknown format: err = %v", err)
	}
}

// TestOrdering checks the reason for "~": dpkg must sort a pre-release
// before its release.
func TestOrdering(t *testing.T) {
	dpkg, err := exec.LookPath("dpkg")
	if err != nil {
		t.Skip("no dpkg here")
	}
	pre, _ := Format("0.2.0-rc.1", "deb")
	rel, _ := Format("0.2.0", "deb")
	if err := exec.Command(dpkg, "--compare-versions", pre, "lt", rel).Run(); err != nil {
		t.Errorf("dpkg does not sort %s before %s: %v", pre, rel, err)
	}
}

// TestRepositoryVersion checks the file the Makefile reads.
func TestRepositoryVersion(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("..", "..", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range formatNames() {
		if _, err := Format(strings.TrimSpace(string(text)), format); err != nil {
			t.Errorf("VERSION: %v", err)
		}
	}
}

// TestChartFollowsVersion: the chart directory carries the same version as
// VERSION, so `helm install` from a checkout and `make chart` agree.
func TestChartFollowsVersion(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("..", "..", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := Format(strings.TrimSpace(string(text)), "helm")
	if err != nil {
		t.Fatal(err)
	}
	chart, err := os.ReadFile(filepath.Join("..", "..", "config", "helm", "nri-sysctl", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"version", "appVersion"} {
		found := false
		for _, line := range strings.Split(string(chart), "\n") {
			if v, ok := strings.CutPrefix(line, key+":"); ok {
				found = true
				if got := strings.Trim(strings.TrimSpace(v), `"`); got != want {
					t.Errorf("Chart.yaml %s: %q, VERSION says %q: set it to %q", key, got, want, want)
				}
			}
		}
		if !found {
			t.Errorf("Chart.yaml has no %s", key)
		}
	}
}
