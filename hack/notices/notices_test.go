// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Unknown, unclear and disallowed licences each fail, naming the module;
// an override settles a misread one.
func TestDecideLicences(t *testing.T) {
	modules, err := readSBOMs([]string{"testdata/sbom.json"})
	if err != nil {
		t.Fatal(err)
	}
	err = decideLicences(modules, map[string][2]string{"example.com/misread": {"BSD-3-Clause", "read by hand"}})
	if err == nil {
		t.Fatal("no error for the unknown, unclear and GPL modules")
	}
	for _, want := range []string{
		"example.com/none v0.4.0: licence unknown",
		"example.com/two v0.3.0: licence unclear (detected MIT, Apache-2.0)",
		"example.com/gpl v0.5.0: licence GPL-3.0-only is not allowed",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	for _, ok := range []string{"example.com/mit", "example.com/misread"} {
		if strings.Contains(err.Error(), ok) {
			t.Errorf("%s is named, but its licence is settled:\n%v", ok, err)
		}
	}
	if m := modules[1]; m.path != "example.com/misread" || m.licence != "BSD-3-Clause" || m.overridden != "read by hand" {
		t.Errorf("overridden module %+v", m)
	}
}

// The shipped overrides file parses, and an "_AND_" licence is two.
func TestOverridesFile(t *testing.T) {
	o, err := readOverrides("overrides.txt")
	if err != nil {
		t.Fatal(err)
	}
	if got := o["gopkg.in/yaml.v3"][0]; got != "Apache-2.0 AND MIT" || !allAllowed(got) {
		t.Errorf("yaml.v3's licence %q, want Apache-2.0 AND MIT, allowed", got)
	}
	if allAllowed("MIT AND GPL-3.0-only") {
		t.Error("an expression with GPL is allowed")
	}
}

// The notices list every module with its licence, and carry each
// module's licence and notice texts.
func TestNoticesCarryTheTexts(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "LICENSE"), []byte("MIT text\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "NOTICE"), []byte("notice text\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("not a licence\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	modules := []*module{{path: "example.com/mit", version: "v1.0.0", licence: "MIT"}}
	text, err := notices(modules, func(string, string) (string, error) { return dir, nil })
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"- example.com/mit v1.0.0: MIT", "--- LICENSE\n\nMIT text", "--- NOTICE\n\nnotice text"} {
		if !strings.Contains(text, want) {
			t.Errorf("notices lack %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "not a licence") {
		t.Error("the README was copied in")
	}
	// A module with no licence text fails.
	empty := t.TempDir()
	if _, err := notices(modules, func(string, string) (string, error) { return empty, nil }); err == nil || !strings.Contains(err.Error(), "no licence text") {
		t.Errorf("err %v, want no licence text", err)
	}
}

// An SBOM must name exactly the binary's modules: this test binary holds
// none but the standard library, so the fixture's modules are extra, and
// an SBOM of std alone matches it.
func TestCheckAgainstBinary(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	err = checkAgainstBinary("testdata/sbom.json", self)
	if err == nil || !strings.Contains(err.Error(), "example.com/mit@v1.0.0 is in the SBOM but not compiled into") {
		t.Errorf("err %v, want the fixture's modules named as not compiled in", err)
	}
	stdOnly := filepath.Join(t.TempDir(), "std.json")
	if err := os.WriteFile(stdOnly, []byte(`{"bomFormat": "CycloneDX", "components": [{"name": "std", "version": "go1.26.8"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkAgainstBinary(stdOnly, self); err != nil {
		t.Errorf("an SBOM of std alone against a binary of std alone: %v", err)
	}
}
