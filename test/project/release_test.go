// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package project

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// releaseTree writes, under a temporary directory, what make image,
// packages, chart and notices leave for hack/release.sh, each file holding
// its own name, with the given CHANGELOG.md; it returns the directory.
func releaseTree(t *testing.T, changelog string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"CHANGELOG.md":            changelog,
		"LICENSE":                 "the licence",
		"bin/THIRD_PARTY_NOTICES": "the notices",
		"bin/sbom/nri-sysctl-linux-amd64.cdx.json": "amd64 sbom",
		"bin/sbom/nri-sysctl-linux-arm64.cdx.json": "arm64 sbom",
		"bin/nri-sysctl":                             "amd64 binary",
		"bin/linux-arm64/nri-sysctl":                 "arm64 binary",
		"bin/nri-sysctl-image.tar":                   "image",
		"bin/nri-sysctl-1.2.3.tgz":                   "chart",
		"bin/packages/nri-sysctl_1.2.3_amd64.deb":    "deb",
		"bin/packages/nri-sysctl-1.2.3-1.x86_64.rpm": "rpm",
		"bin/packages/unrelated.txt":                 "not a package",
	}
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runRelease runs hack/release.sh in dir as the Makefile does.
func runRelease(t *testing.T, dir string) (string, error) {
	t.Helper()
	script, err := filepath.Abs(filepath.Join(root, "hack/release.sh"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(script, "bin/release/1.2.3", "1.2.3", "1.2.3", "bin/nri-sysctl-image.tar", "bin/nri-sysctl-1.2.3.tgz",
		"bin/packages", "amd64=bin/nri-sysctl", "arm64=bin/linux-arm64/nri-sysctl")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

const changelogWithRelease = `# Changelog

## [Unreleased]

- not this

## [1.2.3] - 2026-12-04

### Added

- this

## [1.2.2] - 2026-11-01

- nor this
`

func TestReleaseGathersEveryArtifactWithItsDigest(t *testing.T) {
	dir := releaseTree(t, changelogWithRelease)
	if out, err := runRelease(t, dir); err != nil {
		t.Fatalf("hack/release.sh: %v\n%s", err, out)
	}
	release := filepath.Join(dir, "bin/release/1.2.3")
	want := map[string]string{
		"nri-sysctl-1.2.3-linux-amd64":          "amd64 binary",
		"nri-sysctl-1.2.3-linux-arm64":          "arm64 binary",
		"nri-sysctl-1.2.3-linux-amd64.cdx.json": "amd64 sbom",
		"nri-sysctl-1.2.3-linux-arm64.cdx.json": "arm64 sbom",
		"nri-sysctl-image-1.2.3.oci.tar":        "image",
		"nri-sysctl-1.2.3.tgz":                  "chart",
		"nri-sysctl_1.2.3_amd64.deb":            "deb",
		"nri-sysctl-1.2.3-1.x86_64.rpm":         "rpm",
		"LICENSE":                               "the licence",
		"THIRD_PARTY_NOTICES":                   "the notices",
		"RELEASE_NOTES.md":                      "## [1.2.3] - 2026-12-04\n\n### Added\n\n- this\n",
	}
	entries, err := os.ReadDir(release)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	var names []string
	for name := range want {
		names = append(names, name)
	}
	names = append(names, "SHA256SUMS")
	sort.Strings(names)
	if strings.Join(got, "\n") != strings.Join(names, "\n") {
		t.Fatalf("the release holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(names, "\n"))
	}

	var sums []string
	for _, name := range names {
		if name == "SHA256SUMS" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(release, name))
		if err != nil {
			t.Fatal(err)
		}
		if string(data) != want[name] {
			t.Errorf("%s holds %q, want %q", name, data, want[name])
		}
		sum := sha256.Sum256(data)
		sums = append(sums, hex.EncodeToString(sum[:])+"  "+name)
	}
	data, err := os.ReadFile(filepath.Join(release, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(data), strings.Join(sums, "\n")+"\n"; got != want {
		t.Errorf("SHA256SUMS is\n%s\nwant\n%s", got, want)
	}
	if info, err := os.Stat(filepath.Join(release, "nri-sysctl-1.2.3-linux-arm64")); err != nil || info.Mode().Perm() != 0o755 {
		t.Errorf("the arm64 binary: %v, mode %v; want 0755", err, info.Mode())
	}
}

func TestReleaseRefusesAVersionTheChangelogDoesNotName(t *testing.T) {
	dir := releaseTree(t, strings.Replace(changelogWithRelease, "## [1.2.3]", "## [1.2.30]", 1))
	out, err := runRelease(t, dir)
	if err == nil {
		t.Fatalf("hack/release.sh made a release of 1.2.3 without its CHANGELOG section:\n%s", out)
	}
	if !strings.Contains(out, `CHANGELOG.md has no section "## [1.2.3]"`) {
		t.Errorf("the refusal does not name the missing section:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "bin/release/1.2.3")); !os.IsNotExist(err) {
		t.Errorf("a refused release left its directory behind (stat: %v)", err)
	}
}

func TestReleaseRefusesAMissingArtifact(t *testing.T) {
	dir := releaseTree(t, changelogWithRelease)
	if err := os.Remove(filepath.Join(dir, "bin/sbom/nri-sysctl-linux-arm64.cdx.json")); err != nil {
		t.Fatal(err)
	}
	out, err := runRelease(t, dir)
	if err == nil || !strings.Contains(out, "bin/sbom/nri-sysctl-linux-arm64.cdx.json is missing") {
		t.Fatalf("hack/release.sh without the arm64 SBOM: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "bin/release/1.2.3")); !os.IsNotExist(err) {
		t.Errorf("a refused release left its directory behind (stat: %v)", err)
	}
}
