// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// allowed are the licences a module compiled into the binary may carry:
// permissive ones, and MPL-2.0 (file-level copyleft: its notice ships,
// and the unchanged sources are public).
var allowed = []string{"Apache-2.0", "BSD-2-Clause", "BSD-3-Clause", "ISC", "MIT", "MPL-2.0"}

// module is one Go module compiled into the binary.
type module struct {
	path, version string
	// detected is what the SBOM generator found; licence what counts
	// (an override wins).
	detected []string
	licence  string
	// overridden holds the override's reason, if any.
	overridden string
}

// cycloneDX is the part of a CycloneDX JSON SBOM read here.
type cycloneDX struct {
	BOMFormat  string `json:"bomFormat"`
	Components []struct {
		Name     string          `json:"name"`
		Version  string          `json:"version"`
		Licenses []cdxLicenceRef `json:"licenses"`
		Evidence struct {
			Licenses []cdxLicenceRef `json:"licenses"`
		} `json:"evidence"`
	} `json:"components"`
}

type cdxLicenceRef struct {
	License struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"license"`
	Expression string `json:"expression"`
}

func (r cdxLicenceRef) String() string {
	return strings.TrimSpace(r.License.ID + r.License.Name + r.Expression)
}

// readSBOMs returns the modules of every SBOM, each once, sorted by path.
func readSBOMs(paths []string) ([]*module, error) {
	byKey := map[string]*module{}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var bom cycloneDX
		if err := json.Unmarshal(data, &bom); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if bom.BOMFormat != "CycloneDX" {
			return nil, fmt.Errorf("%s: not a CycloneDX SBOM (bomFormat %q)", path, bom.BOMFormat)
		}
		for _, c := range bom.Components {
			if c.Name == "std" {
				continue // Go's own: the notices' header names its licence
			}
			key := c.Name + "@" + c.Version
			m := byKey[key]
			if m == nil {
				m = &module{path: c.Name, version: c.Version}
				byKey[key] = m
			}
			for _, l := range append(c.Licenses, c.Evidence.Licenses...) {
				if s := l.String(); s != "" && !slices.Contains(m.detected, s) {
					m.detected = append(m.detected, s)
				}
			}
		}
	}
	out := make([]*module, 0, len(byKey))
	for _, m := range byKey {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *module) int { return strings.Compare(a.path+"@"+a.version, b.path+"@"+b.version) })
	return out, nil
}

// checkAgainstBinary fails unless the SBOM names exactly the modules
// compiled into binary (its build information, as go version -m lists
// them), at their versions; the SBOM's std and main module aside.
func checkAgainstBinary(sbomPath, binary string) error {
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		return err
	}
	inBinary := map[string]bool{}
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		inBinary[d.Path+"@"+d.Version] = true
	}
	modules, err := readSBOMs([]string{sbomPath})
	if err != nil {
		return err
	}
	inSBOM := map[string]bool{}
	for _, m := range modules {
		inSBOM[m.path+"@"+m.version] = true
	}
	var problems []string
	for _, k := range slices.Sorted(maps.Keys(inBinary)) {
		if !inSBOM[k] {
			problems = append(problems, fmt.Sprintf("%s: %s is compiled into %s but not in the SBOM", sbomPath, k, binary))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(inSBOM)) {
		if !inBinary[k] {
			problems = append(problems, fmt.Sprintf("%s: %s is in the SBOM but not compiled into %s", sbomPath, k, binary))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

// readOverrides reads MODULE LICENCE REASON lines; # starts a comment. In
// LICENCE, "_AND_" stands for " AND " between two licences.
func readOverrides(path string) (map[string][2]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string][2]string{}
	s := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; s.Scan(); n++ {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 3 {
			return nil, fmt.Errorf("%s:%d: want MODULE LICENCE REASON, got %q", path, n, line)
		}
		out[fields[0]] = [2]string{strings.ReplaceAll(fields[1], "_AND_", " AND "), strings.Join(fields[2:], " ")}
	}
	return out, s.Err()
}

// decideLicences sets each module's licence: its override, else the one
// licence detected. Every module without a single allowed licence is an
// error, and all of them are listed.
func decideLicences(modules []*module, overrides map[string][2]string) error {
	var problems []string
	for _, m := range modules {
		if o, ok := overrides[m.path]; ok {
			m.licence, m.overridden = o[0], o[1]
		} else if len(m.detected) == 1 {
			m.licence = m.detected[0]
		}
		switch {
		case m.licence == "" && len(m.detected) == 0:
			problems = append(problems, fmt.Sprintf("%s %s: licence unknown (none detected): set it in the overrides file, with the reason", m.path, m.version))
		case m.licence == "":
			problems = append(problems, fmt.Sprintf("%s %s: licence unclear (detected %s): set it in the overrides file, with the reason", m.path, m.version, strings.Join(m.detected, ", ")))
		case !allAllowed(m.licence):
			problems = append(problems, fmt.Sprintf("%s %s: licence %s is not allowed (allowed: %s)", m.path, m.version, m.licence, strings.Join(allowed, ", ")))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

// allAllowed tells whether every licence of an SPDX "A AND B" expression
// is allowed.
func allAllowed(expression string) bool {
	for _, id := range strings.Split(expression, " AND ") {
		if !slices.Contains(allowed, strings.TrimSpace(id)) {
			return false
		}
	}
	return true
}

// moduleDir is where the module cache holds a module's sources (go mod
// download: already there after a build, else from the module proxy).
func moduleDir(path, version string) (string, error) {
	out, err := exec.Command("go", "mod", "download", "-json", path+"@"+version).Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %w", path, version, err)
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		return "", err
	}
	if info.Error != "" || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s@%s: %s", path, version, info.Error)
	}
	return info.Dir, nil
}

// isLicenceFile tells whether a module's top-level file is a licence or
// notice text.
func isLicenceFile(name string) bool {
	upper := strings.ToUpper(name)
	for _, prefix := range []string{"LICENSE", "LICENCE", "COPYING", "NOTICE", "PATENTS"} {
		if strings.HasPrefix(upper, prefix) {
			return true
		}
	}
	return false
}

// notices is the notices file: a header, then each module with its
// licence and the licence texts found at its top level.
func notices(modules []*module, dirOf func(path, version string) (string, error)) (string, error) {
	var b strings.Builder
	b.WriteString("Third-party notices of nri-sysctl\n\n")
	b.WriteString("nri-sysctl is licensed under the Apache License 2.0 (LICENSE). The binary\n")
	b.WriteString("also holds the Go modules below, each under its own licence, whose texts follow.\n")
	b.WriteString("The Go standard library and runtime are under the Go licence (BSD-3-Clause),\n")
	b.WriteString("https://go.dev/LICENSE.\n\n")
	for _, m := range modules {
		fmt.Fprintf(&b, "- %s %s: %s\n", m.path, m.version, m.licence)
	}
	for _, m := range modules {
		dir, err := dirOf(m.path, m.version)
		if err != nil {
			return "", err
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return "", err
		}
		var texts []string
		for _, e := range entries {
			if e.Type().IsRegular() && isLicenceFile(e.Name()) {
				texts = append(texts, e.Name())
			}
		}
		if len(texts) == 0 {
			return "", fmt.Errorf("%s %s: no licence text at the top of %s", m.path, m.version, dir)
		}
		fmt.Fprintf(&b, "\n================================================================================\n%s %s (%s)", m.path, m.version, m.licence)
		if m.overridden != "" {
			fmt.Fprintf(&b, "; licence set by hand: %s", m.overridden)
		}
		b.WriteString("\n")
		for _, name := range texts {
			data, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&b, "\n--- %s\n\n%s", name, strings.TrimRight(string(data), "\n")+"\n")
		}
	}
	return b.String(), nil
}
