// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// semverPattern is semver.org's grammar: MAJOR.MINOR.PATCH, then an optional
// pre-release after "-" and optional build metadata after "+". Numeric parts
// have no leading zeros.
var semverPattern = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?` +
	`(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// Version is a parsed semantic version.
type Version struct {
	Core       string // 1.2.3
	PreRelease string // rc.1, or empty
	Build      string // build metadata, or empty
}

// Parse checks text against semver and splits it.
func Parse(text string) (Version, error) {
	m := semverPattern.FindStringSubmatch(text)
	if m == nil {
		return Version{}, fmt.Errorf("%q is not a semantic version (MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD], https://semver.org)", text)
	}
	return Version{Core: m[1] + "." + m[2] + "." + m[3], PreRelease: m[4], Build: m[5]}, nil
}

// formats maps each format to its rule. Each format has rules of its own:
//   - semver and helm: the text as it is (Helm chart versions are semver);
//   - deb and rpm: a pre-release sorts before its release only after "~"
//     (dpkg and rpm >= 4.10), and "-" is their revision separator;
//   - oci: a tag is [A-Za-z0-9_.-] only, so "+" becomes "_", as Helm does
//     for charts pushed to OCI registries.
var formats = map[string]func(Version) string{
	"semver": Version.String,
	"helm":   Version.String,
	"deb":    Version.packageVersion,
	"rpm":    Version.packageVersion,
	"oci": func(v Version) string {
		return strings.ReplaceAll(v.String(), "+", "_")
	},
}

func formatNames() []string {
	names := make([]string, 0, len(formats))
	for name := range formats {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Format parses text and writes it in format.
func Format(text, format string) (string, error) {
	rule, ok := formats[format]
	if !ok {
		return "", fmt.Errorf("unknown format %q (one of %s)", format, strings.Join(formatNames(), ", "))
	}
	v, err := Parse(text)
	if err != nil {
		return "", err
	}
	return rule(v), nil
}

func (v Version) String() string {
	s := v.Core
	if v.PreRelease != "" {
		s += "-" + v.PreRelease
	}
	if v.Build != "" {
		s += "+" + v.Build
	}
	return s
}

// packageVersion is the upstream version of a .deb or an .rpm. A "-" in
// the pre-release (semver allows it) becomes "." for the same reason.
func (v Version) packageVersion() string {
	s := v.Core
	if v.PreRelease != "" {
		s += "~" + strings.ReplaceAll(v.PreRelease, "-", ".")
	}
	if v.Build != "" {
		s += "+" + strings.ReplaceAll(v.Build, "-", ".")
	}
	return s
}
