// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/plugin/internal/trusteddir"
	"github.com/nri-sysctl/nri-sysctl/test/fixture"
)

// README.md's "A short config": its config, run through the commands it
// shows (validate, then explain), gives the output it shows. The config's
// path in the commands is replaced by where the test wrote the config.
func TestReadmeShortConfig(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the README's commands probe the kernel, which needs root")
	}
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	section := readmeSection(t, string(readme), "## A short config")
	blocks := regexp.MustCompile("(?s)```(\\w*)\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) != 3 || blocks[0][1] != "yaml" || blocks[1][1] != "sh" {
		t.Fatalf("README's short config: want a yaml block, an sh block of commands and their output; found %d blocks", len(blocks))
	}
	cfgText, commands, wantOutput := blocks[0][2], blocks[1][2], blocks[2][2]
	path := trusteddir.WriteConfig(t, cfgText)

	// It is the shipped config but for the rule, which the shipped one
	// has commented out.
	shipped, err := os.ReadFile("../../../config/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fromReadme, fromShipped := fixture.MustParse(t, cfgText), fixture.MustParse(t, string(shipped))
	values := func(entries []config.Entry) map[string]string {
		m := map[string]string{}
		for _, e := range entries {
			m[e.Key] = e.Value
		}
		return m
	}
	if !maps.Equal(values(fromReadme.Sysctls), values(fromShipped.Sysctls)) || !slices.Equal(fromReadme.Exclude.Namespaces, fromShipped.Exclude.Namespaces) || len(fromShipped.Rules) != 0 || len(fromReadme.Rules) != 1 {
		t.Errorf("README's short config is not the shipped config/config.yaml with one rule: README %v, exclude %v, %d rule(s); shipped %v, exclude %v, %d rule(s)",
			values(fromReadme.Sysctls), fromReadme.Exclude.Namespaces, len(fromReadme.Rules), values(fromShipped.Sysctls), fromShipped.Exclude.Namespaces, len(fromShipped.Rules))
	}

	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(commands), "\n") {
		line, _, _ = strings.Cut(line, "#")
		lines = append(lines, strings.TrimSpace(line))
	}
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "nri-sysctl validate ") || !strings.HasPrefix(lines[1], "nri-sysctl explain ") {
		t.Fatalf("README's commands: want validate then explain, got %q", lines)
	}
	for i, line := range lines {
		args := strings.Fields(strings.ReplaceAll(line, "/etc/nri-sysctl/config.yaml", path))[1:]
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 0 {
			t.Fatalf("%s: exit %d\n%s", line, code, stderr.String())
		}
		if i == 1 && stdout.String() != wantOutput {
			t.Errorf("%s prints:\n%s\nREADME shows:\n%s", line, stdout.String(), wantOutput)
		}
	}
}

// readmeSection is the text under heading, up to the next heading of its
// level.
func readmeSection(t *testing.T, doc, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("README.md has no %q", heading)
	}
	if next := strings.Index(rest, "\n## "); next >= 0 {
		rest = rest[:next]
	}
	return rest
}
